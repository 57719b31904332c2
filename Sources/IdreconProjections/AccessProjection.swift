import GRDB
import IdreconDomain
import IdreconLog

/// Graph-access history (SPEC section 4, "Graph access"): for each ASID, the event-time
/// spans during which its latest login is limited (`asid_limited_spans`: from each limited
/// login to the ASID's next login, with the app and device it came from: the evidence), and
/// its latest login (`asid_last_logins`: the fold's state, which tells a batch that
/// continues an ASID's logins from one holding a late login). With the devices'
/// `limited_spans`, the `asids`' first logins and the friend mentions they answer an ASID's
/// access at any time with one seek each, whatever the size of the log (`access --as-of`,
/// `export access`, `audit calls`).
enum AccessProjection: Projection {
    static let name = "access"
    static let bulk = BulkBuild.scan
    static let tables = [
        (name: "asid_last_logins", primaryKey: "asid"),
        (name: "asid_limited_spans", primaryKey: "asid, from_at, from_event"),
    ]

    static func createTables(generation g: Int) -> String {
        """
        CREATE TABLE asid_last_logins_g\(g) (
            asid       TEXT PRIMARY KEY,
            last_at    INTEGER NOT NULL,
            last_event TEXT NOT NULL,
            tracking   TEXT NOT NULL CHECK (tracking IN ('enabled', 'limited'))
        ) STRICT, WITHOUT ROWID;

        CREATE TABLE asid_limited_spans_g\(g) (
            asid       TEXT NOT NULL,
            from_at    INTEGER NOT NULL,
            from_event TEXT NOT NULL,
            to_at      INTEGER,
            to_event   TEXT,
            app_id     TEXT NOT NULL,
            device_id  TEXT NOT NULL,
            PRIMARY KEY (asid, from_at, from_event),
            CHECK ((to_at IS NULL) = (to_event IS NULL))
        ) STRICT, WITHOUT ROWID;
        """
    }

    /// Both tables are read by their primary keys only.
    static func createIndexes(generation g: Int) -> String { "" }

    // MARK: The fold

    /// One login of an ASID as this projection sees it.
    struct Login {
        var key: EventKey
        var limited: Bool
        var app: String
        var device: String
    }

    /// A span during which the ASID's latest login is the limited login `from`.
    struct Span: Equatable {
        var from: EventKey
        var to: EventKey?
        var app: String
        var device: String
    }

    /// One ASID's logins folded in event time: its latest login, the spans opened, and the
    /// stored open span (of the stored latest login, when limited) that the next login closes.
    struct Fold {
        private(set) var last: (key: EventKey, limited: Bool)?
        private(set) var spans: [Span] = []
        /// The stored open span's start and the login that closed it.
        private(set) var closedStored: (from: EventKey, to: EventKey)?

        /// An ASID with no logins yet (replay, a late login's refold, or an unknown ASID).
        init() {}

        /// Continues from the stored latest login.
        init(continuing last: (key: EventKey, limited: Bool)) { self.last = last }

        /// Adds the ASID's next login in event time.
        mutating func add(_ login: Login) {
            // The latest key again is that login again (a row repeated by hand; see `DeviceState.apply`).
            if let last, last.key == login.key { return }
            if let last, last.limited {
                if spans.isEmpty { closedStored = (last.key, login.key) } else { spans[spans.count - 1].to = login.key }
            }
            if login.limited { spans.append(Span(from: login.key, to: nil, app: login.app, device: login.device)) }
            last = (login.key, login.limited)
        }

        /// Folds logins given in any order.
        static func of(_ logins: [Login]) -> Fold {
            var fold = Fold()
            for login in logins.sorted(by: { $0.key < $1.key }) { fold.add(login) }
            return fold
        }
    }

    // MARK: Live

    static func apply(_ facts: [ProjectionFact], in context: ProjectionContext) throws {
        var byASID: [String: [Login]] = [:]
        for fact in facts where fact.type == .login {
            guard let asid = fact.asid, let tracking = fact.tracking else { continue }
            byASID[asid, default: []].append(Login(key: fact.key, limited: tracking == .limited, app: fact.appID, device: fact.deviceID))
        }
        guard !byASID.isEmpty else { return }
        let rows = try Rows(context.db, context.tables)
        // The tables hold the log up to the facts' first `seq` (`FoldCheckpoint.plan`).
        let foldedThrough = (facts.lazy.map(\.seq).min() ?? 1) - 1
        for (asid, list) in byASID.sorted(by: { $0.key < $1.key }) {
            let sorted = list.sorted { $0.key < $1.key }
            let stored = try rows.last(asid)
            var fold: Fold
            if let stored, sorted[0].key < stored.key {
                // A late login: fold the ASID's logins again from the log (which holds this
                // batch's too), from its latest valid checkpoint.
                fold = try refold(asid, rows, context, foldedThrough: foldedThrough)
            } else {
                fold = stored.map(Fold.init(continuing:)) ?? Fold()
                for login in sorted { fold.add(login) }
            }
            try rows.write(asid, fold)
        }
    }

