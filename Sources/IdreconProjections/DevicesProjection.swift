import GRDB
import IdreconDomain
import IdreconLog

/// Devices (SPEC section 4): each `(app_id, device_id)`'s mode, logged-in ASID, counts and
/// anomalies (`devices`), and the spans during which it held an ASID in limited mode
/// (`limited_spans`, what `access --as-of` reads). A device's facts are folded in event
/// time (`Fold`); a transaction whose facts all follow the stored state continues it, one
/// with an older fact (a late event) folds the device again from the log.
enum DevicesProjection: Projection {
    static let name = "devices"
    static let bulk = BulkBuild.scan
    static let tables = [
        (name: "devices", primaryKey: "app_id, device_id"),
        (name: "limited_spans", primaryKey: "app_id, device_id, from_at, from_event"),
    ]

    static func createTables(generation g: Int) -> String {
        """
        CREATE TABLE devices_g\(g) (
            app_id      TEXT NOT NULL,
            device_id   TEXT NOT NULL,
            mode        TEXT NOT NULL CHECK (mode IN ('enabled', 'limited', 'logged_out')),
            asid        TEXT,
            first_at    INTEGER NOT NULL,
            first_event TEXT NOT NULL,
            last_at     INTEGER NOT NULL,
            last_event  TEXT NOT NULL,
            logins      INTEGER NOT NULL CHECK (logins >= 0),
            logouts     INTEGER NOT NULL CHECK (logouts >= 0),
            anomalies   INTEGER NOT NULL CHECK (anomalies >= 0),
            last_login_tracking TEXT CHECK (last_login_tracking IN ('enabled', 'limited')),
            logout_since_login  INTEGER NOT NULL CHECK (logout_since_login IN (0, 1)),
            PRIMARY KEY (app_id, device_id),
            CHECK ((mode = 'logged_out') = (asid IS NULL))
        ) STRICT, WITHOUT ROWID;

        CREATE TABLE limited_spans_g\(g) (
            app_id     TEXT NOT NULL,
            device_id  TEXT NOT NULL,
            from_at    INTEGER NOT NULL,
            from_event TEXT NOT NULL,
            to_at      INTEGER,
            to_event   TEXT,
            asid       TEXT NOT NULL,
            PRIMARY KEY (app_id, device_id, from_at, from_event),
            CHECK ((to_at IS NULL) = (to_event IS NULL))
        ) STRICT, WITHOUT ROWID;
        """
    }

    static func createIndexes(generation g: Int) -> String {
        """
        CREATE INDEX devices_g\(g)_asid ON devices_g\(g)(asid) WHERE asid IS NOT NULL;
        CREATE INDEX limited_spans_g\(g)_asid ON limited_spans_g\(g)(asid, from_at, from_event, to_at);
        """
    }

    // MARK: The fold

    /// One device being folded: its state, and the limited spans the fold opened or closed.
    struct Fold {
        var state: DeviceState
        var spans: [LimitedSpan]
        /// How many of `spans` were already stored (the open span a stored limited state
        /// carries): written again only once closed.
        let carried: Int

        /// A device with no events yet (replay, or a device the log has not seen).
        init() {
            state = DeviceState()
            spans = []
            carried = 0
        }

        /// Continues from a stored state. A limited device's open span started at its latest
        /// event, so the next fact can close it.
        init(continuing stored: DeviceState) {
            state = stored
            spans = stored.openSpan.map { [$0] } ?? []
            carried = spans.count
        }

        /// Adds the device's next fact in event time.
        mutating func add(_ fact: DeviceFact) {
            let (closed, opened) = state.apply(fact)
            if let closed { spans[spans.count - 1] = closed }
            if let opened { spans.append(opened) }
        }

        /// The spans to write: every one but a carried span that is still open.
        var changedSpans: ArraySlice<LimitedSpan> {
            carried > 0 && spans[0].to == nil ? spans.dropFirst() : spans[...]
        }
    }

    /// A partition's folded devices and their changed spans as a bulk build loads them, in
    /// key order, packed (`Rows.device`, `Rows.span`).
    struct BulkRows {
        var devices = PackedRows(), spans = PackedRows()

