import Foundation
import GRDB
import IdreconDomain

/// The result of rebuilding the projections from the log.
public struct ReplayReport: Sendable {
    public var events: Int64
    public var seconds: Double
    public var rebuilt: [String: String]
    public var live: [String: String]
    public var swapped: Bool

    /// Projections whose rebuilt digest differs from the live one.
    public var drift: [String] { rebuilt.keys.filter { rebuilt[$0] != live[$0] }.sorted() }
}

extension EventStore {
    /// Rebuilds every projection from the log into a new generation of tables while
    /// readers (and writers) keep using the current one, then (unless `verifyOnly`) swaps
    /// the reader views to it in one transaction. `config` replaces the identity
    /// configuration. The bulk of the log is folded from a snapshot (see
    /// `ProjectionBuilder`, `partitionSize` events in memory at a time); events appended
    /// meanwhile are applied incrementally just before the swap.
    public func replay(
        config newConfig: IdentityConfig? = nil, verifyOnly: Bool = false, partitionSize: Int = 1_000_000,
        progress: (Int64, Int64) -> Void = { _, _ in }
    ) throws(StoreError) -> ReplayReport {
        let started = Date()
        do {
            var snapshots: (DatabaseSnapshot, DatabaseSnapshot)? = (try pool.makeSnapshot(), try pool.makeSnapshot())
            for snapshot in [snapshots!.0, snapshots!.1] {
                // The scan reads each page once: a big page cache would only cost memory.
                try snapshot.read { db in try db.execute(sql: "PRAGMA cache_size = -4096") }
            }
            let (snapshotSeq, total) = try snapshots!.0.read { db in
                (try Int64.fetchOne(db, sql: "SELECT max(seq) FROM events") ?? 0, try Int64.fetchOne(db, sql: "SELECT count(*) FROM events") ?? 0)
            }
            let (generation, config) = try pool.write { db -> (Int, IdentityConfig) in
                let state = try ProjectionState.load(db)
                let next = ProjectionTables(generation: state.generation + 1)
                try next.drop(db) // leftovers of an interrupted replay
                try next.createTables(db)
                return (next.generation, newConfig ?? state.config)
            }
            let tables = ProjectionTables(generation: generation)
            let builder = ProjectionBuilder(tables: tables, config: config, partitionSize: partitionSize)
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
            let scanned = try builder.scan(snapshots!, lastSeq: snapshotSeq, events: total, spillDirectory: directory)
            snapshots = nil // their read transactions would keep the WAL from being checkpointed
            try builder.load(scanned, into: pool) { progress($0, total) }
            try pool.write { db in try builder.finish(db) }

            // Catch up with events appended since the snapshot, then swap, atomically.
            let report = try pool.write { db -> ReplayReport in
                var cursor = snapshotSeq
                var done = total
                while true {
                    let rows = try Row.fetchAll(db, sql: """
                        SELECT \(ProjectionFact.selectColumns) FROM events WHERE seq > ? ORDER BY seq LIMIT 10000
                        """, arguments: [cursor])
                    guard let last = rows.last else { break }
                    // Device refolds must not see events of later chunks.
                    let updater = ProjectionUpdater(db: db, tables: tables, config: config, blocked: Set(config.blockedKeys), visibleSeq: last["seq"])
                    try updater.apply(rows.map(ProjectionFact.init(row:)))
                    cursor = last["seq"]
                    done += Int64(rows.count)
                }
                let state = try ProjectionState.load(db)
                // The live tables cannot change while this transaction holds the write lock,
                // so a reader digests them on the other core.
                let (rebuilt, live) = try concurrently(
                    { try Self.digests(db, tables: tables) },
                    {
                        try self.pool.read { reader in
                            try reader.execute(sql: "PRAGMA cache_size = -4096") // one pass: no cache needed
                            defer { try? reader.execute(sql: "PRAGMA cache_size = -65536") }
                            return try Self.digests(reader, tables: state.tables)
                        }
                    })
                var report = ReplayReport(events: done, seconds: 0, rebuilt: rebuilt, live: live, swapped: false)
                if verifyOnly {
                    try tables.drop(db)
                } else {
                    let configJSON = String(decoding: try JSONEncoder().encode(config), as: UTF8.self)
                    try db.execute(sql: "UPDATE projection_meta SET generation = ?, config = ?, applied_seq = ?",
                                   arguments: [generation, configJSON, cursor])
                    try tables.publish(db)
                    try state.tables.drop(db)
                    report.swapped = true
                }
                return report
            }
            progress(report.events, report.events)
            var final = report
            final.seconds = Date().timeIntervalSince(started)
            return final
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError("replay failed on \(path): \(Self.describe(error))")
        }
    }
}
