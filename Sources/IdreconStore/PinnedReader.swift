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

    /// The page cache of a point reader: 1 MiB (64 pages of 16 KiB), the interior pages its lookups descend
    /// through, not the leaves. Why: a read transaction that finds the WAL changed since the connection's
    /// last one drops the connection's whole cache (SQLite's pager), so beside a consumer committing tens
    /// of times a second a reader's cache lives a few hundred requests. With the store's 32 MiB, each of
    /// those drops freed up to 2,048 page buffers and the next reads allocated them again, memory the
    /// allocator had meanwhile given back: 2.5 page faults per request on the event loops, each under the
    /// process's `mmap_lock` (1M database, GETs paced while `consume --api-address` ingests: 421,387–518,685
    /// faults on the loops in the paced step against 179–541 with 1 MiB; GET paced at 20,000/s p99 median
    /// 1.95 ms in twelve runs against 1.14 ms in six). The price: 3–5 % fewer GETs a second at saturation
    /// (`schemas/performance.md`, "The point readers' page cache").
    static let pointReadCacheKiB = 1024

    init(path: String, cacheKiB: Int) throws(IdreconError) {
        self.path = path
        do { queue = try DatabaseQueue(path: path, configuration: Self.configuration(cacheKiB: cacheKiB)) } catch {
            throw IdreconError(.storage, "cannot open database \(path): \(IdreconError.describe(error))")
        }
    }

    /// A reader's settings, with a page cache of `cacheKiB`.
    static func configuration(cacheKiB: Int) -> Configuration {
        var config = EventStore.configuration(readOnly: true)
        if cacheKiB != EventStore.pageCacheKiB {
            config.prepareDatabase { db in try db.execute(sql: "PRAGMA cache_size = -\(cacheKiB)") }
        }
        return config
    }

    /// `body` in one read transaction: what it reads is one state of the database.
    func read<T>(_ body: (Database) throws -> T) throws(IdreconError) -> T {
        do {
            return try queue.inDatabase { db in
                try BulkStatement(cached: db, "BEGIN DEFERRED").run { _ in }
                do {
                    let value = try body(db)
                    try BulkStatement(cached: db, "COMMIT").run { _ in }
                    return value
                } catch {
                    _ = try? BulkStatement(cached: db, "ROLLBACK").run { _ in }
                    throw error
                }
            }
        } catch { throw EventStore.failure(path, error) }
    }

    /// `EventStore.access(_:asOf:)` on this connection.
    public func access(
        _ asids: [String], asOf: Int64?
    ) throws(IdreconError) -> (answers: [AccessAnswer], lastSeq: Int64, appliedSeq: Int64) {
        try read { db in try EventStore.access(db, asids, asOf: asOf) }
    }
}

extension EventStore {
    /// A connection of this database for one thread's point reads (see `PinnedReader`), with a page
    /// cache of `PinnedReader.pointReadCacheKiB`.
    public func pinnedReader() throws(IdreconError) -> PinnedReader {
        try PinnedReader(path: path, cacheKiB: PinnedReader.pointReadCacheKiB)
    }
}
