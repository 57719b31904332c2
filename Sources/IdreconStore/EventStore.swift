import Foundation
import GRDB
import IdreconDomain

/// Errors the store reports to its callers, each with a message a user can act on.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    /// `usage`: the request conflicts with what the database holds (a bad invocation, exit 2
    /// in the CLI); `storage`: the database could not be read or written.
    public enum Kind: Sendable { case storage, usage }
    public var kind: Kind
    public var description: String
    public init(_ description: String, kind: Kind = .storage) {
        self.description = description
        self.kind = kind
    }
}

/// The SQLite event log: append-only `events`, `quarantine`, consumed positions.
/// One writer, many readers (WAL).
public final class EventStore: Sendable {
    public let path: String
    let pool: DatabasePool

    /// Opens (creating if needed) the database at `path` and runs pending migrations.
    /// `skipPendingRebuild` is for `replay` itself, which rebuilds anyway.
    public init(path: String, readOnly: Bool = false, skipPendingRebuild: Bool = false) throws(StoreError) {
        self.path = path
        var config = Configuration()
        config.readonly = readOnly
        config.busyMode = .timeout(30)
        config.prepareDatabase { db in
            // WAL + NORMAL is durable against process crashes (SIGKILL); a bigger page
            // cache and checkpoint interval keep random-key index inserts off the disk.
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA cache_size = -65536")
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 8192")
        }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw StoreError("cannot open database \(path): it is a directory; pass a file path with --db")
        }
        if readOnly, !FileManager.default.fileExists(atPath: path) {
            throw StoreError("no database at \(path); run 'idrecon ingest' or 'idrecon consume' first, or pass --db")
        }
        // Two processes opening a new database at once race on switching it to WAL and on
        // the migrations: a lock on a sidecar file serializes writers' opening; the second
        // finds everything applied. Never a descriptor of the database file itself: closing
        // it would drop SQLite's POSIX locks (see `LockFile`).
        let openLock = readOnly ? nil : try LockFile(databasePath: path, name: "open-lock")
        do {
            if !readOnly, FileManager.default.fileExists(atPath: path) { try Self.refuseForeignDatabase(path) }
            pool = try DatabasePool(path: path, configuration: config)
            if readOnly {
                let pending = try pool.read { db in try !Schema.migrator.hasCompletedMigrations(db) }
                if pending {
                    // A database from an older idrecon: bring its schema up to date once.
                    do {
                        _ = try EventStore(path: path)
                    } catch {
                        throw StoreError("database \(path) needs a newer schema and cannot be upgraded: \(error.description)")
                    }
                }
            } else {
                // A lock upgrade that SQLite refuses without waiting (SQLITE_BUSY) is retried.
                var attempt = 0
                while true {
                    do {
                        try Schema.migrator.migrate(pool)
                        break
                    } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY && attempt < 100 {
                        attempt += 1
                        usleep(useconds_t(50_000 + (attempt % 7) * 13_000))
                    }
                }
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError("cannot open database \(path): \(Self.foreignSidecars(path, error) ?? Self.describe(error))")
        }
        // An erasure whose rebuild did not complete is finished by the next writer (after
        // the open lock: a replay takes a while).
        withExtendedLifetime(openLock) {}
        if !readOnly, !skipPendingRebuild { try finishPendingRebuild() }
    }

    /// Whether `path` is the database at `databasePath` or one of its `-wal`/`-shm` files
    /// (compared by device and inode, with `stat` only). Such a path must never be opened as
    /// an input: closing that descriptor would drop SQLite's POSIX locks in this process.
    public static func isDatabaseFile(_ path: String, of databasePath: String) -> Bool {
        var input = stat()
        guard stat(path, &input) == 0 else { return false }
        return ["", "-wal", "-shm"].contains { suffix in
            var file = stat()
            return stat(databasePath + suffix, &file) == 0 && file.st_dev == input.st_dev && file.st_ino == input.st_ino
        }
    }

    /// Refuses a non-empty SQLite database that idrecon did not create, before anything
    /// (the switch to WAL, the migrations) changes it.
    private static func refuseForeignDatabase(_ path: String) throws {
        var config = Configuration()
        config.readonly = true
        config.busyMode = .timeout(30)
        let foreign = try DatabaseQueue(path: path, configuration: config).read { db in
            let tables = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") ?? 0
            return try tables > 0 && !db.tableExists("grdb_migrations")
        }
        if foreign {
            throw StoreError("\(path) is an SQLite database that idrecon did not create; pass a new file or an idrecon database with --db")
        }
    }

    /// When SQLite cannot write, a `-wal`/`-shm` file left by a reader running as another user
    /// is the usual cause: say so, and what to do.
    private static func foreignSidecars(_ path: String, _ error: any Error) -> String? {
        guard let db = error as? DatabaseError, db.resultCode == .SQLITE_READONLY || db.resultCode == .SQLITE_CANTOPEN else { return nil }
        for suffix in ["-wal", "-shm"] {
            var info = stat()
            if stat(path + suffix, &info) == 0, info.st_uid != geteuid() {
                return "\(path + suffix) belongs to uid \(info.st_uid) (left by a reader running as that user), so this user cannot write: "
                    + "chown them to this user, or, when no process has the database open, remove \(path)-shm "
                    + "(and \(path)-wal if it is empty)"
            }
        }
        return nil
    }

