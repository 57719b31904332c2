import Foundation
import GRDB
import IdreconDomain

/// A read-only connection of the store's database that one thread keeps for itself (an HTTP
/// event loop answering `GET /v1/access/{asid}`). Reading through `DatabasePool` costs ~12 µs
/// before the first row (a reader taken from the pool under locks, a dispatch, `BEGIN`,
/// `PRAGMA schema_version` and `COMMIT` parsed again); a connection of its own with prepared
/// `BEGIN` and `COMMIT` costs ~4 µs (1M-event database, this machine). The pool stays the
/// store's way to read; this is for the per-request hot path only.
public final class PinnedReader: Sendable {
    private let queue: DatabaseQueue
    private let path: String

    init(path: String) throws(IdreconError) {
        self.path = path
        // Its transaction outlives one access (`readHeld`), which GRDB allows only when told.
        var configuration = EventStore.configuration(readOnly: true)
        configuration.allowsUnsafeTransactions = true
        do { queue = try DatabaseQueue(path: path, configuration: configuration) } catch {
            throw IdreconError(.storage, "cannot open database \(path): \(IdreconError.describe(error))")
        }
    }

    /// `body` in the connection's open read transaction, beginning one when none is open;
    /// `began` says this call began it, and its caller then ends it with `release()` soon after (an
    /// event loop: at the end of the loop's turn). The requests one turn answers share a snapshot,
    /// and one pair of the WAL read-lock calls that each transaction makes (`fcntl` under a mutex
    /// of SQLite's that every connection of the process shares: two event loops' readers took
    /// turns on it for every GET). A read that fails ends the transaction.
    func readHeld<T>(_ body: (Database) throws -> T) throws(IdreconError) -> (value: T, began: Bool) {
        do {
            return try queue.inDatabase { db in
                let began = !db.isInsideTransaction
                if began { try BulkStatement(cached: db, "BEGIN DEFERRED").run { _ in } }
                do {
                    return (try body(db), began)
                } catch {
                    _ = try? BulkStatement(cached: db, "ROLLBACK").run { _ in }
                    throw error
                }
            }
        } catch { throw EventStore.failure(path, error) }
    }

    /// Ends the read transaction `readHeld` began, if it is still open.
    public func release() {
        try? queue.inDatabase { db in
            guard db.isInsideTransaction else { return }
            if (try? BulkStatement(cached: db, "COMMIT").run { _ in }) == nil {
                _ = try? BulkStatement(cached: db, "ROLLBACK").run { _ in }
            }
        }
    }

    /// `EventStore.access(_:asOf:)` in the open read transaction (`readHeld`).
    public func accessHeld(
        _ asids: [String], asOf: Int64?
    ) throws(IdreconError) -> (value: (answers: [AccessAnswer], lastSeq: Int64, appliedSeq: Int64), began: Bool) {
        try readHeld { db in try EventStore.access(db, asids, asOf: asOf) }
    }
}

extension EventStore {
    /// A connection of this database for one thread's point reads (see `PinnedReader`).
    public func pinnedReader() throws(IdreconError) -> PinnedReader { try PinnedReader(path: path) }
}
