import GRDB
import IdreconDomain
import IdreconLog

/// The friend graph (SPEC section 4): each ASID's latest friend list and its latest
/// decline of `user_friends` (`friend_snapshots`, a `FriendSnapshot` folds logins in any
/// order), the undirected edges while either side's snapshot names the other
/// (`friend_edges`, with which side names it), and every ASID named in a friend list with
/// its earliest mention (`friend_mentions`).
enum FriendsProjection: Projection {
    static let name = "friends"
    static let bulk = BulkBuild.scan
    static let tables = [
        (name: "friend_snapshots", primaryKey: "asid"),
        (name: "friend_edges", primaryKey: "a, b"),
        (name: "friend_mentions", primaryKey: "asid"),
    ]

    static func createTables(generation g: Int) -> String {
        """
        CREATE TABLE friend_snapshots_g\(g) (
            asid           TEXT PRIMARY KEY,
            listed_at      INTEGER,
            listed_event   TEXT,
            friends        TEXT NOT NULL,
            declined_at    INTEGER,
            declined_event TEXT
        ) STRICT, WITHOUT ROWID;

        CREATE TABLE friend_edges_g\(g) (
            a    TEXT NOT NULL,
            b    TEXT NOT NULL,
            by_a INTEGER NOT NULL CHECK (by_a IN (0, 1)),
            by_b INTEGER NOT NULL CHECK (by_b IN (0, 1)),
            PRIMARY KEY (a, b),
            CHECK (a < b),
            CHECK (by_a = 1 OR by_b = 1)
        ) STRICT, WITHOUT ROWID;

        CREATE TABLE friend_mentions_g\(g) (
            asid        TEXT PRIMARY KEY,
            first_at    INTEGER NOT NULL,
            first_event TEXT NOT NULL
        ) STRICT, WITHOUT ROWID;
        """
    }

    static func createIndexes(generation g: Int) -> String {
        "CREATE INDEX friend_edges_g\(g)_b ON friend_edges_g\(g)(b);"
    }

    /// An undirected edge between two ASIDs, `a < b` (the table's CHECK and key order; ASIDs
    /// are ASCII digits, so `String` order is byte order).
    struct Edge: Hashable, Comparable {
        var a: String
        var b: String

        init(_ x: String, _ y: String) { (a, b) = x < y ? (x, y) : (y, x) }

        static func < (l: Edge, r: Edge) -> Bool { l.a != r.a ? l.a < r.a : l.b < r.b }

        /// Whether `asid` is this edge's `a` (by bytes): which side a snapshot of it names.
        func hasA(_ asid: String) -> Bool { a.sameBytes(as: asid) }
    }

    /// Which sides name an edge; nil: unknown (not changed by this fold).
    typealias Sides = (byA: Bool?, byB: Bool?)

    /// Records that `from`'s snapshot names (or no longer names) `to`.
    static func set(_ edges: inout [Edge: Sides], from: String, to: String, _ on: Bool) {
        let edge = Edge(from, to)
        mark(&edges, edge, byA: edge.hasA(from), on)
    }

    /// Records that the snapshot of `edge`'s `a` (`byA`) or of its `b` names it, or no longer does.
    static func mark(_ edges: inout [Edge: Sides], _ edge: Edge, byA: Bool, _ on: Bool) {
        if byA { edges[edge, default: (nil, nil)].byA = on } else { edges[edge, default: (nil, nil)].byB = on }
    }

    /// Lowers `friend`'s mention to `key` if that is earlier (the earliest mention wins, in
    /// any order; one dictionary lookup, in place).
    static func lower(_ mentions: inout [String: EventKey], _ friend: String, to key: EventKey) {
        func earlier(_ first: inout EventKey) { if key < first { first = key } }
        earlier(&mentions[friend, default: key])
    }

    // MARK: Live

