import CSQLiteSettings
import Foundation
import GRDB
import Synchronization
import IdreconDomain
// The log's types (records, positions, outcomes, errors) are part of the store's API.
@_exported import IdreconLog
import IdreconProjections

/// The SQLite event log: append-only `events`, `quarantine`, consumed positions.
/// One writer, many readers (WAL).
public final class EventStore: Sendable {
    public let path: String
    /// Where reads go: `pool`, or a one-shot reader's one connection.
    let reader: any DatabaseReader
    /// A writer's connections (one writer, readers beside it: WAL), or concurrent readers' (the read
    /// API). A one-shot reader has none: one connection opens in half the time of a pool's two.
    private let connections: DatabasePool?
    /// A command's reader: one connection (`concurrentReads: false`).
    var isOneShot: Bool { connections == nil }
    let readOnly: Bool
    /// The projections this store folds the log into.
    package let projections: ProjectionRegistry
    /// The filters and open runs of the log's keys, kept between this writer's transactions:
    /// taken before a write transaction starts, never inside one (`writeFolding`).
    private let logKeys = Mutex(LogKeyRuns.Cache())
    private let keyShape: KeyRuns.Shape
    /// The pair of connections that reads a large `access` batch on two cores.
    let splitReaders = SplitReader.Pool()

    /// Page cache per connection. 64 MB was no faster than 32 MB at 1M events (ingest 33–46 s
    /// either way on this noisy VM) and cost 40 MB of peak memory (`schemas/sql.md`).
    static let pageCacheKiB = 32768

    /// Page size of a database this creates (SQLite's default is 4 KiB); one with content keeps
    /// its own. A 1M `ingest` took 13.2–13.8 s at 16 KiB against 17.1 s at 4 KiB in paired runs,
    /// with a third less system time, and a 1M `replay` 12 % less: a page holds four times the
    /// rows, so the sorted loads split, link and log (WAL frames) a quarter as many pages.
    static let pageSizeBytes = 16384

    /// Helper threads SQLite may start for one sort (`PRAGMA threads`): one per core.
    static let sortThreads = min(8, Machine.cores)

    /// Opens (creating if needed) the database at `path` and runs pending migrations.
    /// `skipPendingRebuild` is for `replay` itself, which rebuilds anyway. `concurrentReads` false
    /// (read-only only): a command's reads, one after another, on one connection instead of a pool.
    public convenience init(
        path: String, readOnly: Bool = false, concurrentReads: Bool = true, skipPendingRebuild: Bool = false
    ) throws(IdreconError) {
        try self.init(
            path: path, readOnly: readOnly, concurrentReads: concurrentReads, skipPendingRebuild: skipPendingRebuild,
            projections: .standard)
    }

    /// Opens the database folding `projections`: a writer builds a registered projection
    /// the database has not seen from the log before returning (`ProjectionCursors`).
    /// `keyShape`: when the log's key runs are sealed and merged (small in tests, so that
    /// appends and refolds meet sealed and merged runs).
    package init(
        path: String, readOnly: Bool = false, concurrentReads: Bool = true, skipPendingRebuild: Bool = false,
        projections: ProjectionRegistry, keyShape: KeyRuns.Shape = .standard
    ) throws(IdreconError) {
        self.path = path
        self.projections = projections
        self.keyShape = keyShape
        self.readOnly = readOnly
        let config = Self.configuration(readOnly: readOnly)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw IdreconError(.input, "cannot open database \(path): it is a directory; pass a file path with --db")
        }
        if readOnly, !FileManager.default.fileExists(atPath: path) {
            throw IdreconError(.input, "no database at \(path); run 'idrecon ingest' or 'idrecon consume' first, or pass --db")
        }
        // Two processes opening a new database at once race on switching it to WAL and on
        // the migrations: a lock on a sidecar file serializes writers' opening; the second
        // finds everything applied. Never a descriptor of the database file itself: closing
        // it would drop SQLite's POSIX locks (see `LockFile`).
        let openLock = readOnly ? nil : try LockFile(databasePath: path, name: "open-lock")
        do {
            if !readOnly, FileManager.default.fileExists(atPath: path) { try Self.refuseForeignDatabase(path) }
            if readOnly, !concurrentReads {
                var config = config
                config.allowsUnsafeTransactions = true // `readOneState` leaves its transaction open
                let queue = try Self.openReadOnly(path) { try DatabaseQueue(path: path, configuration: config) }
                (reader, connections) = (queue, nil)
            } else if readOnly {
                let pool = try Self.openReadOnly(path) { try DatabasePool(path: path, configuration: config) }
                (reader, connections) = (pool, pool)
            } else {
                let pool = try DatabasePool(path: path, configuration: config)
                (reader, connections) = (pool, pool)
                try Self.announceLongUpgrade(pool, path: path)
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
        } catch let error as IdreconError {
            throw error
        } catch {
            throw IdreconError(.storage, "cannot open database \(path): \(Self.foreignSidecars(path, error) ?? IdreconError.describe(error))")
        }
        if !readOnly { try levelProjections() }
        withExtendedLifetime(openLock) {}
        // An erasure whose rebuild did not complete is finished by the next writer (after
        // the open lock: a replay takes a while).
        if !readOnly, !skipPendingRebuild { try finishPendingRebuild() }
    }

