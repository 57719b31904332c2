import Foundation
import GRDB
@testable import IdreconLog
import Testing

/// The walk of a B-tree's interior pages names the leaves SQLite's own `dbstat` lists, in key
/// order, for tables (by rowid range too) and indexes.
@Suite struct BTreePagesTests {
    /// A database of three-level B-trees (small pages: 1,000 leaves need only 20,000 rows).
    private static func database(_ dir: TempDir) throws -> (DatabaseQueue, String) {
        let path = dir.path("pages.sqlite")
        let queue = try DatabaseQueue(path: path)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA page_size = 4096")
            try db.execute(sql: "VACUUM")
            try db.execute(sql: "CREATE TABLE t (seq INTEGER PRIMARY KEY, name TEXT NOT NULL, body TEXT NOT NULL)")
            try db.execute(sql: "CREATE INDEX t_name ON t (name)")
            // Rows of two tables written in turn, so that their pages alternate in the file as the log's do.
            try db.execute(sql: "CREATE TABLE other (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            try db.inTransaction {
                for seq in 1...20_000 {
                    try db.execute(
                        sql: "INSERT INTO t VALUES (?, ?, ?)",
                        arguments: [seq, "name-\(seq * 7_919 % 20_000)-" + String(repeating: "n", count: 100),
                                    String(repeating: "x", count: 150)])
                    try db.execute(
                        sql: "INSERT INTO other VALUES (?, ?)", arguments: [seq, String(repeating: "y", count: 150)])
                }
                return .commit
            }
        }
        return (queue, path)
    }

    private static func dbstatLeaves(_ db: Database, _ name: String) throws -> [UInt32] {
        try Int64.fetchAll(db, sql: "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path",
                           arguments: [name]).map { UInt32($0) }
    }

    private static func walk(
        _ pages: BTreePages, keys: ClosedRange<Int64> = Int64.min...Int64.max
    ) -> ([UInt32], [Int64]) {
        var leaves: [UInt32] = [], lowest: [Int64] = []
        let walked = pages.forEachLeafRun(keys: keys, maxRun: 8) { low, run in
            #expect(run.count <= 8)
            leaves += Array(run)
            lowest.append(low)
            return true
        }
        #expect(walked)
        return (leaves, lowest)
    }

    @Test func aTablesAndAnIndexsLeavesAreDbstats() throws {
        let dir = TempDir()
        let (queue, path) = try Self.database(dir)
        try queue.read { db in
            for name in ["t", "t_name", "other"] {
                let pages = try #require(try BTreePages(db, path: path, bTree: name))
                let expected = try Self.dbstatLeaves(db, name)
                #expect(expected.count > 400, "a three-level tree")
                #expect(Self.walk(pages).0 == expected)
            }
            #expect(try BTreePages(db, path: path, bTree: "missing") == nil)
        }
    }

    @Test func aRangeOfRowidsNamesTheLeavesThatHoldIt() throws {
        let dir = TempDir()
        let (queue, path) = try Self.database(dir)
        try queue.read { db in
            let pages = try #require(try BTreePages(db, path: path, bTree: "t"))
            let all = try Self.dbstatLeaves(db, "t")
            let (first, firstLows) = Self.walk(pages, keys: 1...10_000)
            let (second, secondLows) = Self.walk(pages, keys: 10_001...20_000)
            // The halves meet at the leaf that holds both 10,000 and 10,001, or at none.
            let joined = first.last == second.first ? first + second.dropFirst() : first + second
            #expect(joined == all)
            #expect(firstLows.first == 1 && secondLows.first == 10_001)
            #expect(firstLows == firstLows.sorted() && secondLows == secondLows.sorted())
            // A leaf holds 20 rows or so: a range of them, one or two.
            let (few, _) = Self.walk(pages, keys: 5_000...5_010)
            #expect((1...2).contains(few.count))
            // Past the last key, the rightmost leaf, which would hold it.
            #expect(Self.walk(pages, keys: 30_000...40_000).0 == [all.last!])
        }
    }
}