    static func apply(_ facts: [ProjectionFact], in context: ProjectionContext) throws {
        var mentions: [String: EventKey] = [:]
        var byASID: [String: [(key: EventKey, friends: [String]?, declines: Bool)]] = [:]
        for fact in facts where fact.type == .login {
            guard let asid = fact.asid, fact.friends != nil || fact.declinesFriends else { continue }
            let friends = fact.friends.map(StoredFriendList.split)
            byASID[asid, default: []].append((fact.key, friends, fact.declinesFriends))
            for friend in friends ?? [] { lower(&mentions, friend, to: fact.key) }
        }
        guard !byASID.isEmpty else { return }
        let rows = try Rows(context.db, context.tables)
        var edges: [Edge: Sides] = [:]
        for (asid, list) in byASID.sorted(by: { $0.key < $1.key }) {
            let stored = try rows.snapshot(asid)
            var snapshot = stored ?? FriendSnapshot()
            let before = snapshot.effective
            var changed = false
            for login in list {
                changed = snapshot.apply(key: login.key, friends: login.friends, declinesFriends: login.declines) || changed
            }
            guard changed else { continue }
            try rows.write(asid, snapshot, stored: stored != nil)
            let after = snapshot.effective
            for friend in before.subtracting(after) { set(&edges, from: asid, to: friend, false) }
            for friend in after.subtracting(before) { set(&edges, from: asid, to: friend, true) }
            try writeIfFull(&edges, rows)
        }
        try write(edges: edges, mentions: mentions, rows)
    }

    /// Edge changes held before they are written (about 50 bytes each).
    static let edgeBatch = 250_000

    /// Writes the edge changes once there are `edgeBatch`, each batch in key order: a side of
    /// an edge is set by one ASID's snapshot only, once per fold, so batches need no merging,
    /// and long friend lists cannot make the map grow with the chunk or the partition.
    static func writeIfFull(_ edges: inout [Edge: Sides], _ rows: Rows) throws {
        guard edges.count >= edgeBatch else { return }
        try write(edges: edges, mentions: [:], rows)
        edges.removeAll(keepingCapacity: true)
    }

    /// Writes changed edge sides and mentions in key order; both merge into what is stored,
    /// so the live fold and every replay partition write them alike.
    static func write(edges: [Edge: Sides], mentions: [String: EventKey], _ rows: Rows) throws {
        for (edge, sides) in edges.sorted(by: { $0.key < $1.key }) { try rows.setSides(edge, sides) }
        for (friend, first) in mentions.sorted(by: { $0.key < $1.key }) { try rows.mention(friend, first) }
    }

    // MARK: Bulk

    /// A partition's snapshots, mentions and (with one partition) edges as a bulk build
    /// loads them, in key order. A partition's mentions are those of its ASIDs
    /// (`ProjectionBuilder.SpilledFacts` routes them).
    struct BulkRows {
        /// Packed: `Rows.snapshot`, `Rows.mention`.
        var snapshots = PackedRows(), mentions = PackedRows()
        var edges: [Edge: Sides] = [:]
    }

    /// Adds the snapshot of an ASID that comes after those added (replay prepares them off the
    /// writer); `logins` are all its logins, in event time: the latest list and the latest
    /// decline decide it (a `String` is made of that list only). The edges it names go into the
    /// rows when the replay has one partition, else into `spill`, which writes them once every
    /// partition has added its own (`BulkSpill`).
    static func addBulk(_ asid: String, _ logins: [BulkLogin], to rows: inout BulkRows, spill: BulkSpill?) throws {
        let listed = logins.lastIndex(where: \.hasFriends), declined = logins.lastIndex(where: \.declinesFriends)
        guard listed != nil || declined != nil else { return }
        var snapshot = FriendSnapshot()
        if let listed {
            let friends = logins[listed].friends.map(StoredFriendList.split)
            snapshot.apply(key: logins[listed].key, friends: friends, declinesFriends: false)
        }
        if let declined { snapshot.apply(key: logins[declined].key, friends: nil, declinesFriends: true) }
        Rows.snapshot(asid, snapshot, &rows.snapshots)
        for friend in snapshot.effective {
            if let spill {
                try spill.add(edge: Edge(asid, friend), from: asid)
            } else {
                set(&rows.edges, from: asid, to: friend, true)
            }
        }
    }

    /// Writes a partition's rows (replay).
    static func writeBulk(_ rows: BulkRows, _ db: Database, _ t: ProjectionTables) throws {
        let writer = try Rows(db, t)
        try writer.insert(snapshots: rows.snapshots)
        try write(edges: rows.edges, mentions: [:], writer)
        try writer.insert(mentions: rows.mentions)
    }