    /// Every connection's settings.
    static func configuration(readOnly: Bool) -> Configuration {
        SQLiteProcess.configure()
        var config = Configuration()
        config.readonly = readOnly
        config.busyMode = .timeout(30)
        config.prepareDatabase { db in
            // A lowered thread's statements pause (`ThreadPriority.pause`); others' only look.
            idrecon_sqlite3_pause_if_lowered(db.sqliteConnection)
            // WAL + NORMAL is durable against process crashes (SIGKILL); a bigger page
            // cache and checkpoint interval keep random-key index inserts off the disk. A
            // read-only connection (a reader's, or a pool's readers) never writes: the settings
            // of writes are left out of its start.
            if !db.configuration.readonly {
                try db.execute(sql: "PRAGMA page_size = \(EventStore.pageSizeBytes)")
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
                let checkpointPages = try EventStore.pages(EventStore.walAutocheckpointBytes, db)
                try db.execute(sql: "PRAGMA wal_autocheckpoint = \(checkpointPages)")
            }
            try db.execute(sql: "PRAGMA cache_size = -\(EventStore.pageCacheKiB)")
            // Index builds and large sorts sort on both cores (10M events: the log's key index
            // 11.3-13.6 s -> 7.2-7.7 s).
            try db.execute(sql: "PRAGMA threads = \(EventStore.sortThreads)")
        }
        return config
    }

    /// A writer leaves the WAL checkpointed and empty for the readers that come after it.
    deinit {
        guard !readOnly else { return }
        pool.writeWithoutTransaction { db in WriteAheadLog.reset(db) }
    }

