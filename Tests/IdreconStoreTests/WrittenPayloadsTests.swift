import Foundation
import GRDB
@testable import IdreconLog
import Testing

/// The payload leaves an append wrote are dropped from the page cache once `kept` events behind
/// the log's end, never those of the newest `kept`, each once.
@Suite struct WrittenPayloadsTests {
    /// `event_payloads` as the log lays it out, in small pages: 20 rows or so to a leaf.
    private static func append(_ queue: DatabaseQueue, _ seqs: ClosedRange<Int>) throws {
        try queue.inTransaction { db in
            for seq in seqs {
                try db.execute(sql: "INSERT INTO event_payloads VALUES (?, ?)",
                               arguments: [seq, String(repeating: "p", count: 150 + seq % 50)])
            }
            return .commit
        }
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
    }

    /// The table's leaves in key order, with their rows.
    private static func leaves(_ queue: DatabaseQueue) throws -> [(page: UInt32, rows: Int)] {
        try queue.read { db in
            try Row.fetchAll(db, sql: """
                SELECT pageno, ncell FROM dbstat WHERE name = 'event_payloads' AND pagetype = 'leaf' ORDER BY path
                """).map { (UInt32($0[0] as Int64), $0[1] as Int) }
        }
    }

    @Test func checkpointedLeavesBehindTheKeptAreDroppedOnce() throws {
        let dir = TempDir()
        let path = dir.path("payloads.sqlite")
        var queue: DatabaseQueue? = try DatabaseQueue(path: path)
        try queue!.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA page_size = 4096")
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "CREATE TABLE event_payloads (seq INTEGER PRIMARY KEY, payload TEXT NOT NULL)")
        }
        try Self.append(queue!, 1...100)
        let kept: Int64 = 3_000
        var payloads = try #require(try queue!.read { db in try WrittenPayloads(db, path: path, kept: kept) })
        try Self.append(queue!, 101...12_000)
        let first = payloads.dropCheckpointed().flatMap { Array($0) }
        #expect(payloads.dropCheckpointed().isEmpty, "nothing new: nothing dropped again")
        try Self.append(queue!, 12_001...20_000)
        let second = payloads.dropCheckpointed().flatMap { Array($0) }
        #expect(Set(first).isDisjoint(with: second))

        // What the kernel holds, before `dbstat` reads every page again.
        queue = nil
        let resident = try residentPages(path)
        queue = try DatabaseQueue(path: path)
        let leaves = try Self.leaves(queue!)
        let dropped = first + second
        // Leaves of the table only, from the first written after the start (rows 1...100 stay), in key order.
        let order = Dictionary(uniqueKeysWithValues: leaves.enumerated().map { ($1.page, $0) })
        let positions = dropped.map { order[$0] }
        #expect(!positions.contains(nil))
        #expect(positions.compactMap { $0 } == positions.compactMap { $0 }.sorted())
        #expect(positions.first! ?? 0 <= 10)
        // None of the newest `kept` rows' leaves; all of the others but the last runs of 128 leaves.
        var rows = 0
        let newest = Set(leaves.reversed().prefix { leaf in
            defer { rows += leaf.rows }
            return rows < kept
        }.map(\.page))
        #expect(newest.isDisjoint(with: dropped))
        #expect(dropped.count >= leaves.count - newest.count - 2 * 128 - 10)

        // A file in memory (tmpfs) is its pages, every one resident: nothing to drop there.
        guard resident.contains(false) else { return }
        let pagesPerLeaf = 4096 / Int(sysconf(Int32(_SC_PAGESIZE)))
        func cached(_ leaf: UInt32) -> Bool { resident[(Int(leaf) - 1) * pagesPerLeaf] }
        #expect(dropped.filter(cached).count <= dropped.count / 20, "dropped from the page cache")
        #expect(newest.filter(cached).count >= newest.count * 9 / 10, "the newest stay")
    }
}