    // MARK: Late logins

    /// Folds an ASID's logins again after a late one: from its latest checkpoint the log shows
    /// still holds (`FoldCheckpoint`), else from its first login; leaves new checkpoints at the
    /// levels whose lag the refold read twice over.
    static func refold(
        _ asid: String, _ rows: Rows, _ context: ProjectionContext, foldedThrough: Int64
    ) throws -> Fold {
        let seqs = try context.keys.logins(StableHash.key(asid), through: context.visibleSeq)
        let checkpoints = try rows.checkpoints(asid)
        let plan = try FoldCheckpoint.plan(
            seqs: seqs, foldedThrough: foldedThrough, checkpoints: checkpoints.map(\.stored), key: \.key
        ) { try rows.login(asid, seq: $0) }
        var fold: Fold
        if let from = plan.from {
            fold = Fold(continuing: checkpoints[from].last)
            try rows.deleteSpans(asid, after: checkpoints[from].stored.key)
        } else {
            fold = Fold()
            try rows.deleteSpans(asid)
        }
        try FoldCheckpoint.fold(plan, seqs: seqs, into: &fold, add: { $0.add($1) }, save: { fold, level, positions in
            guard let last = fold.last else { return }
            let stored = FoldCheckpoint.Stored(level: level, key: last.key, positions: positions)
            try rows.save(asid, Checkpoint(last: last, stored: stored))
        }, drop: { try rows.dropCheckpoint(asid, level: $0) })
        return fold
    }

    /// An ASID's fold state at one of its logins (the login, and whether it is limited), at one
    /// of the checkpoints' levels, and which of the log's logins it holds (`FoldCheckpoint.Stored`).
    struct Checkpoint {
        var last: (key: EventKey, limited: Bool)
        var stored: FoldCheckpoint.Stored
    }

    // MARK: Bulk

    /// A partition's latest logins and limited spans as a bulk build loads them, in key order,
    /// packed (`Rows.last`, `Rows.span`).
    struct BulkRows {
        var lasts = PackedRows()
        var spans = PackedRows()
    }

    /// Adds the rows of an ASID that comes after those added (replay prepares them off the
    /// writer); `logins` are all its logins, in event time. A partition holds every login of
    /// its ASIDs, so they fold exactly without reading the log again; the enabled logins
    /// before the earliest limited one open or close no span, so they are skipped.
    static func addBulk(_ asid: String, _ logins: [BulkLogin], to rows: inout BulkRows) {
        guard let firstLimited = logins.firstIndex(where: \.limited) else {
            return Rows.last(asid, (logins[logins.count - 1].key, false), &rows.lasts)
        }
        var fold = Fold()
        for login in logins[firstLimited...] {
            fold.add(Login(key: login.key, limited: login.limited, app: login.limited ? login.app : "",
                           device: login.limited ? login.device : ""))
        }
        if let last = fold.last { Rows.last(asid, last, &rows.lasts) }
        for span in fold.spans { Rows.span(asid, span, &rows.spans) }
    }

    /// Writes a partition's rows (replay) into empty tables.
    static func writeBulk(_ rows: BulkRows, _ db: Database, _ t: ProjectionTables) throws {
        try Rows(db, t).insert(rows)
    }

    // MARK: Rows

    /// Binding and decoding of `asid_last_logins` and `asid_limited_spans` rows: the only
    /// place that lists their columns.
    struct Rows {
        private let loadLast, saveLast, closeSpan, deleteSpans_, deleteSpansAfter, loggedLogins: BulkStatement
        private let loadCheckpoints, saveCheckpoint, deleteCheckpoint: BulkStatement
        private let insertLast, insertSpan: BulkInsert

        init(_ db: Database, _ t: ProjectionTables) throws {
            // A login by its `seq`: the ASID's key is a hash, so the ASID is compared too.
            loggedLogins = try BulkStatement(cached: db, """
                SELECT \(LoggedEvent.selectColumns) FROM events WHERE seq = ? AND asid = ?
                """)
            loadLast = try BulkStatement(cached: db, "SELECT last_at, last_event, tracking FROM \(t.lastLogins) WHERE asid = ?")
            saveLast = try BulkStatement(cached: db, """
                INSERT INTO \(t.lastLogins) (asid, last_at, last_event, tracking) VALUES (?, ?, ?, ?)
                ON CONFLICT (asid) DO UPDATE SET last_at = excluded.last_at, last_event = excluded.last_event, tracking = excluded.tracking
                """)
            insertLast = try BulkInsert(cached: db, into: t.lastLogins, "asid, last_at, last_event, tracking")
            insertSpan = try BulkInsert(cached: db, into: t.asidSpans, "asid, from_at, from_event, to_at, to_event, app_id, device_id")
            closeSpan = try BulkStatement(cached: db, """
                UPDATE \(t.asidSpans) SET to_at = ?, to_event = ? WHERE asid = ? AND from_at = ? AND from_event = ?
                """)
            deleteSpans_ = try BulkStatement(cached: db, "DELETE FROM \(t.asidSpans) WHERE asid = ?")
            deleteSpansAfter = try BulkStatement(cached: db, """
                DELETE FROM \(t.asidSpans) WHERE asid = ? AND (from_at, from_event) > (?, ?)
                """)
            // The log's, not a generation's: a checkpoint is a fold of logged logins, which a
            // rebuild of the projections does not change.
            loadCheckpoints = try BulkStatement(cached: db, """
                SELECT level, last_at, last_event, tracking, from_seq, written_seq FROM asid_fold_checkpoints
                WHERE asid = ?
                """)
            saveCheckpoint = try BulkStatement(cached: db, """
                INSERT OR REPLACE INTO asid_fold_checkpoints
                    (asid, level, last_at, last_event, tracking, from_seq, written_seq)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """)
            deleteCheckpoint = try BulkStatement(cached: db, """
                DELETE FROM asid_fold_checkpoints WHERE asid = ? AND level = ?
                """)
        }

