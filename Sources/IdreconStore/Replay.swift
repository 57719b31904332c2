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
    /// readers keep using the current one, then (unless `verifyOnly`) swaps the reader
    /// views to it in one transaction. `config` replaces the identity configuration.
    public func replay(
        config newConfig: IdentityConfig? = nil, verifyOnly: Bool = false, batchSize: Int = 20_000,
        progress: (Int64, Int64) -> Void = { _, _ in }
    ) throws(StoreError) -> ReplayReport {
        let started = Date()
        let (generation, config, total) = try write { db -> (Int, IdentityConfig, Int64) in
            let state = try ProjectionState.load(db)
            let next = ProjectionTables(generation: state.generation + 1)
            try next.drop(db) // leftovers of an interrupted replay
            try next.create(db)
            return (next.generation, newConfig ?? state.config, try Int64.fetchOne(db, sql: "SELECT count(*) FROM events") ?? 0)
        }
        let tables = ProjectionTables(generation: generation)
        var cursor: Int64 = 0
        var done: Int64 = 0
        func step(_ db: Database, limit: Int?) throws -> Int {
            let rows = try Row.fetchAll(db, sql: """
                SELECT \(ProjectionFact.selectColumns) FROM events WHERE seq > ? ORDER BY seq \(limit.map { "LIMIT \($0)" } ?? "")
                """, arguments: [cursor])
            guard let last = rows.last else { return 0 }
            let facts = rows.map(ProjectionFact.init(row:))
            let updater = ProjectionUpdater(db: db, tables: tables, config: config, blocked: Set(config.blockedKeys), visibleSeq: last["seq"])
            try updater.apply(facts)
            cursor = last["seq"]
            done += Int64(rows.count)
            return rows.count
        }
        do {
            while try pool.write({ db in try step(db, limit: batchSize) }) == batchSize {
                progress(done, total)
            }
            // Catch up with events appended meanwhile, then swap, atomically.
            let report = try pool.write { db -> ReplayReport in
                while try step(db, limit: batchSize) > 0 {}
                let state = try ProjectionState.load(db)
                let rebuilt = try Self.digests(db, tables: tables)
                let live = try Self.digests(db, tables: state.tables)
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
            progress(done, total)
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