        /// Adds a device folded from all its events (after those added).
        mutating func add(_ app: String, _ device: String, _ fold: Fold) {
            Rows.device(app, device, fold.state, &devices)
            for span in fold.changedSpans { Rows.span(app, device, span, &spans) }
        }
    }

    // MARK: Live

    static func apply(_ facts: [ProjectionFact], in context: ProjectionContext) throws {
        var byDevice: [ByteTextPair: [DeviceFact]] = [:]
        for fact in facts { byDevice[ByteTextPair(fact.appID, fact.deviceID), default: []].append(fact.deviceFact) }
        let rows = try Rows(context.db, context.tables)
        // The tables hold the log up to the facts' first `seq` (`FoldCheckpoint.plan`).
        let foldedThrough = (facts.lazy.map(\.seq).min() ?? 1) - 1
        for (device, list) in byDevice.sorted(by: { $0.key < $1.key }) {
            let (app, id) = (device.first.text, device.second.text)
            let sorted = list.sorted { $0.key < $1.key }
            let stored = try rows.load(app, id)
            var fold: Fold
            if let stored, let last = stored.last, sorted[0].key < last {
                // A late event: fold the device again from the log (which holds this
                // transaction's events too), from its latest valid checkpoint.
                fold = try refold(app, id, rows, context, foldedThrough: foldedThrough)
            } else {
                fold = stored.map(Fold.init(continuing:)) ?? Fold()
                for fact in sorted { fold.add(fact) }
            }
            try rows.write(app, id, fold, stored: stored)
        }
    }

    // MARK: Late events

    /// Folds a device's events again after a late one: from its latest checkpoint the log shows
    /// still holds (`FoldCheckpoint`), else from its first event; leaves new checkpoints at the
    /// levels whose lag the refold read twice over.
    static func refold(
        _ app: String, _ id: String, _ rows: Rows, _ context: ProjectionContext, foldedThrough: Int64
    ) throws -> Fold {
        let seqs = try context.keys.deviceEvents(StableHash.key(app, id), through: context.visibleSeq)
        let checkpoints = try rows.checkpoints(app, id)
        let plan = try FoldCheckpoint.plan(
            seqs: seqs, foldedThrough: foldedThrough, checkpoints: checkpoints.map(\.stored), key: \.key
        ) { try rows.fact(app, id, seq: $0) }
        var fold: Fold
        if let from = plan.from {
            fold = Fold(continuing: checkpoints[from].state)
            try rows.deleteSpans(app, id, after: checkpoints[from].stored.key)
        } else {
            fold = Fold()
            try rows.deleteSpans(app, id)
        }
        try FoldCheckpoint.fold(plan, seqs: seqs, into: &fold, add: { $0.add($1) }, save: { fold, level, positions in
            guard let last = fold.state.last else { return }
            let stored = FoldCheckpoint.Stored(level: level, key: last, positions: positions)
            try rows.save(app, id, Checkpoint(state: fold.state, stored: stored))
        }, drop: { try rows.dropCheckpoint(app, id, level: $0) })
        return fold
    }

    /// A device's fold state at one of its events (its `last`), at one of the checkpoints'
    /// levels, and which of the log's events it holds (`FoldCheckpoint.Stored`).
    struct Checkpoint {
        var state: DeviceState
        var stored: FoldCheckpoint.Stored
    }

    // MARK: Rows

    /// Binding and decoding of `devices` and `limited_spans` rows: the only place that
    /// lists their columns.
    struct Rows {
        private let loadDevice, updateDevice, updateDeviceSameASID, upsertSpan, deleteSpans, limitedHolds_: BulkStatement
        private let deleteSpansAfter, loggedEvent, loadCheckpoints, saveCheckpoint, deleteCheckpoint: BulkStatement
        private let insertDevice, insertSpan: BulkInsert

