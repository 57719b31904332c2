import Foundation
import GRDB
@testable import IdreconStore
import Testing

/// The log's unique keys in sorted runs (`KeyRuns`): whatever the transactions, rollbacks and
/// writers, every key added is found again, the runs hold exactly the keys added, and no tier
/// keeps `fanOut` sealed runs. Small runs, so that seals and merges of several tiers happen.
@Suite struct KeyRunsTests {
    static let shape = KeyRuns.Shape(firstCapacity: 5, fanOut: 3)

    /// One writer's transactions, in which keys are added, some rolled back, with the cache kept
    /// as `EventStore` keeps it: from the last transaction, committed or not.
    struct Writer {
        var cache = KeyRuns.Cache()

        /// Adds `keys` (hash, seq) in one transaction; `commit: false` rolls it back.
        mutating func add(_ keys: [(hash: Int64, seq: Int64)], to queue: DatabaseQueue, commit: Bool) throws {
            struct Rollback: Error {}
            do {
                try queue.write { db in
                    var runs = try KeyRuns(db, table: "nonce_runs", cache: cache, shape: KeyRunsTests.shape)
                    for key in keys { runs.add(hash: key.hash, seq: key.seq) }
                    try runs.finish(db, into: &cache)
                    if !commit { throw Rollback() }
                }
            } catch is Rollback {}
        }
    }

    @Test(arguments: [1, 2, 3, 4])
    func everyKeyAddedIsFoundAgain(seed: UInt64) throws {
        let queue = try DatabaseQueue()
        try Schema.migrator.migrate(queue)
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
            try writers[writer].add(keys, to: queue, commit: commit)
            if commit { for key in keys { model[key.hash, default: []].insert(key.seq) } }

            try queue.read { db in
                let runs = try KeyRuns(db, table: "nonce_runs", cache: writers[Int(rng.next() % 2)].cache, shape: Self.shape)
                for hash in Int64(-200)..<200 {
                    let found = try runs.seqs(hash: hash)
                    #expect(Set(found) == model[hash] ?? [], "hash \(hash)")
                    #expect(found.count == Set(found).count)
                }
                let stored = try Int64.fetchOne(db, sql: "SELECT count(*) FROM nonce_runs")!
                let described = try Int64.fetchOne(db, sql: "SELECT coalesce(sum(keys), 0) FROM key_runs")!
                #expect(stored == Int64(model.values.reduce(0) { $0 + $1.count }) && described == stored)
                let crowded = try Int.fetchOne(db, sql: """
                    SELECT count(*) FROM (SELECT tier FROM key_runs WHERE sealed GROUP BY tier HAVING count(*) >= ?)
                    """, arguments: [Self.shape.fanOut])!
                #expect(crowded == 0)
                let unsealedFull = try Int.fetchOne(db, sql: "SELECT count(*) FROM key_runs WHERE NOT sealed AND keys >= ?",
                                                    arguments: [Self.shape.firstCapacity])!
                #expect(unsealedFull == 0)
            }
        }
        let tiers = try queue.read { db in try Int.fetchOne(db, sql: "SELECT max(tier) FROM key_runs") ?? 0 }
        #expect(tiers >= 2) // merges of merged runs happened
    }

    /// A merge large enough to go through several slices of the hash range keeps every key, in
    /// key order, and its filter finds each one.
    @Test func aMergeBySlicesKeepsEveryKeyInOrder() throws {
        let queue = try DatabaseQueue()
        try Schema.migrator.migrate(queue)
        let shape = KeyRuns.Shape(firstCapacity: 50_000, fanOut: 2)
        var rng = SeededGenerator(seed: 9)
        var writer = Writer()
        var added: [(hash: Int64, seq: Int64)] = []
        for batch in 0..<2 {
            let keys = (0..<50_000).map { i in (hash: Int64(bitPattern: rng.next()), seq: Int64(batch * 50_000 + i + 1)) }
            added += keys
            try queue.write { db in
                var runs = try KeyRuns(db, table: "nonce_runs", cache: writer.cache, shape: shape)
                for key in keys { runs.add(hash: key.hash, seq: key.seq) }
                try runs.finish(db, into: &writer.cache)
            }
        }
        try queue.read { db in
            let described = try Row.fetchAll(db, sql: "SELECT tier, keys, sealed FROM key_runs")
                .map { row -> [Int64] in [row[0], row[1], row[2]] }
            #expect(described == [[1, 100_000, 1]])
            var stored: [Int64] = []
            for row in try Row.fetchAll(db, sql: "SELECT key_hash, seq FROM nonce_runs ORDER BY run, key_hash, seq") {
                stored.append(row[0])
                stored.append(row[1])
            }
            let expected: [Int64] = added.sorted { ($0.hash, $0.seq) < ($1.hash, $1.seq) }.flatMap { [$0.hash, $0.seq] }
            #expect(stored == expected)
            // The stored filter (no cache), as another writer would read it.
            let runs = try KeyRuns(db, table: "nonce_runs", cache: KeyRuns.Cache(), shape: shape)
            for key in added.prefix(2_000) { #expect(try runs.seqs(hash: key.hash).contains(key.seq)) }
        }
    }
}
