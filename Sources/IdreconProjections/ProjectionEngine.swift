import GRDB
import IdreconDomain
import IdreconLog

/// One projection of the log. A conforming type owns its tables (DDL, secondary indexes,
/// the order digests read them in, binding and decoding of their rows) and its fold. The
/// live path folds the log after the projection's cursor in batches with `apply`
/// (`catchUp`); replay builds a new generation of its tables with its bulk hook (`bulk`).
///
/// Adding a projection is one file conforming to this protocol plus its entry in a
/// `ProjectionRegistry` (`standard` for the `idrecon` command). A database that has not
/// seen it yet builds it from the log when a writer opens it, without touching the others
/// (`ProjectionCursors`). The folds work on `ProjectionFact`s and domain types; only the
/// table layer of each file speaks SQL, so a second store can implement it.
package protocol Projection: Sendable {
    /// The projection's stable name: its row in `projection_cursors`.
    static var name: String { get }
    /// The projection's tables (reader-view names) with their primary-key columns, in the
    /// order digests read rows in.
    static var tables: [(name: String, primaryKey: String)] { get }
    /// `CREATE TABLE` statements of generation `g`'s tables, without secondary indexes.
    static func createTables(generation g: Int) -> String
    /// The secondary indexes of generation `g` (a bulk load creates them after loading).
    static func createIndexes(generation g: Int) -> String
    /// Folds a batch of logged events (in log order) into the rows of the entities they
    /// touch: groups the facts by entity, reads the touched rows in key order, folds, and
    /// writes each changed row once, in key order.
    static func apply(_ facts: [ProjectionFact], in context: ProjectionContext) throws
    /// How replay builds the projection's tables of a new generation.
    static var bulk: BulkBuild { get }
}

extension Projection {
    package static var bulk: BulkBuild { .refold }
}

/// How replay builds a projection's new generation.
package enum BulkBuild: Sendable {
    /// Folded from replay's one scan of the log, partition by partition, with the rows
    /// loaded in key order before the secondary indexes exist (`ProjectionBuilder`: the
    /// built-in projections, whose folds it shares).
    case scan
    /// Folded with `apply` over the log's snapshot in chunks, each its own transaction, as
    /// the live path folds it: a new projection needs nothing more than its fold.
    case refold
}

/// The projections one database is folded into, applied in this order (identities before
/// friends: nothing depends on the order today, but it is fixed so that the writes are).
package struct ProjectionRegistry: Sendable {
    package let projections: [any Projection.Type]

    /// What the `idrecon` command folds.
    package static let standard = ProjectionRegistry([
        DevicesProjection.self, IdentitiesProjection.self, FriendsProjection.self, AccessProjection.self,
    ])

    package init(_ projections: [any Projection.Type]) {
        precondition(Set(projections.map { $0.name }).count == projections.count, "projection names must be unique")
        self.projections = projections
    }

    /// This registry with `projection` registered last.
    package func adding(_ projection: any Projection.Type) -> ProjectionRegistry {
        ProjectionRegistry(projections + [projection])
    }

    package var tableNames: [String] { projections.flatMap { $0.tables.map(\.name) } }

    package func primaryKey(of table: String) -> String? {
        for projection in projections { if let t = projection.tables.first(where: { $0.name == table }) { return t.primaryKey } }
        return nil
    }
}

