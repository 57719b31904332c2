import Foundation
import GRDB
import GRDBSQLite
@testable import IdreconLog
@testable import IdreconStore
import Testing

/// The log's unique keys in sorted runs (`KeyRuns`): whatever the transactions, rollbacks and
/// writers, every key added is found again, the runs hold exactly the keys added, and no tier
/// keeps `fanOut` sealed runs. Small runs, so that seals and merges of several tiers happen.
/// The keys' rows (the log's, for `UniqueKeys`) are those of `test_keys`.
@Suite struct KeyRunsTests {
    static let shape = KeyRuns.Shape(firstCapacity: 5, fanOut: 3)
    static let source = KeyRuns.Source(sql: "SELECT seq, key_hash FROM test_keys WHERE seq >= ?") { $0.int(1) }

    /// A new database with `test_keys`; `pageSize`, when given, its pages' size (small pages make
    /// small chunks, and filters that overflow).
    static func database(pageSize: Int? = nil) throws -> DatabaseQueue {
        let queue = try DatabaseQueue()
        if let pageSize {
            try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA page_size = \(pageSize); VACUUM") }
        }
        try Schema.migrator.migrate(queue)
        try queue.write { db in try db.execute(sql: "CREATE TABLE test_keys (seq INTEGER PRIMARY KEY, key_hash INTEGER NOT NULL)") }
        return queue
    }

    static func runs(_ db: Database, cache: inout KeyRuns.Cache, shape: KeyRuns.Shape = shape) throws -> KeyRuns {
        try KeyRuns(db, table: "nonce_runs", source: source, cache: &cache, shape: shape)
    }

    /// One writer's transactions, in which keys are added, some rolled back, with the cache kept
    /// as `EventStore` keeps it: from the last transaction, committed or not.
    struct Writer {
        var cache = KeyRuns.Cache()

        /// Adds `keys` (hash, seq) with their rows in one transaction; `commit: false` rolls it back.
        mutating func add(_ keys: [(hash: Int64, seq: Int64)], to queue: DatabaseQueue, commit: Bool,
                          shape: KeyRuns.Shape = KeyRunsTests.shape) throws {
            struct Rollback: Error {}
            do {
                try queue.write { db in
                    var runs = try KeyRunsTests.runs(db, cache: &cache, shape: shape)
                    for key in keys {
                        try db.execute(sql: "INSERT INTO test_keys (seq, key_hash) VALUES (?, ?)", arguments: [key.seq, key.hash])
                        runs.add(hash: key.hash, seq: key.seq)
                    }
                    try runs.finish(db, into: &cache)
                    if !commit { throw Rollback() }
                }
            } catch is Rollback {}
        }
    }

    @Test(arguments: [1, 2, 3, 4])
    func everyKeyAddedIsFoundAgain(seed: UInt64) throws {
        _ = try Self.addAndFindEveryKey(seed: seed, shape: Self.shape)
    }

    /// The same with a covering filter that may not grow past two blocks (102 keys): once full, new
    /// runs are left to their own filters, and it is not made again.
    @Test(arguments: [5, 6])
    func everyKeyAddedIsFoundAgainPastTheLargestCoveringFilter(seed: UInt64) throws {
        let shape = KeyRuns.Shape(
            firstCapacity: Self.shape.firstCapacity, fanOut: Self.shape.fanOut, coveringBits: 1024)
        let uncoveredAtLargest = try Self.addAndFindEveryKey(seed: seed, shape: shape)
        #expect(uncoveredAtLargest > 0)
    }

