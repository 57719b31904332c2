import Foundation
import GRDB
import IdreconLog
import Testing

/// `BulkInsert` binds its rows' texts from a buffer of its own, and a text that no longer fits
/// what a statement's run has left as SQLite's copy: either way a row must hold the bytes given.
@Suite struct BulkInsertTests {
    /// Rows of every kind of text: none, empty, inline in a `String` (≤ 15 bytes), on the heap,
    /// non-ASCII, and long enough that 128 rows overflow the buffer several times.
    static func value(_ i: Int) -> String? {
        switch i % 6 {
        case 0: nil
        case 1: ""
        case 2: "a\(i)"
        case 3: "é-\(i)-" + String(repeating: "ü", count: 40)
        case 4: String(repeating: "\(i % 10)", count: 3_000)
        default: "tfb:\(i)-0123456789abcdef0123456789abcdef"
        }
    }

    @Test func everyTextIsStoredAsGiven() throws {
        let db = try DatabaseQueue()
        let count = 1_000 // 7 statements of 128 rows, then single rows
        try db.write { db in
            try db.execute(sql: "CREATE TABLE t (k INTEGER PRIMARY KEY, a TEXT, b TEXT) STRICT")
            let insert = try BulkInsert(cached: db, into: "t", "k, a, b")
            try insert.insert(count: count) { i, binder in
                binder.add(i)
                binder.add(Self.value(i))
                let other = Array((Self.value(i + 1) ?? "").utf8)
                other.withUnsafeBytes { binder.add(copying: $0) }
            }
        }
        let rows = try db.read { db in try Row.fetchAll(db, sql: "SELECT k, a, b FROM t ORDER BY k") }
        #expect(rows.count == count)
        for (i, row) in rows.enumerated() {
            let a: String? = row["a"], b: String = row["b"]
            #expect(a.map { Array($0.utf8) } == Self.value(i).map { Array($0.utf8) })
            #expect(Array(b.utf8) == Array((Self.value(i + 1) ?? "").utf8))
        }
    }

    /// One row's values through `RowSink`: what a projection binds live and packs for a bulk load.
    static func row<S: RowSink>(_ i: Int, _ sink: inout S) {
        sink.add(i)
        sink.add(Self.value(i))
        sink.add(i % 3 == 0 ? nil : Int64(i) * 1_000_000_007)
        sink.add("u:", Self.value(i + 1) ?? "")
        sink.add(joining: (0..<(i % 4)).compactMap { Self.value(i + $0) }, separator: UInt8(ascii: ","))
        Array((Self.value(i + 2) ?? "").utf8).withUnsafeBufferPointer { sink.add(utf8: $0) }
    }

    /// Rows packed (`PackedRows`) are stored as the same rows bound one by one.
    @Test func packedRowsAreStoredAsBoundOnes() throws {
        let db = try DatabaseQueue()
        let count = 1_000
        let columns = "k, a, n, p, j, u"
        try db.write { db in
            for table in ["bound", "packed"] {
                try db.execute(sql: """
                    CREATE TABLE \(table) (k INTEGER PRIMARY KEY, a TEXT, n INTEGER, p TEXT, j TEXT, u TEXT)
                    """)
            }
            let bound = try BulkInsert(cached: db, into: "bound", columns)
            try bound.insert(count: count) { i, binder in Self.row(i, &binder) }
            var packed = PackedRows()
            for i in 0..<count { Self.row(i, &packed) }
            try BulkInsert(cached: db, into: "packed", columns).insert(packed)
        }
        let (bound, packed) = try db.read { db in
            (try Row.fetchAll(db, sql: "SELECT k, a, n, p, j, u FROM bound ORDER BY k"),
             try Row.fetchAll(db, sql: "SELECT k, a, n, p, j, u FROM packed ORDER BY k"))
        }
        #expect(bound.count == count)
        #expect(packed == bound)
        let joined: String? = bound[3]["j"]
        #expect(joined.map { Array($0.utf8) } == Array([3, 4, 5].compactMap(Self.value).joined(separator: ",").utf8))
    }
}