    /// The edges of a replay with several partitions, each spilled to the partition that
    /// owns its `a` and written after every partition has added its own, a partition at a
    /// time in key order. An edge can come from the snapshot of either side, in any
    /// partition: merged into the table as each partition brought them, they were upserts
    /// all over a table that grows with the log (at 10M events a third of the replay's load).
    final class BulkSpill: @unchecked Sendable {
        private let ranges: KeyRanges
        private var edges: [SpillFile?]

        init(ranges: KeyRanges, partitions: Int, directory: String) throws {
            self.ranges = ranges
            edges = try (0..<partitions).map { _ in try SpillFile(directory: directory) }
        }

        /// `from`'s snapshot names the other side of `edge`.
        func add(edge: Edge, from: String) throws {
            try edges[ranges.partition(asid: edge.a)]?.append { out in
                out.add(edge.a); out.add(edge.b); out.add(UInt8(edge.hasA(from) ? 1 : 0))
            }
        }

        /// Edge sides ready to be written, each edge once, in key order: a partition's batches
        /// follow each other in the table's order, and each partition's follow the one before.
        typealias Batch = [(key: Edge, value: Sides)]

        /// Reads the partitions' edges in partition order, deleting their files, and sends them
        /// in batches of at most `edgeBatch`, each edge's sides merged. A partition's records are
        /// packed (`PackedEdges`) and sorted: a `String` is made of each edge once, not of each
        /// record, and the sides of one edge are neighbours. (Merged in a map of `Edge`s, by
        /// hashing two `String`s per record, this thread was the one the writer waited for after
        /// the last partition, 5 s at 10M events.)
        func read(_ send: (Batch) throws -> Void) throws {
            for partition in edges.indices {
                guard let file = edges[partition] else { continue }
                var packed = PackedEdges(records: file.records, bytes: file.bytes)
                try file.forEach { row in packed.append(a: row.text(), b: row.text(), byA: row.byte() == 1) }
                edges[partition] = nil
                try packed.merged(batches: edgeBatch, send)
            }
        }

        static func write(_ batch: Batch, _ db: Database, _ t: ProjectionTables) throws {
            try Rows(db, t).insertEdges(batch)
        }
    }

    /// A partition's spilled edge records, each an edge's two ASIDs and the side that names it:
    /// one fixed-size entry per record (no reference) and the ASIDs back to back in one buffer.
    struct PackedEdges {
        private struct Entry {
            /// The first 16 bytes of `a` and of `b` (`DeviceEvents.prefix16`): the sort reads the
            /// bytes only for ASIDs longer than that.
            var a: ByteBounds.Prefix, b: ByteBounds.Prefix
            var offset: Int
            var aLength: UInt32, bLength: UInt32
            var byA: Bool
        }

        private var entries: [Entry] = []
        private var bytes: [UInt8] = []

        /// Room for a spill file's `records` of `bytes` (with their lengths and flags).
        init(records: Int, bytes count: Int) {
            entries.reserveCapacity(records)
            bytes.reserveCapacity(max(0, count - records * (4 + 4 + 4 + 1)))
        }

        mutating func append(a: UnsafeRawBufferPointer, b: UnsafeRawBufferPointer, byA: Bool) {
            let offset = bytes.count
            bytes.append(contentsOf: a)
            bytes.append(contentsOf: b)
            let (aLength, bLength) = (UInt32(truncatingIfNeeded: a.count), UInt32(truncatingIfNeeded: b.count))
            let prefixes = bytes.withUnsafeBufferPointer { base in
                (ProjectionBuilder.DeviceEvents.prefix16(base, offset, aLength),
                 ProjectionBuilder.DeviceEvents.prefix16(base, offset + a.count, bLength))
            }
            entries.append(
                Entry(a: prefixes.0, b: prefixes.1, offset: offset, aLength: aLength, bLength: bLength, byA: byA))
        }