    static func describe(_ error: any Error) -> String {
        if let db = error as? DatabaseError {
            switch db.resultCode {
            case .SQLITE_NOTADB, .SQLITE_CORRUPT: return "the file is not an idrecon SQLite database or is corrupt"
            case .SQLITE_READONLY: return "the database is read-only; check its permissions"
            case .SQLITE_CANTOPEN: return "the file cannot be opened; check the path and permissions"
            case .SQLITE_FULL: return "the disk is full"
            default: return db.message ?? "\(db.resultCode)"
            }
        }
        return "\(error)"
    }

    /// Stored positions, by source.
    public func positions() throws(StoreError) -> [ConsumedPosition] {
        try read { db in try ConsumedPosition.order(Column("source")).fetchAll(db) }
    }

    public func position(of source: String) throws(StoreError) -> ConsumedPosition? {
        try read { db in try ConsumedPosition.fetchOne(db, key: source) }
    }

    /// Appends or quarantines every record and stores `positions`, all in one transaction,
    /// with the projection updates (`updateProjections: false` is for benchmarking the
    /// raw append limit only: it leaves the projections behind the log until a replay).
    public func append(_ records: [IncomingRecord], positions: [ConsumedPosition], updateProjections: Bool = true) throws(StoreError) -> BatchOutcome {
        try write { db in
            let outcome = try Self.append(db, records, positions: positions, forgotten: ForgottenASIDs(db))
            if updateProjections { try ProjectionEngine.catchUpLive(db) }
            return outcome
        }
    }

    /// Appends batches in one transaction, as `append` does each: `next` is called until
    /// it returns nil, and each batch's memory can go as soon as it is in the transaction.
    /// Fewer, bigger transactions write each dirtied page of the random-key indexes once.
    /// The projections are brought up to the log in the same transaction once they are
    /// `projectionLag` events behind it (write-behind: see `catchUpProjections`).
    public func appendBatches(
        projectionLag: Int = 0, _ next: () -> (records: [IncomingRecord], positions: [ConsumedPosition])?
    ) throws(StoreError) -> BatchOutcome {
        try write { db in
            var total = BatchOutcome()
            let forgotten = try ForgottenASIDs(db)
            while let batch = next() {
                total.add(try Self.append(db, batch.records, positions: batch.positions, forgotten: forgotten))
            }
            try ProjectionEngine.catchUpLive(db, ifBehindBy: Int64(projectionLag))
            return total
        }
    }

    /// Brings the projections up to the end of the log, in one transaction; returns the
    /// events applied. The pipelines append with a projection lag (the fold then reads and
    /// writes each entity once per many events instead of once per transaction) and call
    /// this when their source is drained, when idle, and before they stop.
    @discardableResult
    public func catchUpProjections() throws(StoreError) -> Int64 {
        try write { db in try ProjectionEngine.catchUpLive(db) }
    }