package enum ProjectionEngine {
    /// Applies a batch of logged events to `projections`.
    static func apply(_ facts: [ProjectionFact], to projections: [any Projection.Type], in context: ProjectionContext) throws {
        guard !facts.isEmpty else { return }
        for projection in projections { try projection.apply(facts, in: context) }
    }

    /// Events folded per `apply` when catching up: the fold reads and writes each touched
    /// entity once per chunk, and a chunk touches pages all over the projection tables
    /// whatever its length, so bigger chunks write fewer rows and pages per event (a device
    /// seen six times in a chunk is written once). The chunk's facts are held in memory:
    /// 400,000 is what the memory bound allows with `SharedTexts` and the process's
    /// allocator settings (1M ingest, paired runs: 200,000 took 41.9–44.1 s at 249–280 MB
    /// peak, 400,000 36.8–41.6 s at 283–284 MB; `schemas/sql.md`). At 10M events an earlier
    /// round measured 60–100 µs per event whatever the chunk (250,000–500,000): there random
    /// reads of rows in large tables cost more than the page writes a bigger chunk saves.
    static let catchUpChunk = 400_000

    /// Friend-list entries folded per chunk at most: a chunk's friend edges and snapshots are
    /// grouped in memory, so long lists end a chunk before `catchUpChunk` events (the bench's
    /// stream, 0–7 friends a list, holds about 600,000 in 400,000 events; lists of up to 40
    /// made a 1M ingest peak at 518 MB before this bound, and 221 MB with it now).
    static let catchUpFriendEntries = 600_000

    /// Applies the logged events after `cursor` (up to `last`) to `projections` (all of
    /// the registry's by default) in `tables`, in chunks of `catchUpChunk` in log order, at
    /// most `chunks` of them; returns the last sequence number applied (`cursor` when none)
    /// and the events applied. A chunk's refolds see the log up to the chunk's end only.
    /// `feed` decides each chunk's changes before it is folded (the live projections only).
    /// A late event's refold finds the events of its device or ASID through `keys`.
    package static func catchUp(
        _ db: Database, keys: LogKeys, tables: ProjectionTables, config: IdentityConfig, after cursor: Int64,
        through last: Int64 = .max, projections: [any Projection.Type]? = nil, chunks: Int = .max,
        feed: ChangeFeedWriter? = nil
    ) throws -> (cursor: Int64, events: Int64) {
        var cursor = cursor, events: Int64 = 0
        let read = try BulkStatement(cached: db, """
            SELECT \(LoggedEvent.selectColumns) FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT \(catchUpChunk)
            """)
        for _ in 0..<chunks {
            var facts: [ProjectionFact] = []
            var friendEntries = 0
            var shared = SharedTexts()
            try read.eachWhile({ $0.add(cursor); $0.add(last) }) { row in
                var fact = ProjectionFact(row)
                shared.share(&fact.linkEmail)
                shared.share(&fact.friends)
                friendEntries += fact.friendEntries
                facts.append(fact)
                return friendEntries < catchUpFriendEntries
            }
            guard let end = facts.last?.seq else { break }
            try feed?.decide(facts, tables: tables, config: config)
            let context = ProjectionContext(db: db, keys: keys, tables: tables, config: config, visibleSeq: end)
            try apply(facts, to: projections ?? tables.registry.projections, in: context)
            cursor = end
            events += Int64(facts.count)
        }
        return (cursor, events)
    }

    /// Brings the live projections up to the end of the log when they are at least
    /// `minimum` events behind it (at least one). nil is write-behind: catch up once one
    /// more transaction like this one (`appended` events) could carry the lag past a chunk,
    /// so that a catch-up folds one chunk of up to `catchUpChunk` events. (Waiting for a
    /// full chunk folded it plus a trailing chunk of the crossing transaction's events,
    /// which touched pages all over the tables a second time: 9 chunks for 1M events
    /// instead of 6.) A registered projection that is behind the others (new to the
    /// database, or left behind by a writer that does not register it) is brought level
    /// with them first. Returns the events applied.
    @discardableResult
    package static func catchUpLive(
        _ db: Database, keys: LogKeys, registry: ProjectionRegistry, ifBehindBy minimum: Int64? = 1, appended: Int = 0
    ) throws -> Int64 {
        // Asked once per appending transaction: two integers, and the state only when due.
        let lag = try Int64.fetchOne(db, sql: "SELECT coalesce((SELECT max(seq) FROM events), 0) - applied_seq FROM projection_meta") ?? 0
        guard lag >= max(1, minimum ?? Int64(catchUpChunk - appended)) else { return 0 }
        let state = try ProjectionState.load(db, registry: registry)
        try ProjectionCursors.level(db, keys: keys, state)
        let feed = try ChangeFeedWriter(db, appliedSeq: state.appliedSeq)
        let (cursor, events) = try catchUp(
            db, keys: keys, tables: state.tables, config: state.config, after: state.appliedSeq, feed: feed)
        try db.execute(sql: "UPDATE projection_meta SET applied_seq = ?", arguments: [cursor])
        try ProjectionCursors.advance(db, registry, to: cursor)
        try feed?.finish(decidedSeq: cursor)
        return events
    }
}

extension ProjectionEngine {
    /// Events behind the log from which the live path builds the projections in bulk, when
    /// `bulkDue` allows: a catch-up chunk.
    package static let bulkMinimum = Int64(catchUpChunk)