    /// Random transactions of two writers in turn, some rolled back, each followed by a lookup of
    /// every hash and a check of the runs' rows. Returns how many lookups found the covering filter
    /// at its largest with runs it does not cover.
    static func addAndFindEveryKey(seed: UInt64, shape: KeyRuns.Shape) throws -> Int {
        var uncoveredAtLargest = 0
        let queue = try Self.database()
        var rng = SeededGenerator(seed: seed)
        var writers = [Writer(), Writer()] // two processes writing in turn
        var model: [Int64: Set<Int64>] = [:]
        var seq: Int64 = 0
        for _ in 0..<120 {
            let count = Int(rng.next() % 9)
            // Hashes from a small range, so that keys share them as colliding keys would.
            let keys = (0..<count).map { _ -> (hash: Int64, seq: Int64) in
                seq += 1
                return (Int64(rng.next() % 400) - 200, seq)
            }
            let commit = rng.next() % 5 != 0
            let writer = Int(rng.next() % 2)
            try writers[writer].add(keys, to: queue, commit: commit, shape: shape)
            if commit { for key in keys { model[key.hash, default: []].insert(key.seq) } }

            try queue.read { db in
                var cache = writers[Int(rng.next() % 2)].cache
                let runs = try Self.runs(db, cache: &cache, shape: shape)
                if let covering = runs.covering {
                    #expect(covering.capacity <= shape.coveringBits / BloomFilter.bitsPerKey)
                    if covering.isLargest && !runs.uncovered.isEmpty { uncoveredAtLargest += 1 }
                }
                for hash in Int64(-200)..<200 {
                    let found = try runs.seqs(hash: hash)
                    #expect(Set(found) == model[hash] ?? [], "hash \(hash)")
                    #expect(found.count == Set(found).count)
                }
                // Sealed runs hold their keys as rows; the open run's are the rows from its first seq.
                let stored = try Int64.fetchOne(db, sql: "SELECT coalesce(sum(length(keys) / 16), 0) FROM nonce_runs")!
                let sealed = try Int64.fetchOne(db, sql: "SELECT coalesce(sum(keys), 0) FROM key_runs WHERE sealed")!
                let open = try Row.fetchOne(db, sql: """
                    SELECT keys, (SELECT count(*) FROM test_keys WHERE seq >= first_seq) FROM key_runs
                    WHERE name = 'nonce_runs' AND NOT sealed
                    """)!
                #expect(stored == sealed && open[0] as Int64 == open[1] as Int64)
                #expect(sealed + open[0] == Int64(model.values.reduce(0) { $0 + $1.count }))
                let crowded = try Int.fetchOne(db, sql: """
                    SELECT count(*) FROM (SELECT tier FROM key_runs WHERE sealed GROUP BY tier HAVING count(*) >= ?)
                    """, arguments: [shape.fanOut])!
                #expect(crowded == 0)
                let unsealedFull = try Int.fetchOne(db, sql: "SELECT count(*) FROM key_runs WHERE NOT sealed AND keys >= ?",
                                                    arguments: [shape.firstCapacity])!
                #expect(unsealedFull == 0)
            }
        }
        let tiers = try queue.read { db in try Int.fetchOne(db, sql: "SELECT max(tier) FROM key_runs WHERE name = 'nonce_runs'") ?? 0 }
        #expect(tiers >= 2) // merges of merged runs happened
        return uncoveredAtLargest
    }

    /// A merge of runs of many chunks keeps every key, in key order, and its filter and fences
    /// find each one.
    @Test func aMergeBySlicesKeepsEveryKeyInOrder() throws {
        let queue = try Self.database()
        let shape = KeyRuns.Shape(firstCapacity: 50_000, fanOut: 2)
        var rng = SeededGenerator(seed: 9)
        var writer = Writer()
        var added: [(hash: Int64, seq: Int64)] = []
        for batch in 0..<2 {
            let keys = (0..<50_000).map { i in (hash: Int64(bitPattern: rng.next()), seq: Int64(batch * 50_000 + i + 1)) }
            added += keys
            try writer.add(keys, to: queue, commit: true, shape: shape)
        }
        try queue.read { db in
            let described = try Row.fetchAll(db, sql: "SELECT tier, keys, sealed FROM key_runs WHERE name = 'nonce_runs' ORDER BY sealed")
                .map { row -> [Int64] in [row[0], row[1], row[2]] }
            #expect(described == [[0, 0, 0], [1, 100_000, 1]])
            // The chunks in id order hold the pairs in key order, 16 bytes each, little-endian.
            var stored: [Int64] = []
            for chunk in try Data.fetchAll(db, sql: "SELECT keys FROM nonce_runs ORDER BY id") {
                chunk.withUnsafeBytes { raw in
                    for offset in stride(from: 0, to: raw.count, by: 8) {
                        stored.append(Int64(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: Int64.self)))
                    }
                }
            }
            let expected: [Int64] = added.sorted { ($0.hash, $0.seq) < ($1.hash, $1.seq) }.flatMap { [$0.hash, $0.seq] }
            #expect(stored == expected)
            // The stored filter (no cache), as another writer would read it.
            var cache = KeyRuns.Cache()
            let runs = try Self.runs(db, cache: &cache, shape: shape)
            for key in added.shuffled(using: &rng).prefix(5_000) { #expect(try runs.seqs(hash: key.hash).contains(key.seq)) }
        }
    }

