import Foundation
import GRDB

/// A set of unique keys of the log, each held by the `seq` of one event, kept as the keys'
/// 64-bit hashes in sorted runs (a size-tiered log-structured merge inside SQLite): one
/// `WITHOUT ROWID` table keyed by `(run, key_hash, seq)`, and `key_runs` describing each run.
/// The newest run is open: it takes each transaction's new keys, in key order, until it holds
/// `firstCapacity`, and is then sealed. `fanOut` sealed runs of one tier are merged into one
/// run of the next tier, in key order, in the transaction that seals the last of them.
///
/// Why not a UNIQUE index: an index of random keys (the SDKs' nonces, UUID event IDs) takes
/// each new key on a leaf of its own, so a transaction dirties about as many pages as the
/// index has leaves once it has more leaves than the transaction has keys: the bytes written
/// per event grow with the history (10M random nonces: 0.73× the 1M rate, 2.55× the bytes per
/// event). Here only the open run, which stays small, takes keys out of order, and a key is
/// written again once per tier, whose number grows with the log of the history
/// (schemas/sql.md, "Unique keys in runs").
///
/// Each run has a Bloom filter (`key_runs.filter`; the open run's is made from its rows), so a
/// new key, nearly every key an append sees, is known free without a search. A hash that a
/// run's filter may hold is searched in that run (`seqs(hash:)`, one primary-key search), and
/// the caller compares the keys of the events found: hashes collide, keys do not. Uniqueness
/// is the append's: it adds a key (`add`) only when no event holds it.
package struct KeyRuns {
    /// When runs are sealed and merged.
    package struct Shape: Sendable {
        /// Keys a run holds when it is sealed.
        package var firstCapacity: Int
        /// Sealed runs of one tier merged into one run of the next.
        package var fanOut: Int

        /// 2^18 keys (4.5 MB of rows at most, rewritten by each transaction that adds keys to
        /// it) and 8 runs to a merge: each key is written about once per tier.
        package static let standard = Shape(firstCapacity: 1 << 18, fanOut: 8)

        package init(firstCapacity: Int, fanOut: Int) {
            precondition(firstCapacity > 0 && fanOut > 1)
            (self.firstCapacity, self.fanOut) = (firstCapacity, fanOut)
        }
    }

    /// What a writer keeps of a table's runs between its transactions: each run's filter and
    /// the generation of the run it was made from. An entry whose generation is not the one
    /// `key_runs` holds (another writer's transaction, or one of ours rolled back) is made
    /// again from the table.
    package struct Cache: Sendable {
        fileprivate var runs: [Int64: Run] = [:]
        package init() {}
    }

    fileprivate struct Run: Sendable {
        var id: Int64
        var tier: Int
        var keys: Int64
        var sealed: Bool
        /// Random, new with each change of the run's rows.
        var generation: Int64
        var filter: BloomFilter
        var changed = false
    }

    private let table: String
    private let shape: Shape
    private var sealed: [Run]
    private var open: Run?
    /// This transaction's keys, written to the open run in key order by `finish`: by hash,
    /// and the rare second key of a hash apart.
    private var pending: [Int64: Int64] = [:]
    private var collisions: [(hash: Int64, seq: Int64)] = []
    /// The open run's filter with this transaction's keys (a new one's when there is none).
    private var pendingFilter: BloomFilter
    private let find: BulkStatement

    /// The runs of `table` as this transaction sees them, with `cache`'s filters where they
    /// are current.
    package init(_ db: Database, table: String, cache: Cache, shape: Shape = .standard) throws {
        self.table = table
        self.shape = shape
        sealed = []
        open = nil
        let rows = try Row.fetchAll(db, sql: """
            SELECT run, tier, keys, sealed, generation, filter FROM key_runs WHERE name = ? ORDER BY run
            """, arguments: [table])
        for row in rows {
            var run = Run(id: row[0], tier: row[1], keys: row[2], sealed: row[3], generation: row[4], filter: BloomFilter(keys: 0))
            if let cached = cache.runs[run.id], cached.generation == run.generation, cached.keys == run.keys {
                run.filter = cached.filter
            } else if let bytes = (row[5] as Data?).map(Array.init), let filter = BloomFilter(bytes: bytes) {
                run.filter = filter
            } else {
                // An open run keeps no filter in the table (it changes with every append); a run
                // made by a migration has none yet.
                run.filter = try Self.filter(db, table, run: run.id, keys: run.sealed ? run.keys : Int64(shape.firstCapacity))
                run.changed = run.sealed
            }
            if run.sealed {
                sealed.append(run)
            } else if open == nil {
                open = run
            } else {
                throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "key_runs: more than one open run of \(table)")
            }
        }
        pendingFilter = open?.filter ?? BloomFilter(keys: shape.firstCapacity)
        find = try BulkStatement(cached: db, "SELECT seq FROM \(table) WHERE run = ? AND key_hash = ?")
    }

    /// A filter of the hashes in `run`, sized for `keys` keys.
    private static func filter(_ db: Database, _ table: String, run: Int64, keys: Int64) throws -> BloomFilter {
        var filter = BloomFilter(keys: Int(clamping: keys))
        try BulkStatement(cached: db, "SELECT key_hash FROM \(table) WHERE run = ?").each({ $0.add(run) }) { row in
            filter.insert(row.int(0))
        }
        return filter
    }

    /// The events whose key has `hash`, for the caller to compare keys with: empty, without a
    /// search, for nearly every key no event holds.
    package func seqs(hash: Int64) throws -> [Int64] {
        var seqs: [Int64] = []
        if pendingFilter.mayContain(hash) {
            if let seq = pending[hash] { seqs.append(seq) }
            for key in collisions where key.hash == hash { seqs.append(key.seq) }
            if let open { try search(open.id, hash, into: &seqs) }
        }
        // By index: a `Run` copied out of the array would retain and release its filter.
        for index in sealed.indices where sealed[index].filter.mayContain(hash) {
            try search(sealed[index].id, hash, into: &seqs)
        }
        return seqs
    }

    private func search(_ run: Int64, _ hash: Int64, into seqs: inout [Int64]) throws {
        try find.each({ $0.add(run); $0.add(hash) }) { seqs.append($0.int(0)) }
    }

    /// Adds a key that no event holds (`seqs(hash:)` found none with its bytes), held by `seq`.
    package mutating func add(hash: Int64, seq: Int64) {
        pendingFilter.insert(hash)
        if pending[hash] == nil {
            pending[hash] = seq
        } else {
            collisions.append((hash, seq))
        }
    }

    /// Writes this transaction's keys to the open run in key order, seals it when full, merges
    /// every tier with `fanOut` sealed runs into one run of the next, stores what changed in
    /// `key_runs`, and leaves the filters in `cache`: the end of the transaction's appends.
    package mutating func finish(_ db: Database, into cache: inout Cache) throws {
        if !pending.isEmpty {
            var keys = pending.map { (hash: $0.key, seq: $0.value) } + collisions
            keys.sort { ($0.hash, $0.seq) < ($1.hash, $1.seq) }
            var run = open ?? Run(id: nextID, tier: 0, keys: 0, sealed: false, generation: 0, filter: pendingFilter)
            try BulkInsert(cached: db, into: table, "run, key_hash, seq").insert(count: keys.count) { i, binder in
                binder.add(run.id)
                binder.add(keys[i].hash)
                binder.add(keys[i].seq)
            }
            run.keys += Int64(keys.count)
            run.generation = Self.newGeneration()
            run.filter = pendingFilter
            run.changed = true
            if run.keys >= shape.firstCapacity {
                run.sealed = true
                if run.filter.bitCount < BloomFilter(keys: Int(run.keys)).bitCount { // filled past its size
                    run.filter = try Self.filter(db, table, run: run.id, keys: run.keys)
                }
                sealed.append(run)
                open = nil
                pendingFilter = BloomFilter(keys: shape.firstCapacity)
            } else {
                open = run
            }
            pending = [:]
            collisions = []
        }
        try mergeFullTiers(db)
        try store(db, into: &cache)
    }

    /// The id of a new run: after every run's.
    private var nextID: Int64 { max(sealed.map(\.id).max() ?? 0, open?.id ?? 0) + 1 }

    /// Merges the sealed runs of each tier that has `fanOut` of them into one run of the next.
    private mutating func mergeFullTiers(_ db: Database) throws {
        var tier = 0
        while tier <= (sealed.map(\.tier).max() ?? 0) {
            let merged = sealed.filter { $0.tier == tier }
            guard merged.count >= shape.fanOut else {
                tier += 1
                continue
            }
            let id = nextID
            let keys = merged.reduce(0) { $0 + $1.keys }
            let filter = try merge(db, merged.map(\.id), into: id, keys: keys)
            let ids = merged.map { String($0.id) }.joined(separator: ", ")
            try db.execute(sql: """
                DELETE FROM \(table) WHERE run IN (\(ids));
                DELETE FROM key_runs WHERE name = ? AND run IN (\(ids));
                """, arguments: [table])
            sealed.removeAll { $0.tier == tier }
            sealed.append(Run(id: id, tier: tier + 1, keys: keys, sealed: true, generation: Self.newGeneration(),
                              filter: filter, changed: true))
        }
    }

    /// Copies the keys of `runs` into the new run `id`, in key order, and returns its filter.
    /// A slice of the hash range at a time: each run's keys in the slice (a range of its primary
    /// key), sorted, appended at the table's end (the new run's id is the highest). No statement
    /// reads the table while another writes it, memory holds one slice, and SQLite neither sorts
    /// the runs nor copies them first, as `INSERT … SELECT … ORDER BY` from the table itself did
    /// (1.8 s of a 2.5M-key merge's 3.7 s).
    private func merge(_ db: Database, _ runs: [Int64], into id: Int64, keys: Int64) throws -> BloomFilter {
        var filter = BloomFilter(keys: Int(clamping: keys))
        let read = try BulkStatement(cached: db, "SELECT key_hash, seq FROM \(table) WHERE run = ? AND key_hash BETWEEN ? AND ?")
        let insert = try BulkInsert(cached: db, into: table, "run, key_hash, seq")
        // Hashes span all of Int64 (the log's are non-negative): slices of the range mapped in order
        // onto UInt64, about 2^15 keys to each slice of a uniform spread.
        let slices = UInt64(max(1, min(keys >> 15, 1 << 20)))
        let width = UInt64.max / slices
        func hash(_ point: UInt64) -> Int64 { Int64(bitPattern: point ^ (1 << 63)) }
        var rows: [(hash: Int64, seq: Int64)] = []
        for slice in 0..<slices {
            let low = hash(slice * width)
            let high = slice == slices - 1 ? Int64.max : hash((slice + 1) * width - 1)
            rows.removeAll(keepingCapacity: true)
            for run in runs {
                try read.each({ $0.add(run); $0.add(low); $0.add(high) }) { rows.append(($0.int(0), $0.int(1))) }
            }
            rows.sort { ($0.hash, $0.seq) < ($1.hash, $1.seq) }
            for row in rows { filter.insert(row.hash) }
            try insert.insert(count: rows.count) { i, binder in
                binder.add(id)
                binder.add(rows[i].hash)
                binder.add(rows[i].seq)
            }
        }
        return filter
    }

    private mutating func store(_ db: Database, into cache: inout Cache) throws {
        func store(_ run: inout Run) throws {
            if run.changed {
                try db.execute(sql: """
                    INSERT INTO key_runs (name, run, tier, keys, sealed, generation, filter) VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (name, run) DO UPDATE SET
                        keys = excluded.keys, sealed = excluded.sealed, generation = excluded.generation,
                        filter = excluded.filter
                    """, arguments: [table, run.id, run.tier, run.keys, run.sealed, run.generation,
                                     run.sealed ? Data(run.filter.bytes) : nil])
                run.changed = false
            }
            cache.runs[run.id] = run
        }
        cache.runs = [:]
        for index in sealed.indices { try store(&sealed[index]) }
        if open != nil { try store(&open!) }
    }

    private static func newGeneration() -> Int64 { Int64.random(in: 1...Int64.max) }
}

/// The log's two unique keys for one transaction's appends: `event_id` (migration v16) and
/// `(app_id, nonce)` (v15), in runs by `StableHash.key(event_id)` and
/// `StableHash.key(app_id, nonce)`.
package struct UniqueKeys {
    /// A writer's filters of both, kept between its transactions (`KeyRuns.Cache`).
    package struct Cache: Sendable {
        fileprivate var eventIDs = KeyRuns.Cache()
        fileprivate var nonces = KeyRuns.Cache()
        package init() {}
    }

    package var eventIDs: KeyRuns
    package var nonces: KeyRuns

    package init(_ db: Database, cache: Cache, shape: KeyRuns.Shape = .standard) throws {
        eventIDs = try KeyRuns(db, table: "event_id_runs", cache: cache.eventIDs, shape: shape)
        nonces = try KeyRuns(db, table: "nonce_runs", cache: cache.nonces, shape: shape)
    }

    /// `KeyRuns.finish` of both.
    package mutating func finish(_ db: Database, into cache: inout Cache) throws {
        try eventIDs.finish(db, into: &cache.eventIDs)
        try nonces.finish(db, into: &cache.nonces)
    }
}
