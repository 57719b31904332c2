import Foundation
import GRDB
import IdreconDomain

/// A set of keys of the log, each held by the `seq` of one event or more, kept as the keys'
/// 64-bit hashes in sorted runs (a size-tiered log-structured merge inside SQLite). A sealed
/// run is a sequence of chunks, each one row of the set's table (`id` = run << 32 | chunk,
/// `keys` = its (hash, seq) pairs in order, 16 bytes each, a page's worth), with the first
/// hash of each chunk (`key_runs.fences`) and, for keys the append searches, a Bloom filter
/// (`key_runs.filter`).
///
/// The newest keys, those of the events from the open run's `first_seq` on, are not in the
/// table: the log's own rows hold them, and the writer keeps them in memory (`OpenLayout`)
/// between its transactions. At `firstCapacity` keys they are written, sorted, as one
/// sealed run at the table's end, and the open run starts after them. `fanOut` sealed runs of
/// one tier are merged into one run of the next, in key order, in the same transaction.
///
/// Why not a UNIQUE index: an index of random keys (the SDKs' nonces, UUID event IDs) takes
/// each new key on a leaf of its own, so a transaction dirties about as many pages as the
/// index has leaves once it has more leaves than the transaction has keys: the bytes written
/// per event grow with the history (10M random nonces: 0.73× the 1M rate, 2.55× the bytes per
/// event). Here nothing takes keys out of order: a key is written once per tier, whose number
/// grows with the log of the history (schemas/sql.md, "Unique keys in runs"). Why chunks and
/// not a row per key: a merge then reads and writes pages, not rows (a 2.5M-key merge took
/// 2.4-2.8 s as rows through SQLite's B-tree).
///
/// A new key, nearly every key an append sees, is known free by the filters without a
/// search. A hash that a run's filter may hold is searched in the one chunk its fences name,
/// and the caller compares the keys of the events found: hashes collide, keys do not.
/// Uniqueness, for the unique keys, is the append's: it adds a key (`add`) only when no event
/// holds it (`holder`). A lookup key (a device's events) is added with every event that has it,
/// and `seqs` finds them all: in the open run and in each sealed run (whose filter, if it has
/// one, may hold it).
package struct KeyRuns {
    /// When runs are sealed and merged.
    package struct Shape: Sendable {
        /// Keys the open run takes before they are written as a sealed run.
        package var firstCapacity: Int
        /// Sealed runs of one tier merged into one run of the next.
        package var fanOut: Int
        /// The covering filter's largest size, in bits (a power of two): what bounds its memory
        /// whatever the log's length. Past its keys, new runs are checked by their own filters.
        package var coveringBits: Int

        /// 2^18 keys (about 8 MB of memory to a table's open run, 4.5 MB of rows when sealed)
        /// and 8 runs to a merge: each key is written about once per tier. A covering filter of
        /// at most 32 MiB (26.8M keys: a 10M log's, with room to spare) for each of the two tables.
        package static let standard = Shape(firstCapacity: 1 << 18, fanOut: 8)

        package init(firstCapacity: Int, fanOut: Int, coveringBits: Int = 1 << 28) {
            precondition(firstCapacity > 0 && fanOut > 1)
            precondition(coveringBits >= 512 && coveringBits & (coveringBits - 1) == 0, "a power of two, 512 or more")
            (self.firstCapacity, self.fanOut, self.coveringBits) = (firstCapacity, fanOut, coveringBits)
        }
    }

    /// Where the open run's keys are read from when a writer does not hold them: the rows of
    /// the log that carry the key.
    package struct Source: Sendable {
        /// `seq` first, then the key's columns, of the rows with a key and `seq >= ?`.
        package let sql: String
        /// The hash of the key of a row of `sql`.
        package let hash: @Sendable (BulkStatement.Reader) -> Int64
        /// How the open run holds the keys (`OpenLayout`).
        package let layout: OpenLayout

        package init(sql: String, layout: OpenLayout = .byHash, hash: @escaping @Sendable (BulkStatement.Reader) -> Int64) {
            (self.sql, self.layout, self.hash) = (sql, layout, hash)
        }
    }

    /// How the open run holds its keys: by hash, for keys the append searches before it adds each
    /// (unique keys), or listed in the order added, for keys only a rare lookup searches (the
    /// log's lookup keys: a late event's refold), which scans the list. Listed, an append adds a
    /// key for 16 bytes and no hashing (by hash: a 1M `ingest` spent 3-4 % more of its CPU in
    /// the dictionaries of the two lookup keys).
    package enum OpenLayout: Sendable { case byHash, listed }

    /// What a writer keeps of a table's runs between its transactions: each sealed run's
    /// filter and the open run's keys, with the generation of the run they were made from. An
    /// entry whose generation is not the one `key_runs` holds (another writer's transaction, or
    /// one of ours rolled back) is made again from the table or the log.
    package struct Cache: Sendable {
        fileprivate var sealed: [Int64: Sealed] = [:]
        fileprivate var open: Open?
        fileprivate var covering: CoveringFilter?
        package init() {}
    }

    fileprivate struct Sealed: Sendable {
        var id: Int64
        var tier: Int
        var keys: Int64
        /// Random, new with each run: a run id used again after a rollback is told apart.
        var generation: Int64
        /// None for a listed table's runs (`OpenLayout.listed`): a lookup searches each of them.
        var filter: BloomFilter?
        /// The first hash of each chunk.
        var fences: [Int64]
        var changed = false
    }

    fileprivate struct Open: Sendable {
        var id: Int64
        /// The keys of the events from this `seq` on are the open run's.
        var firstSeq: Int64
        /// Random, new with each change of the open run.
        var generation: Int64
        let layout: OpenLayout
        /// By hash: hash → seq, the rare further seqs of a hash (a collision) in `more`.
        private var seqs: [Int64: Int64] = [:]
        private var more: [Int64: [Int64]] = [:]
        /// Listed: the hashes and their seqs in the order added.
        private var hashes: [Int64] = [], listedSeqs: [Int64] = []
        private(set) var count = 0
        var lastSeq: Int64 = 0
        var changed = false

        init(id: Int64, firstSeq: Int64, generation: Int64, layout: OpenLayout, changed: Bool = false) {
            (self.id, self.firstSeq, self.generation, self.layout, self.changed) = (id, firstSeq, generation, layout, changed)
        }

        mutating func add(hash: Int64, seq: Int64) {
            switch layout {
            case .byHash:
                if let held = seqs.updateValue(seq, forKey: hash) {
                    seqs[hash] = held
                    more[hash, default: []].append(seq)
                }
            case .listed:
                hashes.append(hash)
                listedSeqs.append(seq)
            }
            count += 1
            lastSeq = max(lastSeq, seq)
        }

        /// Calls `body` with each seq held under `hash` while it returns true; returns whether it always did.
        func each(_ hash: Int64, _ body: (Int64) throws -> Bool) rethrows -> Bool {
            switch layout {
            case .byHash:
                if let seq = seqs[hash], try !body(seq) { return false }
                for seq in more[hash] ?? [] where try !body(seq) { return false }
            case .listed:
                for i in hashes.indices where hashes[i] == hash {
                    if try !body(listedSeqs[i]) { return false }
                }
            }
            return true
        }

        /// Every pair, in no order.
        var pairs: [(hash: Int64, seq: Int64)] {
            switch layout {
            case .byHash:
                var pairs = seqs.map { (hash: $0.key, seq: $0.value) }
                pairs.reserveCapacity(count)
                for (hash, seqs) in more { for seq in seqs { pairs.append((hash, seq)) } }
                return pairs
            case .listed:
                return hashes.indices.map { (hashes[$0], listedSeqs[$0]) }
            }
        }

        /// Room for `keys` keys.
        mutating func reserve(_ keys: Int) {
            switch layout {
            case .byHash: seqs.reserveCapacity(keys)
            case .listed:
                hashes.reserveCapacity(keys)
                listedSeqs.reserveCapacity(keys)
            }
        }
    }

    private let table: String
    private let shape: Shape
    /// Whether sealed runs have filters: those of keys the append searches (`OpenLayout.byHash`).
    private var filtered: Bool { open.layout == .byHash }
    private var sealed: [Sealed] = []
    /// The filter of the keys of many sealed runs (a table with filters only), and the indexes in
    /// `sealed` of the runs it does not cover.
    private(set) var covering: CoveringFilter?
    private(set) var uncovered: [Int] = []
    private var open: Open
    /// Pairs to a chunk: a page's worth (1,016 at 16 KiB pages, 248 at 4 KiB).
    private let chunkKeys: Int
    private let readChunk: BulkStatement

    /// The runs of `table` as this transaction sees them, with `cache`'s filters and open keys
    /// where they are current. The open keys move out of `cache` (one owner: no copy of them)
    /// and back in with `finish`.
    package init(_ db: Database, table: String, source: Source, cache: inout Cache, shape: Shape = .standard) throws {
        self.table = table
        self.shape = shape
        let filtered = source.layout == .byHash
        var cachedOpen: Open?
        swap(&cachedOpen, &cache.open)
        var open: Open?
        // Not the filters and fences, which a writer's cache nearly always holds: a filter is
        // copied out whole (the runs of a 10M log: 26 MB for each transaction, in fresh pages).
        // They are the rows' last columns, past the page, read only when selected (v19).
        let rows = try Row.fetchAll(db, sql: """
            SELECT run, tier, keys, sealed, generation, first_seq FROM key_runs WHERE name = ? ORDER BY run
            """, arguments: [table])
        for row in rows {
            let (id, keys, generation): (Int64, Int64, Int64) = (row[0], row[2], row[4])
            guard row[3] as Bool else {
                guard open == nil, let firstSeq = row[5] as Int64? else {
                    throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "key_runs: \(table) has more than one open run")
                }
                if let cached = cachedOpen, cached.id == id, cached.generation == generation, cached.firstSeq == firstSeq,
                   cached.count == keys {
                    open = consume cachedOpen
                    cachedOpen = nil
                } else {
                    open = try Self.read(db, source, Open(id: id, firstSeq: firstSeq, generation: generation, layout: source.layout))
                    open!.changed = open!.count != keys
                }
                continue
            }
            var run = Sealed(id: id, tier: row[1], keys: keys, generation: generation, filter: nil, fences: [])
            if let cached = cache.sealed[id], cached.generation == generation, cached.keys == keys {
                (run.filter, run.fences) = (cached.filter, cached.fences)
            } else if let stored = try Self.stored(db, table, run: id, filtered: filtered) {
                (run.filter, run.fences) = stored
            } else { // a run made by a migration has no filter yet
                (run.filter, run.fences) = try Self.scan(db, table, run: id, keys: keys, filtered: filtered)
                run.changed = true
            }
            sealed.append(run)
        }
        guard let open else {
            throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "key_runs: \(table) has no open run")
        }
        self.open = open
        let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
        chunkKeys = Self.chunkKeys(pageSize: pageSize)
        readChunk = try BulkStatement(cached: db, "SELECT keys FROM \(table) WHERE id = ?")
        if filtered {
            // Out of the cache while this transaction adds to it: a rollback then drops it.
            covering = cache.covering.take()
                ?? CoveringFilter(keys: max(shape.firstCapacity * 4, 2 * sealedKeys), maximumBits: shape.coveringBits)
            refreshCoverage()
        }
    }

    /// The keys of the sealed runs.
    private var sealedKeys: Int { sealed.reduce(0) { $0 + Int(clamping: $1.keys) } }

    private mutating func refreshCoverage() {
        guard let covering else { return uncovered = sealed.indices.map { $0 } }
        uncovered = sealed.indices.filter { !covering.covers(sealed[$0].id, sealed[$0].generation) }
    }

    /// Inserts the keys of one run the covering filter does not cover, read from its chunks: a writer
    /// that starts covers the log's runs one a transaction. A full filter is made again, twice the size;
    /// one at its largest covers the runs that still fit, and leaves the others to their own filters.
    private mutating func coverOne(_ db: Database) throws {
        guard let covering, !uncovered.isEmpty else { return }
        if let index = uncovered.first(where: { fits(sealed[$0].keys, in: covering) }) {
            try cover(db, index, in: covering)
            refreshCoverage()
        } else if !covering.isLargest {
            try grow(db)
        }
    }

    private func fits(_ keys: Int64, in covering: CoveringFilter) -> Bool {
        covering.keys + Int(clamping: keys) <= covering.capacity
    }

    /// A covering filter of twice the sealed keys, covering every sealed run at once (the largest
    /// runs first, as many as fit): made again when full, so that no run is left to its own filter
    /// for the transactions that covering one a transaction would take (a 10M `ingest` whose filter
    /// was remade empty ran its last millions at two thirds of its first). Never made again at its
    /// largest size, which would read every run's keys again for no room gained.
    private mutating func grow(_ db: Database) throws {
        covering = CoveringFilter(keys: 2 * sealedKeys, maximumBits: shape.coveringBits)
        if let covering {
            for index in sealed.indices.sorted(by: { sealed[$0].keys > sealed[$1].keys })
            where fits(sealed[index].keys, in: covering) {
                try cover(db, index, in: covering)
            }
        }
        refreshCoverage()
    }

    /// Inserts the keys of sealed run `index`, read from its chunks, into `covering`.
    private func cover(_ db: Database, _ index: Int, in covering: CoveringFilter) throws {
        let run = sealed[index]
        try Self.eachHash(db, table, run: run.id) { hash, _ in covering.insert(hash) }
        covering.cover(run.id, run.generation, keys: [])
    }

    /// Asks the memory for the block of the covering filter that a lookup of `hash` reads first: the
    /// append asks for a record's keys some records before it looks them up.
    package func prefetch(hash: Int64) {
        covering?.prefetch(mixed: BloomFilter.mix(hash))
    }

    /// Pairs to a chunk for pages of `pageSize` bytes: one chunk to a leaf page, with room for
    /// the row's header.
    private static func chunkKeys(pageSize: Int) -> Int { max(16, (pageSize - 128) / 16) }

    /// The row id of a run's chunk.
    private static func chunkID(_ run: Int64, _ chunk: Int) -> Int64 { run << 32 | Int64(chunk) }

    /// The open run's keys from the log.
    private static func read(_ db: Database, _ source: Source, _ open: Open) throws -> Open {
        var open = open
        try BulkStatement(cached: db, source.sql).each({ $0.add(open.firstSeq) }) { row in
            open.add(hash: source.hash(row), seq: row.int(0))
        }
        return open
    }

    /// A filter of the hashes in `run` (when `filtered`), sized for `keys` keys, and its fences, from its chunks.
    private static func scan(
        _ db: Database, _ table: String, run: Int64, keys: Int64, filtered: Bool
    ) throws -> (BloomFilter?, [Int64]) {
        var filter = filtered ? BloomFilter(keys: Int(clamping: keys)) : nil
        var fences: [Int64] = []
        try eachHash(db, table, run: run) { hash, first in
            if first { fences.append(hash) }
            filter?.insert(hash)
        }
        return (filter, fences)
    }

    /// Calls `body` with each hash of sealed run `run`, in key order, and whether it is its chunk's first.
    private static func eachHash(_ db: Database, _ table: String, run: Int64, _ body: (Int64, Bool) -> Void) throws {
        try BulkStatement(cached: db, "SELECT keys FROM \(table) WHERE id BETWEEN ? AND ? ORDER BY id")
            .each({ $0.add(chunkID(run, 0)); $0.add(chunkID(run, Int(UInt32.max))) }) { row in
                let pairs = row.blob(0)
                for offset in stride(from: 0, to: pairs.count - 15, by: 16) {
                    body(pairs.int64(at: offset / 8), offset == 0)
                }
            }
    }

    /// Fences as `key_runs.fences` holds them: 8 bytes, little-endian, per chunk.
    private static func fences(_ data: Data) -> [Int64]? {
        guard data.count % 8 == 0 else { return nil }
        return data.withUnsafeBytes { raw in
            (0..<(data.count / 8)).map { raw.int64(at: $0) }
        }
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

    /// A sealed run's filter (when `filtered`) and fences as `key_runs` stores them; nil when it holds none.
    private static func stored(_ db: Database, _ table: String, run id: Int64, filtered: Bool) throws -> (BloomFilter?, [Int64])? {
        let sql = filtered ? "SELECT fences, filter FROM key_runs WHERE name = ? AND run = ?"
            : "SELECT fences FROM key_runs WHERE name = ? AND run = ?"
        guard let row = try Row.fetchOne(db, sql: sql, arguments: [table, id]),
              let fences = (row[0] as Data?).flatMap(Self.fences) else { return nil }
        guard filtered else { return (nil, fences) }
        guard let bytes = (row[1] as Data?).map(Array.init), let filter = BloomFilter(bytes: bytes) else { return nil }
        return (filter, fences)
    }

    /// Calls `body` with each `seq` held under `hash` while it returns true.
    private func each(_ hash: Int64, _ body: (Int64) throws -> Bool) throws {
        guard try open.each(hash, body) else { return }
        // By index: a `Sealed` copied out of the array would retain and release its filter.
        let mixed = BloomFilter.mix(hash)
        if let covering, !covering.mayContain(mixed: mixed) { // in no covered run: the others only
            for index in uncovered { sealed[index].filter?.prefetch(mixed: mixed) }
            for index in uncovered where sealed[index].filter?.mayContain(mixed: mixed) ?? true {
                if try !search(index, hash, body) { return }
            }
            return
        }
        for index in sealed.indices { sealed[index].filter?.prefetch(mixed: mixed) }
        for index in sealed.indices where sealed[index].filter?.mayContain(mixed: mixed) ?? true {
            if try !search(index, hash, body) { return }
        }
    }

    /// Calls `body` with each `seq` held under `hash` in sealed run `index` while it returns
    /// true; returns whether it always did. The chunks read are those whose range may hold
    /// the hash: nearly always one.
    private func search(_ index: Int, _ hash: Int64, _ body: (Int64) throws -> Bool) throws -> Bool {
        let (id, fences) = (sealed[index].id, sealed[index].fences)
        // The first chunk whose first hash is not below `hash`; the one before may end with it.
        var (low, high) = (0, fences.count)
        while low < high {
            let mid = (low + high) / 2
            if fences[mid] < hash { low = mid + 1 } else { high = mid }
        }
        var chunk = max(0, low - 1)
        repeat {
            var more = true
            try readChunk.first({ $0.add(Self.chunkID(id, chunk)) }) { row in
                let pairs = row.blob(0)
                func hashAt(_ i: Int) -> Int64 { pairs.int64(at: i * 2) }
                var (low, high) = (0, pairs.count / 16)
                while low < high {
                    let mid = (low + high) / 2
                    if hashAt(mid) < hash { low = mid + 1 } else { high = mid }
                }
                while more, low < pairs.count / 16, hashAt(low) == hash {
                    more = try body(pairs.int64(at: low * 2 + 1))
                    low += 1
                }
            }
            if !more { return false }
            chunk += 1
        } while chunk < fences.count && fences[chunk] <= hash
        return true
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
        try coverOne(db)
        try store(db, into: &cache)
    }

    /// The id of a new run: after every run's, so that its rows go at the table's end.
    private var nextID: Int64 { max(sealed.map(\.id).max() ?? 0, open.id) + 1 }

    /// Writes the open run's keys, in key order, as a sealed run of tier 0; the open run then
    /// starts after its last event.
    private mutating func seal(_ db: Database) throws {
        var keys = open.pairs
        Self.sortByHashAndSeq(&keys)
        var writer = try ChunkWriter(db, table, run: nextID, keys: keys.count, chunkKeys: chunkKeys, filtered: filtered)
        for key in keys { try writer.add(key.hash, key.seq) }
        let run = try writer.finish(tier: 0, generation: Self.newGeneration())
        sealed.append(run)
        open = Open(id: open.id, firstSeq: open.lastSeq + 1, generation: 0, layout: open.layout, changed: true)
        if let covering {
            if fits(Int64(keys.count), in: covering) {
                covering.cover(run.id, run.generation, keys: keys.lazy.map(\.hash))
            } else if !covering.isLargest {
                try grow(db) // the new run's keys with the others', in a larger filter
            } // else at its largest: the new run is checked by its own filter
            refreshCoverage()
        }
        open.reserve(shape.firstCapacity)
    }

    /// Sorts `pairs` by hash, then seq: a radix sort of the hashes (11 bits a pass, stable), then
    /// the rare runs of equal hashes by seq. The open run's ~300,000 pairs took ~19 ms in the
    /// standard library's sort (a stable merge sort through a closure comparing tuples): 2.3 % of
    /// a 10M `ingest`'s CPU, on the writer's thread.
    static func sortByHashAndSeq(_ pairs: inout [(hash: Int64, seq: Int64)]) {
        let count = pairs.count
        guard count >= 1024 else {
            pairs.sort { ($0.hash, $0.seq) < ($1.hash, $1.seq) }
            return
        }
        let bits = 11, mask = UInt64(1 << bits - 1)
        // The sign bit flipped: signed order as unsigned.
        func digit(_ hash: Int64, _ shift: Int) -> Int {
            Int(truncatingIfNeeded: ((UInt64(bitPattern: hash) ^ (1 << 63)) >> UInt64(shift)) & mask)
        }
        var scratch = [(hash: Int64, seq: Int64)](repeating: (0, 0), count: count)
        var sortedInScratch = false
        pairs.withUnsafeMutableBufferPointer { pairs in
            scratch.withUnsafeMutableBufferPointer { scratch in
                var (source, target) = (pairs, scratch)
                var offsets = [Int](repeating: 0, count: 1 << bits)
                for shift in stride(from: 0, to: 64, by: bits) {
                    for i in offsets.indices { offsets[i] = 0 }
                    for pair in source { offsets[digit(pair.hash, shift)] += 1 }
                    if offsets[digit(source[0].hash, shift)] == count { continue } // one digit: nothing moves
                    var sum = 0
                    for i in offsets.indices { (offsets[i], sum) = (sum, sum + offsets[i]) }
                    for pair in source {
                        let d = digit(pair.hash, shift)
                        target[offsets[d]] = pair
                        offsets[d] += 1
                    }
                    swap(&source, &target)
                    sortedInScratch.toggle()
                }
            }
        }
        if sortedInScratch { swap(&pairs, &scratch) }
        var start = 0
        while start < count {
            var end = start + 1
            while end < count && pairs[end].hash == pairs[start].hash { end += 1 }
            if (start + 1..<end).contains(where: { pairs[$0 - 1].seq > pairs[$0].seq }) {
                pairs[start..<end].sort { $0.seq < $1.seq }
            }
            start = end
        }
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
            let run = try merge(db, merged, tier: tier + 1)
            // The keys of covered runs are in the covering filter: so are their merge's.
            if let covering, merged.allSatisfy({ covering.covers($0.id, $0.generation) }) {
                covering.coverMerged(run.id, run.generation)
            }
            for old in merged {
                try db.execute(sql: "DELETE FROM \(table) WHERE id BETWEEN ? AND ?",
                               arguments: [Self.chunkID(old.id, 0), Self.chunkID(old.id, Int(UInt32.max))])
            }
            let ids = merged.map { String($0.id) }.joined(separator: ", ")
            try db.execute(sql: "DELETE FROM key_runs WHERE name = ? AND run IN (\(ids))", arguments: [table])
            sealed.removeAll { $0.tier == tier }
            sealed.append(run)
            refreshCoverage()
        }
    }

    /// Merges `runs` into one new run of `tier` at the table's end: the runs' chunks read one
    /// at a time each (no statement reads the table while another writes it), their pairs
    /// merged in key order, written a chunk at a time. Memory holds a chunk of each run.
    private func merge(_ db: Database, _ runs: [Sealed], tier: Int) throws -> Sealed {
        struct Cursor {
            let run: Int64
            let chunks: Int
            var chunk = -1
            var pairs: [Int64] = []
            var next = 0
        }
        func load(_ cursor: inout Cursor) throws -> Bool {
            cursor.pairs.removeAll(keepingCapacity: true)
            cursor.next = 0
            while cursor.pairs.isEmpty {
                cursor.chunk += 1
                guard cursor.chunk < cursor.chunks else { return false }
                try readChunk.first({ $0.add(Self.chunkID(cursor.run, cursor.chunk)) }) { row in
                    let bytes = row.blob(0)
                    for offset in stride(from: 0, to: bytes.count - 7, by: 8) {
                        cursor.pairs.append(bytes.int64(at: offset / 8))
                    }
                }
            }
            return true
        }
        var cursors: [Cursor] = []
        // Each cursor's next pair, apart, so that choosing the least copies no cursor.
        var heads: [(hash: Int64, seq: Int64)] = []
        for run in runs {
            var cursor = Cursor(run: run.id, chunks: run.fences.count)
            if try load(&cursor) {
                cursors.append(cursor)
                heads.append((cursor.pairs[0], cursor.pairs[1]))
            }
        }
        var writer = try ChunkWriter(
            db, table, run: nextID, keys: Int(runs.reduce(0) { $0 + $1.keys }), chunkKeys: chunkKeys, filtered: filtered)
        while !heads.isEmpty {
            var least = 0
            for i in heads.indices.dropFirst() where heads[i] < heads[least] { least = i }
            try writer.add(heads[least].hash, heads[least].seq)
            cursors[least].next += 2
            if cursors[least].next == cursors[least].pairs.count, try !load(&cursors[least]) {
                cursors.remove(at: least)
                heads.remove(at: least)
            } else {
                heads[least] = (cursors[least].pairs[cursors[least].next], cursors[least].pairs[cursors[least].next + 1])
            }
        }
        return try writer.finish(tier: tier, generation: Self.newGeneration())
    }

    private mutating func store(_ db: Database, into cache: inout Cache) throws {
        cache.sealed = [:]
        for index in sealed.indices {
            if sealed[index].changed {
                let run = sealed[index]
                var fences = Data(capacity: run.fences.count * 8)
                for fence in run.fences { withUnsafeBytes(of: fence.littleEndian) { fences.append(contentsOf: $0) } }
                try db.execute(sql: """
                    INSERT INTO key_runs (name, run, tier, keys, sealed, generation, filter, fences) VALUES (?, ?, ?, ?, 1, ?, ?, ?)
                    ON CONFLICT (name, run) DO UPDATE SET filter = excluded.filter, fences = excluded.fences
                    """, arguments: [table, run.id, run.tier, run.keys, run.generation, run.filter.map { Data($0.bytes) }, fences])
                sealed[index].changed = false
            }
            cache.sealed[sealed[index].id] = sealed[index]
        }
        covering?.keepOnly(Set(sealed.map { CoveringFilter.Run(id: $0.id, generation: $0.generation) }))
        cache.covering = covering.take()
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

/// Writes one sealed run's pairs, given in key order, as chunks at the table's end, with its
/// filter and fences.
private struct ChunkWriter {
    private let insert: BulkStatement
    private let run: Int64
    private let chunkKeys: Int
    private var pairs: [Int64] = []
    private var fences: [Int64] = []
    private var filter: BloomFilter?
    private var keys: Int64 = 0

    init(_ db: Database, _ table: String, run: Int64, keys: Int, chunkKeys: Int, filtered: Bool) throws {
        insert = try BulkStatement(cached: db, "INSERT INTO \(table) (id, keys) VALUES (?, ?)")
        (self.run, self.chunkKeys) = (run, chunkKeys)
        filter = filtered ? BloomFilter(keys: keys) : nil
        pairs.reserveCapacity(chunkKeys * 2)
    }

    mutating func add(_ hash: Int64, _ seq: Int64) throws {
        if pairs.isEmpty { fences.append(hash) }
        pairs.append(hash.littleEndian)
        pairs.append(seq.littleEndian)
        filter?.insert(hash)
        keys += 1
        if pairs.count == chunkKeys * 2 { try flush() }
    }

    private mutating func flush() throws {
        guard !pairs.isEmpty else { return }
        let id = run << 32 | Int64(fences.count - 1)
        try pairs.withUnsafeBytes { bytes in _ = try insert.run { $0.add(id); $0.add(blob: bytes) } }
        pairs.removeAll(keepingCapacity: true)
    }

    fileprivate mutating func finish(tier: Int, generation: Int64) throws -> KeyRuns.Sealed {
        try flush()
        return KeyRuns.Sealed(id: run, tier: tier, keys: keys, generation: generation, filter: filter, fences: fences,
                              changed: true)
    }
}

extension UnsafeRawBufferPointer {
    /// The `index`th 8-byte little-endian integer: the layout of the runs' chunks and fences.
    fileprivate func int64(at index: Int) -> Int64 {
        Int64(littleEndian: loadUnaligned(fromByteOffset: index * 8, as: Int64.self))
    }
}