    /// A database of the layout before v17 (the open run's keys as rows of the table) keeps
    /// them: that run becomes a sealed one, and the open run starts after the log.
    @Test func anOpenRunOfTheOldLayoutBecomesASealedRun() throws {
        let queue = try DatabaseQueue()
        try Schema.migrator.migrate(queue, upTo: "v16-event-id-runs")
        try queue.write { db in
            try db.execute(sql: """
                INSERT INTO nonce_runs (run, key_hash, seq) VALUES (1, 10, 1), (1, 20, 2);
                INSERT INTO key_runs (name, run, tier, keys, sealed, generation) VALUES ('nonce_runs', 1, 0, 2, 0, 7);
                """)
        }
        try Schema.migrator.migrate(queue)
        try queue.write { db in try db.execute(sql: "CREATE TABLE test_keys (seq INTEGER PRIMARY KEY, key_hash INTEGER NOT NULL)") }
        var writer = Writer()
        try writer.add([(30, 3)], to: queue, commit: true)
        try queue.read { db in
            var cache = KeyRuns.Cache()
            let runs = try Self.runs(db, cache: &cache)
            #expect(try runs.seqs(hash: 10) == [1] && runs.seqs(hash: 20) == [2] && runs.seqs(hash: 30) == [3])
            #expect(try runs.seqs(hash: 40).isEmpty)
            let described = try Row.fetchAll(db, sql: """
                SELECT run, keys, sealed, filter IS NOT NULL, first_seq FROM key_runs WHERE name = 'nonce_runs' ORDER BY run
                """).map { row -> [Int64?] in [row[0], row[1], row[2], row[3], row[4]] }
            #expect(described == [[1, 2, 1, 1, nil], [2, 1, 0, 0, 1]])
        }
    }

    /// Keys that share a hash across chunk boundaries (small pages: 24 pairs to a chunk) are
    /// all found, in sealed and merged runs.
    @Test func aHashAcrossChunksIsFoundInEach() throws {
        let queue = try Self.database(pageSize: 512)
        let shape = KeyRuns.Shape(firstCapacity: 100, fanOut: 3)
        var rng = SeededGenerator(seed: 5)
        var writer = Writer()
        var model: [Int64: Set<Int64>] = [:]
        var seq: Int64 = 0
        for _ in 0..<40 {
            let keys = (0..<50).map { _ -> (hash: Int64, seq: Int64) in
                seq += 1
                return (Int64(rng.next() % 60), seq)
            }
            try writer.add(keys, to: queue, commit: true, shape: shape)
            for key in keys { model[key.hash, default: []].insert(key.seq) }
        }
        try queue.read { db in
            #expect(try Int.fetchOne(db, sql: "PRAGMA page_size") == 512)
            var cache = KeyRuns.Cache()
            let runs = try Self.runs(db, cache: &cache, shape: shape)
            for hash in Int64(-1)...60 {
                let found = try runs.seqs(hash: hash)
                #expect(Set(found) == model[hash] ?? [] && found.count == Set(found).count, "hash \(hash)")
            }
            #expect(try Int.fetchOne(db, sql: "SELECT max(tier) FROM key_runs") ?? 0 >= 2)
        }
    }