    /// Whether the live projections should be built anew from the log in bulk (replay's
    /// builder) rather than have the events they lack folded in, once `expected` more events
    /// are appended: they would lack at least `minimum` events and at least as many as they
    /// have applied (the log at least doubles: an ingest into a new or small database, a
    /// backfill), and no change feed is bound (its changes are decided event by event). A
    /// bulk build reads, folds and writes each entity once, in key order, into tables
    /// without secondary indexes: at 1M events replay builds 137,000 events/s where the
    /// live fold with the log's append ingests ~30,000; and the doubling bounds its cost at
    /// twice the events it adds, however long the log.
    package static func bulkDue(_ db: Database, from minimum: Int64, expecting expected: Int64 = 0) throws -> Bool {
        let row = try Row.fetchOne(db, sql: """
            SELECT coalesce((SELECT max(seq) FROM events), 0), applied_seq, (SELECT count(*) FROM change_feed)
            FROM projection_meta
            """)
        guard let row else { return false }
        let (last, applied, feeds): (Int64, Int64, Int64) = (row[0], row[1], row[2])
        let (sum, overflow) = (last - applied).addingReportingOverflow(max(0, expected))
        return feeds == 0 && (overflow ? .max : sum) >= max(1, minimum, applied)
    }
}

/// One copy of each long text of a chunk's facts: a person's logins repeat the same email key
/// and often the same friend list, and a chunk's facts are most of a catch-up's memory (1M
/// ingest, chunks of 400,000: 303–307 MB peak, 283–284 MB with these texts shared). Texts
/// are the same when their bytes are (`ByteText`).
struct SharedTexts {
    private var texts: Set<ByteText> = []

    mutating func share(_ text: inout String?) {
        guard let value = text, value.utf8.count > 15 else { return } // shorter ones are stored inline
        text = texts.insert(ByteText(value)).memberAfterInsert.text
    }
}

/// Where the projections of one transaction are read and written: a generation's tables
/// on the writer's connection, the identity configuration, how far the log is visible, and
/// the log's keys by which a refold finds an entity's events.
package struct ProjectionContext {
    package let db: Database
    package let keys: LogKeys
    package let tables: ProjectionTables
    package let config: IdentityConfig
    let blocked: Set<String>
    /// Refolds read logged events up to this sequence number (replay's catch-up applies
    /// the log in chunks; a refold must not see later chunks).
    package let visibleSeq: Int64

    init(db: Database, keys: LogKeys, tables: ProjectionTables, config: IdentityConfig, visibleSeq: Int64 = .max) {
        self.db = db
        self.keys = keys
        self.tables = tables
        self.config = config
        self.blocked = Set(config.blockedKeys)
        self.visibleSeq = visibleSeq
    }
}

/// What the projections read of one logged event: its `events` row (`LoggedEvent`, where the
/// columns are described; no payload is parsed again).
package typealias ProjectionFact = LoggedEvent

extension LoggedEvent {
    var deviceFact: DeviceFact { DeviceFact(key: key, type: type, tracking: tracking, asid: asid) }

    /// The ASIDs its friend list holds (counted on the stored bytes).
    var friendEntries: Int {
        guard var list = friends, !list.isEmpty else { return 0 }
        return list.withUTF8 { bytes in bytes.reduce(1) { $1 == UInt8(ascii: ",") ? $0 + 1 : $0 } }
    }
}

/// Text as a key of the projections' in-memory grouping: equal and ordered by its UTF-8
/// bytes, as SQLite's BINARY collation orders the tables (Swift's `String` would merge
/// canonically equivalent texts, and its order is not the tables' key order). For free
/// text: app and device IDs, link keys. ASIDs are validated as 1–32 ASCII digits, and for
/// ASCII `String`'s equality and order are the bytes', so ASIDs are keyed by `String`
/// (cheaper: replay groups millions of them).
package struct ByteText: Hashable, Comparable, Sendable {
    package var text: String

    package init(_ text: String) { self.text = text }

    // On the contiguous UTF-8 of native strings, in bulk: these run millions of times in a
    // replay (a byte at a time through `String.UTF8View` cost a third of its speed).
    package static func == (a: ByteText, b: ByteText) -> Bool {
        a.withBytes { x in b.withBytes { y in String.sameBytes(x, y) } }
    }

    package static func < (a: ByteText, b: ByteText) -> Bool {
        a.text.bytesPrecede(b.text)
    }

    package func hash(into hasher: inout Hasher) {
        withBytes { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }

    private func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        var text = text // a copy of the reference: `withUTF8` makes it native in place if needed
        return text.withUTF8(body)
    }
}

/// A pair of texts compared as `ByteText`s, first by the first.
struct ByteTextPair: Hashable, Comparable, Sendable {
    var first: ByteText
    var second: ByteText

    init(_ first: String, _ second: String) {
        self.first = ByteText(first)
        self.second = ByteText(second)
    }

    static func < (a: ByteTextPair, b: ByteTextPair) -> Bool { a.first != b.first ? a.first < b.first : a.second < b.second }
}