        func last(_ asid: String) throws -> (key: EventKey, limited: Bool)? {
            try loadLast.first({ $0.add(asid) }) { (EventKey(at: $0.int(0), eventID: $0.string(1)), $0.string(2) == "limited") }
        }

        /// Writes a fold: its latest login, the stored span it closed and the spans it opened.
        func write(_ asid: String, _ fold: Fold) throws {
            guard let last = fold.last else { return }
            try saveLast.run { Self.last(asid, last, &$0) }
            if let closed = fold.closedStored {
                try closeSpan.run { $0.add(closed.to.at); $0.add(closed.to.eventID); $0.add(asid); $0.add(closed.from.at); $0.add(closed.from.eventID) }
            }
            try insertSpan.insert(count: fold.spans.count) { i, binder in Self.span(asid, fold.spans[i], &binder) }
        }

        /// Inserts a bulk build's rows (of ASIDs with nothing stored), in key order, into empty tables.
        func insert(_ rows: BulkRows) throws {
            try insertLast.insert(rows.lasts)
            try insertSpan.insert(rows.spans)
        }

        /// An ASID's latest login: `asid_last_logins`' columns.
        static func last<S: RowSink>(_ asid: String, _ last: (key: EventKey, limited: Bool), _ sink: inout S) {
            sink.add(asid); sink.add(last.key.at); sink.add(last.key.eventID)
            sink.add(last.limited ? "limited" : "enabled")
        }

        /// One of an ASID's limited spans: `asid_limited_spans`' columns.
        static func span<S: RowSink>(_ asid: String, _ span: Span, _ sink: inout S) {
            sink.add(asid); sink.add(span.from.at); sink.add(span.from.eventID)
            sink.add(span.to?.at); sink.add(span.to?.eventID)
            sink.add(span.app); sink.add(span.device)
        }

        func deleteSpans(_ asid: String) throws { try deleteSpans_.run { $0.add(asid) } }

        /// Deletes the ASID's spans opened after `key` (a refold from a checkpoint at `key` writes them again).
        func deleteSpans(_ asid: String, after key: EventKey) throws {
            try deleteSpansAfter.run { $0.add(asid); $0.add(key.at); $0.add(key.eventID) }
        }

        /// The ASID's login logged under `seq`; nil when that event is another's (the log's
        /// key is a hash).
        func login(_ asid: String, seq: Int64) throws -> Login? {
            try loggedLogins.first({ $0.add(seq); $0.add(asid) }) { row in
                let event = LoggedEvent(row)
                return Login(
                    key: event.key, limited: event.tracking == .limited, app: event.appID, device: event.deviceID)
            }
        }

        /// The ASID's checkpoints, one per level at most.
        func checkpoints(_ asid: String) throws -> [Checkpoint] {
            var checkpoints: [Checkpoint] = []
            try loadCheckpoints.each({ $0.add(asid) }) { row in
                let last = (key: EventKey(at: row.int(1), eventID: row.string(2)), limited: row.string(3) == "limited")
                checkpoints.append(Checkpoint(last: last, stored: FoldCheckpoint.Stored(
                    level: Int(row.int(0)), key: last.key,
                    positions: FoldCheckpoint.Positions(fromSeq: row.int(4), writtenSeq: row.int(5)))))
            }
            return checkpoints
        }

        func dropCheckpoint(_ asid: String, level: Int) throws {
            try deleteCheckpoint.run { $0.add(asid); $0.add(level) }
        }

        func save(_ asid: String, _ checkpoint: Checkpoint) throws {
            try saveCheckpoint.run {
                $0.add(asid); $0.add(checkpoint.stored.level)
                $0.add(checkpoint.last.key.at); $0.add(checkpoint.last.key.eventID)
                $0.add(checkpoint.last.limited ? "limited" : "enabled")
                $0.add(checkpoint.stored.positions.fromSeq); $0.add(checkpoint.stored.positions.writtenSeq)
            }
        }
    }
}