    /// A writer's transaction reads its runs' rows, not their filters: the pages it touches to
    /// open a table's runs and store what changed grow with the runs (a few per tier), not with
    /// their filters (small pages, so that each filter overflows onto several). As the rows of a
    /// `WITHOUT ROWID` table (before v19) every lookup read every filter: 0.06 pages per event of
    /// a 10M append.
    @Test func aTransactionReadsNoFilter() throws {
        let queue = try Self.database(pageSize: 1024)
        let shape = KeyRuns.Shape(firstCapacity: 2000, fanOut: 8)
        var writer = Writer()
        var seq: Int64 = 0
        /// Pages the writer's connection fetches (from its cache or not) to open the runs and
        /// finish a transaction that adds one key.
        func pagesOfATransaction() throws -> Int32 {
            seq += 1
            return try queue.write { db in
                try db.execute(sql: "INSERT INTO test_keys (seq, key_hash) VALUES (?, ?)", arguments: [seq, seq])
                var (hits, misses, highest): (Int32, Int32, Int32) = (0, 0, 0)
                sqlite3_db_status(db.sqliteConnection, SQLITE_DBSTATUS_CACHE_HIT, &hits, &highest, 1)
                sqlite3_db_status(db.sqliteConnection, SQLITE_DBSTATUS_CACHE_MISS, &misses, &highest, 1)
                var runs = try Self.runs(db, cache: &writer.cache, shape: shape)
                runs.add(hash: seq, seq: seq)
                try runs.finish(db, into: &writer.cache)
                sqlite3_db_status(db.sqliteConnection, SQLITE_DBSTATUS_CACHE_HIT, &hits, &highest, 0)
                sqlite3_db_status(db.sqliteConnection, SQLITE_DBSTATUS_CACHE_MISS, &misses, &highest, 0)
                return hits + misses
            }
        }
        func seal() throws {
            let keys = (0..<shape.firstCapacity).map { _ -> (hash: Int64, seq: Int64) in
                seq += 1
                return (seq &* 0x1E37_79B9_7F4A_7C15, seq)
            }
            try writer.add(keys, to: queue, commit: true, shape: shape)
        }
        try seal()
        let withOne = try pagesOfATransaction()
        for _ in 0..<6 { try seal() }
        let withSeven = try pagesOfATransaction()
        let filterPages = try queue.read { db in
            try Int.fetchOne(db, sql: "SELECT sum(length(filter)) / 1024 FROM key_runs WHERE name = 'nonce_runs'")!
        }
        #expect(try queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM key_runs WHERE sealed") } == 7)
        #expect(filterPages >= 7 * 3)
        // A page at most for each run's row (its leading columns, and what of its filter fits
        // beside them), none of the filters' overflow pages.
        #expect(withSeven <= withOne + 7 && withSeven < filterPages / 2,
                "\(withOne) pages with one sealed run, \(withSeven) with seven, \(filterPages) of filters")
    }

    /// A sealed run's pairs are sorted as the standard library's sort orders them: by hash (signed),
    /// then seq, whatever the hashes (negative, extreme, sharing digits or whole values) and
    /// however the seqs of equal hashes come (an open run's dictionary gives them in any order).
    @Test(arguments: [0, 1, 7, 1023, 1024, 5000, 70000])
    func pairsAreSortedByHashThenSeq(count: Int) {
        var rng = SeededGenerator(seed: UInt64(count) + 1)
        let shapes: [(inout SeededGenerator) -> Int64] = [
            { Int64(bitPattern: $0.next()) },
            { Int64(bitPattern: $0.next() % 50) - 25 }, // many equal hashes
            { [Int64.min, Int64.max, 0, -1][Int($0.next() % 4)] },
            { Int64(bitPattern: $0.next() & 0xFFFF_0000_0000_0000) }, // digits only in the high bits
            { _ in 42 },
        ]
        for hash in shapes {
            var seqs = Array(Int64(1)...Int64(max(count, 1)))
            seqs.shuffle(using: &rng)
            var pairs = (0..<count).map { (hash: hash(&rng), seq: seqs[$0]) }
            let expected = pairs.sorted { ($0.hash, $0.seq) < ($1.hash, $1.seq) }
            KeyRuns.sortByHashAndSeq(&pairs)
            #expect(pairs.map(\.hash) == expected.map(\.hash) && pairs.map(\.seq) == expected.map(\.seq))
        }
    }

    /// The covering filter holds every key of the runs it covers (no false "absent"), says "absent" for
    /// most others (about 1 % false "maybe" at its capacity), and covers exactly the runs named, a
    /// merge's and the forgotten ones included.
    @Test func coveringFilterHoldsEveryKeyOfItsRuns() throws {
        let filter = try #require(CoveringFilter(keys: 50_000, maximumBits: 1 << 28))
        #expect(filter.capacity >= 50_000 && !filter.isLargest)
        let largest = try #require(CoveringFilter(keys: 50_000, maximumBits: 4096))
        #expect(largest.capacity == 4096 / BloomFilter.bitsPerKey && largest.isLargest)
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> Int64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int64(bitPattern: z ^ (z >> 31))
        }
        let held = (0..<filter.capacity).map { _ in next() }
        filter.cover(1, 11, keys: held.prefix(held.count / 2))
        filter.cover(2, 22, keys: held.dropFirst(held.count / 2))
        #expect(filter.keys == held.count)
        #expect(held.allSatisfy { filter.mayContain(mixed: BloomFilter.mix($0)) })
        let maybes = (0..<100_000).filter { _ in filter.mayContain(mixed: BloomFilter.mix(next())) }.count
        #expect(maybes < 3_000)
        #expect(filter.covers(1, 11) && filter.covers(2, 22) && !filter.covers(1, 12) && !filter.covers(3, 11))
        filter.coverMerged(3, 33)
        filter.keepOnly([CoveringFilter.Run(id: 3, generation: 33)])
        #expect(filter.covers(3, 33) && !filter.covers(1, 11) && !filter.covers(2, 22))
    }
}
