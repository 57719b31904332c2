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
}