        init(_ db: Database, _ t: ProjectionTables) throws {
            loadDevice = try BulkStatement(cached: db, """
                SELECT mode, asid, first_at, first_event, last_at, last_event, logins, logouts, anomalies,
                    last_login_tracking, logout_since_login
                FROM \(t.devices) WHERE app_id = ? AND device_id = ?
                """)
            insertDevice = try BulkInsert(cached: db, into: t.devices, """
                app_id, device_id, mode, asid, first_at, first_event, last_at, last_event,
                    logins, logouts, anomalies, last_login_tracking, logout_since_login
                """)
            insertSpan = try BulkInsert(cached: db, into: t.spans, "app_id, device_id, from_at, from_event, to_at, to_event, asid")
            updateDevice = try BulkStatement(cached: db, """
                UPDATE \(t.devices) SET mode = ?, asid = ?, first_at = ?, first_event = ?, last_at = ?, last_event = ?,
                    logins = ?, logouts = ?, anomalies = ?, last_login_tracking = ?, logout_since_login = ?
                WHERE app_id = ? AND device_id = ?
                """)
            // Most updates keep the device's ASID: leaving `asid` out of the SET leaves its
            // index alone (SQLite rewrites the entries of every index on a column it sets).
            updateDeviceSameASID = try BulkStatement(cached: db, """
                UPDATE \(t.devices) SET mode = ?, first_at = ?, first_event = ?, last_at = ?, last_event = ?,
                    logins = ?, logouts = ?, anomalies = ?, last_login_tracking = ?, logout_since_login = ?
                WHERE app_id = ? AND device_id = ?
                """)
            upsertSpan = try BulkStatement(cached: db, """
                INSERT INTO \(t.spans) (app_id, device_id, from_at, from_event, to_at, to_event, asid) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (app_id, device_id, from_at, from_event) DO UPDATE SET to_at = excluded.to_at, to_event = excluded.to_event
                """)
            deleteSpans = try BulkStatement(cached: db, "DELETE FROM \(t.spans) WHERE app_id = ? AND device_id = ?")
            limitedHolds_ = try BulkStatement(cached: db, "SELECT count(*) FROM \(t.devices) WHERE asid = ? AND mode = 'limited'")
            deleteSpansAfter = try BulkStatement(cached: db, """
                DELETE FROM \(t.spans) WHERE app_id = ? AND device_id = ? AND (from_at, from_event) > (?, ?)
                """)
            // A device's event by its `seq`: its key is a hash, so the IDs are compared too.
            loggedEvent = try BulkStatement(cached: db, """
                SELECT \(LoggedEvent.selectColumns) FROM events WHERE seq = ? AND app_id = ? AND device_id = ?
                """)
            // The log's, not a generation's (as `asid_fold_checkpoints`).
            loadCheckpoints = try BulkStatement(cached: db, """
                SELECT \(Self.stateColumns), level, from_seq, written_seq FROM device_fold_checkpoints
                WHERE app_id = ? AND device_id = ?
                """)
            saveCheckpoint = try BulkStatement(cached: db, """
                INSERT OR REPLACE INTO device_fold_checkpoints
                    (app_id, device_id, \(Self.stateColumns), level, from_seq, written_seq)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            deleteCheckpoint = try BulkStatement(cached: db, """
                DELETE FROM device_fold_checkpoints WHERE app_id = ? AND device_id = ? AND level = ?
                """)
        }

        /// A device's state as `devices` and `device_fold_checkpoints` hold it, after its key.
        private static let stateColumns = """
            mode, asid, first_at, first_event, last_at, last_event, logins, logouts, anomalies, \
            last_login_tracking, logout_since_login
            """

        /// How many devices hold `asid` in limited mode now.
        func limitedHolds(of asid: String) throws -> Int {
            try limitedHolds_.first({ $0.add(asid) }) { Int($0.int(0)) } ?? 0
        }

        func load(_ app: String, _ device: String) throws -> DeviceState? {
            try loadDevice.first({ $0.add(app); $0.add(device) }, Self.state)
        }

        /// Decodes `stateColumns`, the row's first.
        private static func state(_ row: BulkStatement.Reader) -> DeviceState {
            var s = DeviceState()
            s.mode = DeviceMode(rawValue: row.string(0)) ?? .loggedOut
            s.asid = row.optionalString(1)
            s.first = EventKey(at: row.int(2), eventID: row.string(3))
            s.last = EventKey(at: row.int(4), eventID: row.string(5))
            s.logins = Int(row.int(6))
            s.logouts = Int(row.int(7))
            s.anomalies = Int(row.int(8))
            s.lastLoginTracking = row.optionalString(9).flatMap(Tracking.init)
            s.logoutSinceLastLogin = row.int(10) == 1
            return s
        }

        /// The device's event logged under `seq`, as its fold reads it; nil when that event is
        /// another device's (the log's key is a hash).
        func fact(_ app: String, _ device: String, seq: Int64) throws -> DeviceFact? {
            try loggedEvent.first({ $0.add(seq); $0.add(app); $0.add(device) }) { LoggedEvent($0).deviceFact }
        }

        /// The device's checkpoints, one per level at most.
        func checkpoints(_ app: String, _ device: String) throws -> [Checkpoint] {
            var checkpoints: [Checkpoint] = []
            try loadCheckpoints.each({ $0.add(app); $0.add(device) }) { row in
                let state = Self.state(row)
                guard let last = state.last else { return }
                checkpoints.append(Checkpoint(state: state, stored: FoldCheckpoint.Stored(
                    level: Int(row.int(11)), key: last,
                    positions: FoldCheckpoint.Positions(fromSeq: row.int(12), writtenSeq: row.int(13)))))
            }
            return checkpoints
        }

        func save(_ app: String, _ device: String, _ checkpoint: Checkpoint) throws {
            try saveCheckpoint.run {
                Self.device(app, device, checkpoint.state, &$0)
                $0.add(checkpoint.stored.level)
                $0.add(checkpoint.stored.positions.fromSeq); $0.add(checkpoint.stored.positions.writtenSeq)
            }
        }

        func dropCheckpoint(_ app: String, _ device: String, level: Int) throws {
            try deleteCheckpoint.run { $0.add(app); $0.add(device); $0.add(level) }
        }

        /// Deletes the device's spans opened after `key` (a refold from a checkpoint at `key` writes them again).
        func deleteSpans(_ app: String, _ device: String, after key: EventKey) throws {
            try deleteSpansAfter.run { $0.add(app); $0.add(device); $0.add(key.at); $0.add(key.eventID) }
        }

        /// Writes a folded device (inserted when there is no `stored` state) and its changed spans.
        func write(_ app: String, _ device: String, _ fold: Fold, stored: DeviceState?) throws {
            let s = fold.state
            guard let stored else {
                try insertDevice.insert { Self.device(app, device, s, &$0) }
                for span in fold.changedSpans { try upsertSpan.run { Self.span(app, device, span, &$0) } }
                return
            }
            let keepsASID = stored.asid.sameBytes(as: s.asid)
            try (keepsASID ? updateDeviceSameASID : updateDevice).run {
                $0.add(s.mode.rawValue)
                if !keepsASID { $0.add(s.asid) }
                $0.add(s.first!.at); $0.add(s.first!.eventID); $0.add(s.last!.at); $0.add(s.last!.eventID)
                $0.add(s.logins); $0.add(s.logouts); $0.add(s.anomalies)
                $0.add(s.lastLoginTracking?.rawValue); $0.add(s.logoutSinceLastLogin)
                $0.add(app); $0.add(device)
            }
            for span in fold.changedSpans { try upsertSpan.run { Self.span(app, device, span, &$0) } }
        }

        /// Inserts a bulk build's folded devices (`BulkRows`), in key order, into empty tables.
        func insert(_ rows: BulkRows) throws {
            try insertDevice.insert(rows.devices)
            try insertSpan.insert(rows.spans)
        }

        /// A device's state: `devices`' columns.
        static func device<S: RowSink>(_ app: String, _ device: String, _ s: DeviceState, _ sink: inout S) {
            sink.add(app); sink.add(device)
            sink.add(s.mode.rawValue); sink.add(s.asid)
            sink.add(s.first!.at); sink.add(s.first!.eventID); sink.add(s.last!.at); sink.add(s.last!.eventID)
            sink.add(s.logins); sink.add(s.logouts); sink.add(s.anomalies)
            sink.add(s.lastLoginTracking?.rawValue); sink.add(s.logoutSinceLastLogin)
        }

        /// One of a device's limited spans: `limited_spans`' columns.
        static func span<S: RowSink>(_ app: String, _ device: String, _ span: LimitedSpan, _ sink: inout S) {
            sink.add(app); sink.add(device); sink.add(span.from.at); sink.add(span.from.eventID)
            sink.add(span.to?.at); sink.add(span.to?.eventID); sink.add(span.asid)
        }

        func deleteSpans(_ app: String, _ device: String) throws {
            try deleteSpans.run { $0.add(app); $0.add(device) }
        }
    }
}
