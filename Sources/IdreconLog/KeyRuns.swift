import Foundation
import GRDB
import IdreconDomain

/// A set of unique keys of the log, each held by the `seq` of one event, kept as the keys'
/// 64-bit hashes in sorted runs (a size-tiered log-structured merge inside SQLite): one
/// `WITHOUT ROWID` table keyed by `(run, key_hash, seq)`, and `key_runs` describing each run.
///
/// The newest keys, those of the events from the open run's `first_seq` on, are not in the
/// table: the log's own rows hold them, and the writer keeps them in memory (a dictionary by
/// hash) between its transactions. At `firstCapacity` keys they are written, sorted, as one
/// sealed run at the table's end, and the open run starts after them. `fanOut` sealed runs of
/// one tier are merged into one run of the next, in key order, in the same transaction.
///
/// Why not a UNIQUE index: an index of random keys (the SDKs' nonces, UUID event IDs) takes
/// each new key on a leaf of its own, so a transaction dirties about as many pages as the
/// index has leaves once it has more leaves than the transaction has keys: the bytes written
/// per event grow with the history (10M random nonces: 0.73× the 1M rate, 2.55× the bytes per
/// event). Here nothing takes keys out of order: a key is written once per tier, whose number
/// grows with the log of the history (schemas/sql.md, "Unique keys in runs").
///
/// Each sealed run has a Bloom filter (`key_runs.filter`), so a new key, nearly every key an
/// append sees, is known free without a search. A hash that a run's filter may hold is
/// searched in that run (one primary-key search), and the caller compares the keys of the
/// events found: hashes collide, keys do not. Uniqueness is the append's: it adds a key
/// (`add`) only when no event holds it (`holder`).
package struct KeyRuns {
    /// When runs are sealed and merged.
    package struct Shape: Sendable {
        /// Keys the open run takes before they are written as a sealed run.
        package var firstCapacity: Int
        /// Sealed runs of one tier merged into one run of the next.
        package var fanOut: Int

        /// 2^18 keys (about 8 MB of memory to a table's open run, 4.5 MB of rows when sealed)
        /// and 8 runs to a merge: each key is written about once per tier.
        package static let standard = Shape(firstCapacity: 1 << 18, fanOut: 8)

        package init(firstCapacity: Int, fanOut: Int) {
            precondition(firstCapacity > 0 && fanOut > 1)
            (self.firstCapacity, self.fanOut) = (firstCapacity, fanOut)
        }
    }

    /// Where the open run's keys are read from when a writer does not hold them: the rows of
    /// the log that carry the key.
    package struct Source: Sendable {
        /// `seq` first, then the key's columns, of the rows with a key and `seq >= ?`.
        package let sql: String
        /// The hash of the key of a row of `sql`.
        package let hash: @Sendable (BulkStatement.Reader) -> Int64

        package init(sql: String, hash: @escaping @Sendable (BulkStatement.Reader) -> Int64) {
            (self.sql, self.hash) = (sql, hash)
        }
    }

    /// What a writer keeps of a table's runs between its transactions: each sealed run's
    /// filter and the open run's keys, with the generation of the run they were made from. An
    /// entry whose generation is not the one `key_runs` holds (another writer's transaction, or
    /// one of ours rolled back) is made again from the table or the log.
    package struct Cache: Sendable {
        fileprivate var sealed: [Int64: Sealed] = [:]
        fileprivate var open: Open?
        package init() {}
    }

    fileprivate struct Sealed: Sendable {
        var id: Int64
        var tier: Int
        var keys: Int64
        /// Random, new with each run: a run id used again after a rollback is told apart.
        var generation: Int64
        var filter: BloomFilter
        var changed = false
    }

    fileprivate struct Open: Sendable {
        var id: Int64
        /// The keys of the events from this `seq` on are the open run's.
        var firstSeq: Int64
        /// Random, new with each change of the open run.
        var generation: Int64
        /// Hash → seq; the rare second key of a hash in `collisions`.
        var seqs: [Int64: Int64] = [:]
        var collisions: [(hash: Int64, seq: Int64)] = []
        var lastSeq: Int64 = 0
        var changed = false

        var count: Int { seqs.count + collisions.count }

        mutating func add(hash: Int64, seq: Int64) {
            if let held = seqs.updateValue(seq, forKey: hash) {
                seqs[hash] = held
                collisions.append((hash, seq))
            }
            lastSeq = max(lastSeq, seq)
        }
    }

    private let table: String
    private let shape: Shape
    private var sealed: [Sealed] = []
    private var open: Open
    private let find: BulkStatement

    /// The runs of `table` as this transaction sees them, with `cache`'s filters and open keys
    /// where they are current. The open keys move out of `cache` (one owner: no copy of them)
    /// and back in with `finish`.
    package init(_ db: Database, table: String, source: Source, cache: inout Cache, shape: Shape = .standard) throws {
        self.table = table
        self.shape = shape
        var cachedOpen: Open?
        swap(&cachedOpen, &cache.open)
        var open: Open?
        let rows = try Row.fetchAll(db, sql: """
            SELECT run, tier, keys, sealed, generation, filter, first_seq FROM key_runs WHERE name = ? ORDER BY run
            """, arguments: [table])
        for row in rows {
            let (id, keys, generation): (Int64, Int64, Int64) = (row[0], row[2], row[4])
            guard row[3] as Bool else {
                guard open == nil, let firstSeq = row[6] as Int64? else {
                    throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "key_runs: \(table) has more than one open run")
                }
                if let cached = cachedOpen, cached.id == id, cached.generation == generation, cached.firstSeq == firstSeq,
                   cached.count == keys {
                    open = consume cachedOpen
                    cachedOpen = nil
                } else {
                    open = try Self.read(db, source, Open(id: id, firstSeq: firstSeq, generation: generation))
                    open!.changed = open!.count != keys
                }
                continue
            }
            var run = Sealed(id: id, tier: row[1], keys: keys, generation: generation, filter: BloomFilter(keys: 0))
            if let cached = cache.sealed[id], cached.generation == generation, cached.keys == keys {
                run.filter = cached.filter
            } else if let bytes = (row[5] as Data?).map(Array.init), let filter = BloomFilter(bytes: bytes) {
                run.filter = filter
            } else { // a run made by a migration has no filter yet
                run.filter = try Self.filter(db, table, run: id, keys: keys)
                run.changed = true
            }
            sealed.append(run)
        }
        guard let open else {
            throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "key_runs: \(table) has no open run")
        }
        self.open = open
        find = try BulkStatement(cached: db, "SELECT seq FROM \(table) WHERE run = ? AND key_hash = ?")
    }

    /// The open run's keys from the log.
    private static func read(_ db: Database, _ source: Source, _ open: Open) throws -> Open {
        var open = open
        try BulkStatement(cached: db, source.sql).each({ $0.add(open.firstSeq) }) { row in
            open.add(hash: source.hash(row), seq: row.int(0))
        }
        return open
    }

    /// A filter of the hashes in `run`, sized for `keys` keys.
    private static func filter(_ db: Database, _ table: String, run: Int64, keys: Int64) throws -> BloomFilter {
        var filter = BloomFilter(keys: Int(clamping: keys))
        try BulkStatement(cached: db, "SELECT key_hash FROM \(table) WHERE run = ?").each({ $0.add(run) }) { row in
            filter.insert(row.int(0))
        }
        return filter
    }

    /// The events whose key has `hash`: empty, without a search, for nearly every key no event
    /// holds.
    package func seqs(hash: Int64) throws -> [Int64] {
        var seqs: [Int64] = []
        try each(hash) { seqs.append($0); return true }
        return seqs
    }

    /// The event that holds a key of `hash`, if any: the first of the events with the hash whose
    /// row, read by `statement` (bound to its `seq`), `holds` says has the key.
    package func holder(
        of hash: Int64, reading statement: BulkStatement, _ holds: (BulkStatement.Reader) -> Bool
    ) throws -> Int64? {
        var holder: Int64?
        try each(hash) { seq in
            if try statement.first({ $0.add(seq) }, holds) == true { holder = seq }
            return holder == nil
        }
        return holder
    }

    /// Calls `body` with each `seq` held under `hash` while it returns true.
    private func each(_ hash: Int64, _ body: (Int64) throws -> Bool) throws {
        if let seq = open.seqs[hash], try !body(seq) { return }
        for key in open.collisions where key.hash == hash {
            if try !body(key.seq) { return }
        }
        // By index: a `Sealed` copied out of the array would retain and release its filter.
        for index in sealed.indices where sealed[index].filter.mayContain(hash) {
            var more = true
            try find.eachWhile({ $0.add(sealed[index].id); $0.add(hash) }) { row in
                more = try body(row.int(0))
                return more
            }
            if !more { return }
        }
    }

    /// Adds a key that no event holds (`holder` found none), held by `seq`: the newest event's.
    package mutating func add(hash: Int64, seq: Int64) {
        open.add(hash: hash, seq: seq)
        open.changed = true
    }

    /// Writes the open run's keys as a sealed run when it is full, merges every tier with
    /// `fanOut` sealed runs into one run of the next, stores what changed in `key_runs`, and
    /// leaves the filters and open keys in `cache`: the end of the transaction's appends.
    package mutating func finish(_ db: Database, into cache: inout Cache) throws {
        if open.count >= shape.firstCapacity {
            try seal(db)
        }
        try mergeFullTiers(db)
        try store(db, into: &cache)
    }

    /// The id of a new run: after every run's, so that its rows go at the table's end.
    private var nextID: Int64 { max(sealed.map(\.id).max() ?? 0, open.id) + 1 }

    /// Writes the open run's keys, in key order, as a sealed run of tier 0; the open run then
    /// starts after its last event.
    private mutating func seal(_ db: Database) throws {
        var keys = open.seqs.map { (hash: $0.key, seq: $0.value) } + open.collisions
        keys.sort { ($0.hash, $0.seq) < ($1.hash, $1.seq) }
        var filter = BloomFilter(keys: keys.count)
        for key in keys { filter.insert(key.hash) }
        let id = nextID
        try BulkInsert(cached: db, into: table, "run, key_hash, seq").insert(count: keys.count) { i, binder in
            binder.add(id)
            binder.add(keys[i].hash)
            binder.add(keys[i].seq)
        }
        sealed.append(Sealed(id: id, tier: 0, keys: Int64(keys.count), generation: Self.newGeneration(), filter: filter,
                             changed: true))
        open = Open(id: open.id, firstSeq: open.lastSeq + 1, generation: 0, changed: true)
    }

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
            sealed.append(Sealed(id: id, tier: tier + 1, keys: keys, generation: Self.newGeneration(), filter: filter,
                                 changed: true))
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
        cache.sealed = [:]
        for index in sealed.indices {
            if sealed[index].changed {
                let run = sealed[index]
                try db.execute(sql: """
                    INSERT INTO key_runs (name, run, tier, keys, sealed, generation, filter) VALUES (?, ?, ?, ?, 1, ?, ?)
                    ON CONFLICT (name, run) DO UPDATE SET filter = excluded.filter
                    """, arguments: [table, run.id, run.tier, run.keys, run.generation, Data(run.filter.bytes)])
                sealed[index].changed = false
            }
            cache.sealed[sealed[index].id] = sealed[index]
        }
        if open.changed {
            open.generation = Self.newGeneration()
            try db.execute(sql: "UPDATE key_runs SET keys = ?, generation = ?, first_seq = ? WHERE name = ? AND run = ?",
                           arguments: [open.count, open.generation, open.firstSeq, table, open.id])
            open.changed = false
        }
        cache.open = open
    }

    private static func newGeneration() -> Int64 { Int64.random(in: 1...Int64.max) }
}