        /// Sorts the records by edge (the bytes of `a`, then of `b`) and sends each edge once with
        /// the sides its records name, in batches of at most `batches` edges.
        mutating func merged(batches limit: Int, _ send: (BulkSpill.Batch) throws -> Void) throws {
            try bytes.withUnsafeBufferPointer { base in
                func a(_ e: Entry) -> UnsafeBufferPointer<UInt8> {
                    ProjectionBuilder.DeviceEvents.slice(base, e.offset, e.aLength)
                }
                func b(_ e: Entry) -> UnsafeBufferPointer<UInt8> {
                    ProjectionBuilder.DeviceEvents.slice(base, e.offset + Int(e.aLength), e.bLength)
                }
                func compare(_ l: Entry, _ r: Entry) -> Int {
                    let first = ByteBounds.order(l.a, Int(l.aLength), r.a, Int(r.aLength)) {
                        String.byteOrder(a(l), a(r))
                    }
                    guard first == 0 else { return first }
                    return ByteBounds.order(l.b, Int(l.bLength), r.b, Int(r.bLength)) { String.byteOrder(b(l), b(r)) }
                }
                entries.sort { compare($0, $1) < 0 }
                var batch: BulkSpill.Batch = []
                batch.reserveCapacity(min(limit, entries.count))
                var i = 0
                while i < entries.count {
                    var sides: Sides = (nil, nil)
                    var j = i
                    while j < entries.count, j == i || compare(entries[i], entries[j]) == 0 {
                        if entries[j].byA { sides.byA = true } else { sides.byB = true }
                        j += 1
                    }
                    let x = String(decoding: a(entries[i]), as: UTF8.self)
                    let y = String(decoding: b(entries[i]), as: UTF8.self)
                    batch.append((Edge(x, y), sides))
                    if batch.count >= limit {
                        try send(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                    i = j
                }
                if !batch.isEmpty { try send(batch) }
            }
            entries = []
            bytes = []
        }
    }

    // MARK: Rows

    /// Binding and decoding of `friend_snapshots`, `friend_edges` and `friend_mentions` rows.
    struct Rows {
        private let loadSnapshot, updateSnapshot, setSides_, unnameEdge_, dropEdge_, mention_, isMentioned_: BulkStatement
        private let insertSnapshot, insertEdge, insertMention: BulkInsert

        init(_ db: Database, _ t: ProjectionTables) throws {
            loadSnapshot = try BulkStatement(cached: db, """
                SELECT listed_at, listed_event, friends, declined_at, declined_event FROM \(t.snapshots) WHERE asid = ?
                """)
            insertSnapshot = try BulkInsert(cached: db, into: t.snapshots, "asid, listed_at, listed_event, friends, declined_at, declined_event")
            insertEdge = try BulkInsert(cached: db, into: t.edges, "a, b, by_a, by_b")
            insertMention = try BulkInsert(cached: db, into: t.mentions, "asid, first_at, first_event")
            updateSnapshot = try BulkStatement(cached: db, """
                UPDATE \(t.snapshots) SET listed_at = ?, listed_event = ?, friends = ?, declined_at = ?, declined_event = ? WHERE asid = ?
                """)
            // The sides a fold changed (NULL: unchanged), without reading the row first; an
            // upsert, not INSERT OR REPLACE, which would delete and reinsert the row and so its
            // entry in the index on `b`.
            setSides_ = try BulkStatement(cached: db, """
                INSERT INTO \(t.edges) (a, b, by_a, by_b) VALUES (?1, ?2, coalesce(?3, 0), coalesce(?4, 0))
                ON CONFLICT(a, b) DO UPDATE SET by_a = coalesce(?3, by_a), by_b = coalesce(?4, by_b)
                """)
            // An edge that no side names any more goes; one still named loses the side.
            dropEdge_ = try BulkStatement(cached: db, """
                DELETE FROM \(t.edges) WHERE a = ?1 AND b = ?2 AND coalesce(?3, by_a) = 0 AND coalesce(?4, by_b) = 0
                """)
            unnameEdge_ = try BulkStatement(cached: db, """
                UPDATE \(t.edges) SET by_a = coalesce(?3, by_a), by_b = coalesce(?4, by_b) WHERE a = ?1 AND b = ?2
                """)
            // The earliest mention wins, whichever transaction or partition brings it.
            mention_ = try BulkStatement(cached: db, """
                INSERT INTO \(t.mentions) (asid, first_at, first_event) VALUES (?, ?, ?)
                ON CONFLICT(asid) DO UPDATE SET first_at = excluded.first_at, first_event = excluded.first_event
                WHERE excluded.first_at < first_at OR (excluded.first_at = first_at AND excluded.first_event < first_event)
                """)
            isMentioned_ = try BulkStatement(cached: db, "SELECT 1 FROM \(t.mentions) WHERE asid = ?")
        }

        /// Whether a friend list has named `asid`.
        func isMentioned(_ asid: String) throws -> Bool { try isMentioned_.first({ $0.add(asid) }) { _ in true } ?? false }

        func snapshot(_ asid: String) throws -> FriendSnapshot? {
            try loadSnapshot.first({ $0.add(asid) }) { row in
                FriendSnapshot(
                    listedAt: row.isNull(0) ? nil : EventKey(at: row.int(0), eventID: row.string(1)),
                    friends: StoredFriendList.split(row.string(2)),
                    declinedAt: row.isNull(3) ? nil : EventKey(at: row.int(3), eventID: row.string(4)))
            }
        }

        func write(_ asid: String, _ s: FriendSnapshot, stored: Bool) throws {
            guard stored else { return try insertSnapshot.insert { Self.snapshot(asid, s, &$0) } }
            try updateSnapshot.run {
                $0.add(s.listedAt?.at); $0.add(s.listedAt?.eventID); StoredFriendList.add(s.friends, to: &$0)
                $0.add(s.declinedAt?.at); $0.add(s.declinedAt?.eventID); $0.add(asid)
            }
        }

        /// An ASID's snapshot: `insertSnapshot`'s columns.
        static func snapshot<S: RowSink>(_ asid: String, _ s: FriendSnapshot, _ sink: inout S) {
            sink.add(asid); sink.add(s.listedAt?.at); sink.add(s.listedAt?.eventID)
            StoredFriendList.add(s.friends, to: &sink)
            sink.add(s.declinedAt?.at); sink.add(s.declinedAt?.eventID)
        }

        /// Inserts a bulk build's snapshots (`BulkRows`), in key order.
        func insert(snapshots: PackedRows) throws { try insertSnapshot.insert(snapshots) }

        /// Inserts a bulk build's edges (each named by at least one side), in key order, into
        /// a range of the table that holds none of them.
        func insertEdges(_ edges: [(key: Edge, value: Sides)]) throws {
            try insertEdge.insert(count: edges.count) { i, binder in
                let edge = edges[i]
                binder.add(edge.key.a); binder.add(edge.key.b)
                binder.add(edge.value.byA == true); binder.add(edge.value.byB == true)
            }
        }

        /// A friend's earliest mention: `insertMention`'s columns.
        static func mention<S: RowSink>(
            _ friend: UnsafeBufferPointer<UInt8>, at: Int64, eventID: UnsafeBufferPointer<UInt8>, _ sink: inout S
        ) {
            sink.add(utf8: friend); sink.add(at); sink.add(utf8: eventID)
        }

        /// Inserts a bulk build's mentions (`BulkRows`), in key order, of ASIDs none of whose
        /// mentions are stored.
        func insert(mentions: PackedRows) throws { try insertMention.insert(mentions) }

        /// Sets the sides a fold changed. Naming only: an upsert. Unnaming: the edge goes when
        /// no side names it any more, else it loses that side; an edge not stored stays absent.
        func setSides(_ e: Edge, _ sides: Sides) throws {
            func bind(_ b: inout BulkStatement.Binder) {
                b.add(e.a); b.add(e.b); b.add(sides.byA.map { Int64($0 ? 1 : 0) }); b.add(sides.byB.map { Int64($0 ? 1 : 0) })
            }
            if sides.byA == true || sides.byB == true {
                try setSides_.run(bind)
            } else if try dropEdge_.run(bind) == 0 {
                try unnameEdge_.run(bind)
            }
        }

        func mention(_ asid: String, _ first: EventKey) throws {
            try mention_.run { $0.add(asid); $0.add(first.at); $0.add(first.eventID) }
        }
    }
}