    /// Builds the registered projections the database lacks, and brings level those another
    /// writer left behind: one catch-up chunk per transaction, so a kill loses only the
    /// chunk being folded and the next writer goes on from there.
    private func levelProjections() throws(IdreconError) {
        guard try !read({ db in try ProjectionState.load(db, registry: projections).isLevel }) else { return }
        while try !writeFolding({ db, keys in
            try ProjectionCursors.level(db, keys: keys, try ProjectionState.load(db, registry: projections), chunks: 1)
        }) {}
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

    /// Says on stderr, before it starts, that this open rewrites the log (`Schema.pendingRewrite`:
    /// 219 s for 10M events on the bench's machine) or its unique keys (11.5 s for 10M): a
    /// command silent for that long looks hung.
    private static func announceLongUpgrade(_ pool: DatabasePool, path: String) throws {
        guard let (rewrite, events) = try pool.read({ db in try Schema.pendingRewrite(db) }) else { return }
        let (what, pace, announcedFrom): (String, String, Int64) = switch rewrite {
        case .log: ("the log's \(events) events", "10-30 s per million events", 100_000)
        case .uniqueKeys:
            ("the unique keys of the log's \(events) events", "about a second per million events", 1_000_000)
        case .lookupKeys:
            ("the device and login keys of the log's \(events) events", "10-15 s per million events", 1_000_000)
        }
        guard events >= announcedFrom else { return }
        let line = "idrecon: upgrading \(path): \(what) are rewritten once (\(pace); stopping it rolls it back)\n"
        FileHandle.standardError.write(Data(line.utf8))
    }

    /// Read-only connections (`open`: a pool, or one), the database brought up to date first by
    /// a writer when it needs one: a database from an older idrecon (its schema), or one whose
    /// first write was interrupted (`rolledBack`).
    private static func openReadOnly<Reader: DatabaseReader>(
        _ path: String, _ open: () throws -> Reader
    ) throws -> Reader {
        let reader = try rolledBack(path, open)
        guard try reader.read({ db in try !Schema.migrator.hasCompletedMigrations(db) }) else { return reader }
        do {
            _ = try EventStore(path: path)
        } catch {
            throw IdreconError(
                .storage, "database \(path) needs a newer schema and cannot be upgraded: \(error.description)")
        }
        return reader
    }

    /// `open()` again after a writer opened the database, when `open()` met a hot journal. A
    /// process killed in a database's first write, before the database is in WAL mode, leaves
    /// a rollback journal that only a connection that can write rolls back (SQLite's
    /// `SQLITE_READONLY_ROLLBACK` for the others): without this, no read-only open, nor the
    /// writer's read-only look at the file (`refuseForeignDatabase`), ever opened it again.
    private static func rolledBack<T>(_ path: String, _ open: () throws -> T) throws -> T {
        do {
            return try open()
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_READONLY_ROLLBACK {
            // A plain read-write connection rolls the journal back on its first read; it changes
            // nothing else (no WAL, no migrations), so a foreign database is still refused after.
            _ = try DatabaseQueue(path: path, configuration: plain(readOnly: false)).read { db in
                try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master")
            }
            return try open()
        }
    }

    /// A connection's settings that change nothing in the file (no page size, no WAL), for a
    /// look at a database before it is known to be idrecon's, or a rollback of its journal.
    private static func plain(readOnly: Bool) -> Configuration {
        var config = Configuration()
        config.readonly = readOnly
        config.busyMode = .timeout(30)
        return config
    }

    /// Refuses a non-empty SQLite database that idrecon did not create, before anything
    /// (the switch to WAL, the migrations) changes it.
    private static func refuseForeignDatabase(_ path: String) throws {
        let foreign = try rolledBack(path) {
            try DatabaseQueue(path: path, configuration: plain(readOnly: true)).read { db in
                let tables = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") ?? 0
                return try tables > 0 && !db.tableExists("grdb_migrations")
            }
        }
        if foreign {
            throw IdreconError(.input, "\(path) is an SQLite database that idrecon did not create; pass a new file or an idrecon database with --db")
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

    /// Stored positions, by source.
    public func positions() throws(IdreconError) -> [ConsumedPosition] {
        try read { db in try ConsumedPosition.order(Column("source")).fetchAll(db) }
    }

    public func position(of source: String) throws(IdreconError) -> ConsumedPosition? {
        try read { db in try ConsumedPosition.fetchOne(db, key: source) }
    }

    /// Appends or quarantines every record and stores `positions`, all in one transaction,
    /// with the projection updates (`updateProjections: false` is for benchmarking the
    /// raw append limit only: it leaves the projections behind the log until a replay).
    public func append(_ records: [IncomingRecord], positions: [ConsumedPosition], updateProjections: Bool = true) throws(IdreconError) -> BatchOutcome {
        var batch = Optional((records, positions))
        return try appendBatches(projectionLag: updateProjections ? 0 : .max) {
            defer { batch = nil }
            return batch
        }.outcome
    }

    /// Appends batches in one transaction, as `append` does each: `next` is called until
    /// it returns nil, and each batch's memory can go as soon as it is in the transaction.
    /// Fewer, bigger transactions write each dirtied page of the random-key indexes once.
    /// The projections are brought up to the log in the same transaction once they are
    /// `projectionLag` events behind it (write-behind: see `catchUpProjections`; 0: always;
    /// nil: when another transaction like this one could carry the lag past one catch-up
    /// chunk, `ProjectionEngine.catchUpLive`).
    /// Returns what the batches did and the events the projections folded (0: none).
    public func appendBatches(
        projectionLag: Int? = 0, _ next: () -> (records: [IncomingRecord], positions: [ConsumedPosition])?
    ) throws(IdreconError) -> (outcome: BatchOutcome, projected: Int64) {
        try logKeys.withLock { (cache) throws(IdreconError) in try write { db in
            var total = BatchOutcome()
            let forgotten = try ForgottenASIDs(db)
            var runs = try LogKeyRuns(db, cache: &cache, shape: keyShape)
            while let batch = next() {
                total.add(try EventLog.append(db, batch.records, positions: batch.positions, forgotten: forgotten, keys: &runs))
                // Freed on another thread (the block holds the last reference once this one ends): a batch's
                // records' buffers, written by the validating threads, cost the writer (the pipeline's
                // bottleneck) 2 % of the ingest's CPU to free.
                Self.releaser.async { [records = batch.records] in withExtendedLifetime(records) {} }
            }
            // The fold's refolds find the events of this transaction too, from the open runs.
            let keys = LogKeys(consume runs)
            let lag = projectionLag.map(Int64.init)
            let projected = try ProjectionEngine.catchUpLive(
                db, keys: keys, registry: projections, ifBehindBy: lag, appended: total.appended)
            var after = keys.take()!
            try after.finish(db, into: &cache)
            return (total, projected)
        } }
    }

    /// Where appended batches are freed (`appendBatches`).
    private static let releaser = DispatchQueue(label: "idrecon.append.release", qos: .utility)

    /// Events behind the log from which the pipelines build the projections in bulk.
    public static let bulkCatchUpFrom = ProjectionEngine.bulkMinimum

    /// Whether appending `expected` more events makes the projections due a bulk build
    /// (`ProjectionEngine.bulkDue`): a pipeline then folds nothing while it appends, and
    /// builds them in `catchUpProjections`. Asked with every batch of a consumer: one read.
    public func bulkBuildDue(from minimum: Int64, expecting expected: Int64) throws(IdreconError) -> Bool {
        try read { db in try ProjectionEngine.bulkDue(db, from: minimum, expecting: expected) }
    }

    /// Brings the projections up to the end of the log; returns the events applied. The
    /// pipelines append with a projection lag (the fold then reads and writes each entity
    /// once per many events instead of once per transaction) and call this when their
    /// source is drained, when idle, and before they stop. With `bulkFrom`, projections due
    /// a bulk build (`ProjectionEngine.bulkDue`) are built anew from the log as `replay`
    /// builds them and swapped in (`progress`: events built, of the log's); otherwise the
    /// events they lack are folded in, in one transaction.
    @discardableResult
    public func catchUpProjections(bulkFrom: Int64? = nil, progress: (Int64, Int64) -> Void = { _, _ in }) throws(IdreconError) -> Int64 {
        if let bulkFrom, try read({ db in try ProjectionEngine.bulkDue(db, from: bulkFrom) }) {
            return try buildBehindProjections(from: bulkFrom, progress: progress)
        }
        return try writeFolding { db, keys in try ProjectionEngine.catchUpLive(db, keys: keys, registry: projections) }
    }

    /// A write transaction whose folds find an entity's events through the log's keys (`LogKeys`),
    /// from this writer's cached runs. The cache is taken before the transaction starts, as
    /// `appendBatches` takes it: never while a transaction is open, which could wait for it.
    /// The runs are read only if a fold looks a key up.
    func writeFolding<T: Sendable>(_ body: (Database, LogKeys) throws -> T) throws(IdreconError) -> T {
        try logKeys.withLock { (cache) throws(IdreconError) in try write { db in
            // The cache moves into the box and back (never copied: its open runs would be).
            let held = Held(LogKeyRuns.Cache())
            swap(&held.cache, &cache)
            defer { swap(&held.cache, &cache) }
            let keys = LogKeys(making: { [keyShape] in try LogKeyRuns(db, cache: &held.cache, shape: keyShape) })
            let result = try body(db, keys)
            if var runs = keys.take() { try runs.finish(db, into: &held.cache) }
            return result
        } }
    }

    /// A writer's key cache while a fold may look keys up.
    private final class Held {
        var cache: LogKeyRuns.Cache
        init(_ cache: LogKeyRuns.Cache) { self.cache = cache }
    }

    /// The pool of a writer or of concurrent readers; a one-shot reader (`concurrentReads` false) reads
    /// through `read` only.
    var pool: DatabasePool {
        guard let connections else { preconditionFailure("\(path): a one-shot reader has no pool") }
        return connections
    }

    /// A one-shot reader's reads from here on answer from one state of the database, this call's:
    /// a command that reads several times (`user`: the identity, then each member's access and
    /// devices) never mixes states that a writer committed between its reads. The read transaction
    /// lasts as long as the store, and a writer's checkpoints cannot pass it meanwhile: for commands
    /// that end when they have answered, not for one that reads a stream (`audit calls` from a pipe).
    public func readOneState() throws(IdreconError) {
        guard let queue = reader as? DatabaseQueue else { preconditionFailure("readOneState: a one-shot reader's") }
        do {
            try queue.inDatabase { db in
                try db.execute(sql: "BEGIN DEFERRED")
                // WAL: the first read of the database takes the snapshot that the transaction keeps.
                _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_schema")
            }
        } catch {
            throw Self.failure(path, error)
        }
    }

    func read<T>(_ body: (Database) throws -> T) throws(IdreconError) -> T {
        do { return try reader.read(body) } catch { throw Self.failure(path, error) }
    }

    func write<T>(_ body: (Database) throws -> T) throws(IdreconError) -> T {
        do { return try pool.write(body) } catch { throw Self.failure(path, error) }
    }

    /// A failed database access as the error callers see: ours unchanged, SQLite's as storage.
    static func failure(_ path: String, _ error: any Error) -> IdreconError {
        error as? IdreconError ?? IdreconError(.storage, "database \(path): \(IdreconError.describe(error))")
    }
}