/// The log's two unique keys for one transaction's appends: `event_id` (migration v16) and
/// `(app_id, nonce)` (v15), in runs by `StableHash.key(event_id)` and
/// `StableHash.key(app_id, nonce)`, their open runs read from `events`.
package struct UniqueKeys {
    /// A writer's filters and open keys of both, kept between its transactions (`KeyRuns.Cache`).
    package struct Cache: Sendable {
        fileprivate var eventIDs = KeyRuns.Cache()
        fileprivate var nonces = KeyRuns.Cache()
        package init() {}
    }

    static let eventIDSource = KeyRuns.Source(sql: "SELECT seq, event_id FROM events WHERE seq >= ?") { row in
        StableHash.key(utf8: row.text(1) ?? UnsafeBufferPointer(start: nil, count: 0))
    }
    static let nonceSource = KeyRuns.Source(
        sql: "SELECT seq, app_id, nonce FROM events WHERE seq >= ? AND nonce IS NOT NULL"
    ) { row in
        let empty = UnsafeBufferPointer<UInt8>(start: nil, count: 0)
        return StableHash.key(utf8: row.text(1) ?? empty, row.text(2) ?? empty)
    }

    package var eventIDs: KeyRuns
    package var nonces: KeyRuns

    package init(_ db: Database, cache: inout Cache, shape: KeyRuns.Shape = .standard) throws {
        eventIDs = try KeyRuns(db, table: "event_id_runs", source: Self.eventIDSource, cache: &cache.eventIDs, shape: shape)
        nonces = try KeyRuns(db, table: "nonce_runs", source: Self.nonceSource, cache: &cache.nonces, shape: shape)
    }

    /// `KeyRuns.finish` of both.
    package mutating func finish(_ db: Database, into cache: inout Cache) throws {
        try eventIDs.finish(db, into: &cache.eventIDs)
        try nonces.finish(db, into: &cache.nonces)
    }
}