    static func append(
        _ db: Database, _ records: [IncomingRecord], positions: [ConsumedPosition], forgotten: ForgottenASIDs
    ) throws -> BatchOutcome {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var outcome = BatchOutcome()
        let findEvent = try db.cachedStatement(sql: "SELECT payload FROM events WHERE event_id = ?")
        let findNonce = try db.cachedStatement(sql: "SELECT event_id FROM events WHERE app_id = ? AND nonce = ?")
        // Uniqueness of event_id and (app_id, nonce) is the schema's job: try the insert,
        // and only when it changed nothing look up which key was taken.
        let insertEvent = try BulkStatement(cached: db, """
            INSERT INTO events (event_id, type, occurred_at, app_id, device_id, asid, tracking, nonce, payload,
                device_key, asid_key, link_email, link_tfb, friends, declines_friends, source_id, position)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
            """)
        let insertQuarantine = try db.cachedStatement(sql: """
            INSERT INTO quarantine (source, position, partition, record_key, raw, code, message, event_id, quarantined_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        let requarantine = try db.cachedStatement(sql: "UPDATE quarantine SET code = ?, message = ? WHERE id = ?")
        let release = try db.cachedStatement(sql: "DELETE FROM quarantine WHERE id = ?")
        func quarantine(_ record: IncomingRecord, _ rejection: Rejection, eventID: String?, raw: [UInt8]? = nil) throws {
            outcome.quarantined[rejection.code, default: 0] += 1
            if let id = record.quarantineID {
                try requarantine.execute(arguments: [rejection.code.rawValue, rejection.message, id])
                return
            }
            var raw = raw ?? record.raw
            if !forgotten.isEmpty, let value = try? JSONParser.parse(raw), forgotten.contains(ErasureRules.asid(of: value)),
               let clean = ErasureRules.scrub(value) {
                raw = Array(CanonicalJSON.encode(clean).utf8)
            }
            try insertQuarantine.execute(arguments: [
                record.origin.source, record.origin.position, record.origin.partition.map { Int64($0) },
                record.origin.key.map { Data($0) }, Data(raw), rejection.code.rawValue, rejection.message,
                eventID, now,
            ])
        }
        var sourceIDs: [String: Int64] = [:]
        func sourceID(_ name: String) throws -> Int64 {
            if let id = sourceIDs[name] { return id }
            try db.execute(sql: "INSERT INTO sources (name) VALUES (?) ON CONFLICT(name) DO NOTHING", arguments: [name])
            let id = try Int64.fetchOne(db, sql: "SELECT id FROM sources WHERE name = ?", arguments: [name])!
            sourceIDs[name] = id
            return id
        }
        for record in records {
            var event: LoginEvent
            switch record.validation {
            case let .failure(rejection):
                try quarantine(record, rejection, eventID: record.knownEventID ?? Self.bestEffortEventID(record.raw))
                continue
            case let .success(e):
                event = e
            }
            var columns = record.columns ?? EventColumns(event)
            if forgotten.contains(event.asid), let clean = ErasureRules.scrub(payload: event.canonicalPayload) {
                switch EventValidator.validate(Array(clean.utf8)) {
                case let .success(scrubbed):
                    (event, columns) = (scrubbed, EventColumns(scrubbed))
                case let .failure(rejection):
                    try quarantine(record, rejection, eventID: event.eventID, raw: Array(clean.utf8))
                    continue
                }
            }
            let source = try sourceID(record.origin.source)
            try insertEvent.run {
                $0.add(event.eventID); $0.add(event.type.rawValue); $0.add(event.occurredAt); $0.add(event.appID)
                $0.add(event.deviceID); $0.add(event.asid); $0.add(event.type == .login ? event.tracking?.rawValue : nil)
                $0.add(event.nonce); $0.add(event.canonicalPayload); $0.add(columns.deviceKey); $0.add(columns.asidKey)
                $0.add(columns.linkEmail); $0.add(columns.linkTFB); $0.add(columns.friends); $0.add(columns.declinesFriends)
                $0.add(source); $0.add(record.origin.position)
            }
            let inserted = db.changesCount == 1
            if let id = record.quarantineID,
               try inserted || String.fetchOne(findEvent, arguments: [event.eventID])?.sameBytes(as: event.canonicalPayload) == true {
                try release.execute(arguments: [id]) // a retried entry that now passes (or is already logged)
            }
            if inserted {
                outcome.appended += 1
            } else if let existing = try String.fetchOne(findEvent, arguments: [event.eventID]) {
                // The same bytes, never Unicode equivalence: "café" (U+00E9) and "cafe\u0301"
                // differ. A re-delivered event of a forgotten ASID is compared scrubbed.
                if existing.sameBytes(as: event.canonicalPayload) {
                    outcome.duplicates += 1
                } else {
                    try quarantine(record, Rejection(.eventIDConflict, "event_id '\(event.eventID)' is already in the log with a different payload"), eventID: event.eventID)
                }
            } else {
                let other = try String.fetchOne(findNonce, arguments: [event.appID, event.nonce]) ?? "?"
                try quarantine(record, Rejection(.nonceReplay, "nonce already used by event '\(other)' of app \(event.appID)"), eventID: event.eventID)
            }
        }
        if outcome.duplicates > 0 {
            try db.execute(
                sql: "INSERT INTO counters (name, value) VALUES ('duplicates', ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                arguments: [outcome.duplicates])
        }
        for position in positions { try position.upsert(db) }
        return outcome
    }

    /// The `event_id` of an unparseable-as-event record when it can still be read, for search.
    static func bestEffortEventID(_ raw: [UInt8]) -> String? {
        guard raw.count < 1 << 20, let value = try? JSONParser.parse(raw), case let .string(id)? = value["event_id"] else { return nil }
        return String(id.prefix(128))
    }

    func read<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        do { return try pool.read(body) } catch let error as StoreError { throw error } catch {
            throw StoreError("database \(path): \(Self.describe(error))")
        }
    }

    func write<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        do { return try pool.write(body) } catch let error as StoreError { throw error } catch {
            throw StoreError("database \(path): \(Self.describe(error))")
        }
    }
}

/// Tombstones of `forget`, read once per transaction: records of a forgotten ASID arriving
/// later lose their personal data before they are stored, in the log and in quarantine alike.
struct ForgottenASIDs {
    private let asids: Set<[UInt8]>

    init(_ db: Database) throws {
        asids = Set(try String.fetchAll(db, sql: "SELECT asid FROM forgotten").map { Array($0.utf8) })
    }

    var isEmpty: Bool { asids.isEmpty }

    /// Byte equality; no allocation on the hot path while nothing was forgotten.
    func contains(_ asid: String?) -> Bool {
        guard !asids.isEmpty, let asid else { return false }
        return asids.contains(Array(asid.utf8))
    }
}
