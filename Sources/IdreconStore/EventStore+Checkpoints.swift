import Foundation
import GRDB
import GRDBSQLite
import IdreconDomain

/// Checkpoints of the WAL on a connection and a queue of their own while a pipeline appends, so
/// that the one writer only inserts. With SQLite's own checkpoints (every 8,192 pages), the
/// writer copied each transaction's pages from the WAL into the database and synced both after
/// committing it, before it could begin the next: a 1M ingest's append took 7.3–7.5 s, and 6.0–6.2
/// s with no checkpoint at all (`schemas/performance.md`, "Checkpoints beside the writer").
///
/// After each commit the writer's WAL hook asks for a passive checkpoint here, which copies the
/// committed pages while the writer goes on. A WAL starts again from its beginning only when a
/// write transaction begins after it was checkpointed whole, so the writer still checkpoints
/// itself once the WAL holds `writerCheckpointBytes`: by then it copies only the pages committed
/// since the last checkpoint here. Durability is SQLite's, as before (`synchronous=NORMAL`: the
/// WAL is synced by whichever connection checkpoints).
package final class BackgroundCheckpoints: @unchecked Sendable {
    /// The WAL size at which the writer checkpoints itself: large enough that the background has
    /// checkpointed most of the WAL by then (a 64,000-record transaction of the bench's stream
    /// writes ~45 MB), small enough to keep the WAL's index quick for readers (one hash table
    /// per 4,096 pages).
    static let writerCheckpointBytes = 256 << 20

    /// `writerCheckpointBytes`, and SQLite's own interval (`walAutocheckpointBytes`), in the
    /// database's pages.
    private let writerCheckpointPages, autocheckpointPages: Int32

    private let store: EventStore
    private let connection: DatabaseQueue
    private let queue: DispatchQueue
    private let onThread: @Sendable () -> Void
    private let lock = NSLock()
    private var pending = false
    private var stopped = false
    /// The appends' payload pages, dropped from the page cache after each checkpoint here; used
    /// on `queue` only.
    private var payloads: WrittenPayloads?

    fileprivate init(store: EventStore, lowered: (@Sendable () -> Void)?) throws {
        self.store = store
        var config = EventStore.configuration(readOnly: false)
        config.label = "idrecon.checkpoints"
        connection = try DatabaseQueue(path: store.path, configuration: config)
        (writerCheckpointPages, autocheckpointPages) = try connection.read { db in
            (try EventStore.pages(Self.writerCheckpointBytes, db), try EventStore.pages(EventStore.walAutocheckpointBytes, db))
        }
        payloads = try? connection.read { db in try WrittenPayloads(db, path: store.path) }
        // Lowered, the queue takes the background QoS, whose GCD threads are its own (as the
        // writer's): a lowered thread of the shared pool would later run the API's handlers.
        queue = DispatchQueue(label: "idrecon.checkpoints", qos: lowered == nil ? .utility : .background)
        onThread = lowered ?? {}
    }

    /// Asks for a checkpoint (on the writer's thread, from its WAL hook); one at a time.
    fileprivate func request() {
        let start = lock.withLock { () -> Bool in
            guard !pending, !stopped else { return false }
            pending = true
            return true
        }
        guard start else { return }
        queue.async { [self] in
            onThread()
            lock.withLock { pending = false }
            connection.writeWithoutTransaction { db in
                _ = sqlite3_wal_checkpoint_v2(db.sqliteConnection, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
            }
            payloads?.dropCheckpointed()
        }
    }

    /// Makes the writer's WAL hook ask for checkpoints here (replacing the hook
    /// `wal_autocheckpoint` installs; `restoreWriterCheckpoints` installs that again before
    /// this object can go away).
    fileprivate func installHook() {
        let context = Unmanaged.passUnretained(self).toOpaque()
        store.pool.writeWithoutTransaction { db in
            _ = sqlite3_wal_hook(db.sqliteConnection, { context, db, name, pages in
                let checkpoints = Unmanaged<BackgroundCheckpoints>.fromOpaque(context!).takeUnretainedValue()
                if pages >= checkpoints.writerCheckpointPages {
                    _ = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
                } else {
                    checkpoints.request()
                }
                return SQLITE_OK
            }, context)
        }
    }

    /// Runs `body` with the writer checkpointing itself, from a checkpointed WAL: for work that
    /// reads the whole log (a bulk build scans it on other connections, and a reader looks
    /// every page up in the WAL's index first).
    package func pausing<T>(_ body: () throws(IdreconError) -> T) throws(IdreconError) -> T {
        queue.sync {}
        guard lock.withLock({ !stopped }) else { return try body() }
        writerCheckpointsItself(now: true)
        defer { if lock.withLock({ !stopped }) { installHook() } }
        return try body()
    }

    /// Gives the writer SQLite's own checkpoints back and waits for a checkpoint under way.
    package func stop() {
        restoreWriterCheckpoints()
        queue.sync {}
    }

    private func restoreWriterCheckpoints() {
        let running = lock.withLock { () -> Bool in
            let running = !stopped
            stopped = true
            return running
        }
        if running { writerCheckpointsItself(now: false) }
    }

    /// Installs SQLite's own checkpoints on the writer again (replacing the hook), and with
    /// `now` checkpoints what the background has not yet.
    private func writerCheckpointsItself(now: Bool) {
        store.pool.writeWithoutTransaction { db in
            _ = sqlite3_wal_autocheckpoint(db.sqliteConnection, autocheckpointPages)
            if now { _ = sqlite3_wal_checkpoint_v2(db.sqliteConnection, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil) }
        }
    }

    // A checkpoint under way holds a reference, so none is running here (and this may run on
    // the checkpoints' queue, which must not wait for itself).
    deinit { restoreWriterCheckpoints() }
}

extension EventStore {
    /// SQLite's own checkpoint interval on every connection: 32 MiB of WAL (8,192 pages of 4 KiB).
    static let walAutocheckpointBytes = 32 << 20

    /// `bytes` in pages of `db` (whose page size is `pageSizeBytes` unless it was created
    /// before that, or by another program).
    static func pages(_ bytes: Int, _ db: Database) throws -> Int32 {
        let size = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
        return Int32(clamping: bytes / max(512, size))
    }

    /// Moves the writer's checkpoints to a connection and queue of their own until `stop()`
    /// (`BackgroundCheckpoints`). `lowered` lowers the queue's thread beside a read API: it runs
    /// there before each checkpoint. nil for a read-only store, or when the connection cannot
    /// be opened: the writer then checkpoints itself as before.
    package func checkpointInBackground(lowered: (@Sendable () -> Void)? = nil) -> BackgroundCheckpoints? {
        guard !readOnly, let checkpoints = try? BackgroundCheckpoints(store: self, lowered: lowered) else { return nil }
        checkpoints.installHook()
        return checkpoints
    }
}
