import Foundation
import GRDB
import IdreconDomain
import IdreconLog
import IdreconProjections

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
    /// configuration. `comparing` digests the rebuilt and the live projections
    /// (`ReplayReport.drift`; `verifyOnly` always does); a rebuild that only swaps leaves both
    /// out, a fifth of its CPU, on the core the load's helpers share. The bulk of the log is
    /// folded from a snapshot (see `ProjectionBuilder`, `partitionSize` events in memory at a time); events appended
    /// meanwhile are applied incrementally just before the swap. One replay runs at a time
    /// per database (another waits, calling `waiting` first); one that a `forget` overtakes
    /// starts over, so erased data never comes back.
    public func replay(
        config newConfig: IdentityConfig? = nil, verifyOnly: Bool = false, comparing: Bool = true,
        partitionSize: Int = replayPartition, progress: (Int64, Int64) -> Void = { _, _ in }, waiting: () -> Void = {}
    ) throws(IdreconError) -> ReplayReport {
        try holdingReplayLock("replay failed on \(path)", waiting: waiting) {
            let started = Date()
            while true {
                let purpose: RebuildPurpose = verifyOnly ? .verify : .replay(comparing: comparing)
                let attempt = try rebuild(config: newConfig, purpose: purpose, partitionSize: partitionSize, progress: progress)
                if var report = attempt {
                    report.seconds = Date().timeIntervalSince(started)
                    return report
                }
            }
        }
    }

    /// Builds the live projections anew from the log, as a replay does but comparing
    /// nothing, while a bulk build is due (`ProjectionEngine.bulkDue`); otherwise (a replay
    /// ran meanwhile) folds what they lack. Returns the events built or folded.
    func buildBehindProjections(from minimum: Int64, progress: (Int64, Int64) -> Void) throws(IdreconError) -> Int64 {
        try holdingReplayLock("building the projections of \(path) failed") {
            while try pool.read({ db in try ProjectionEngine.bulkDue(db, from: minimum) }) {
                let report = try rebuild(config: nil, purpose: .catchUp, partitionSize: Self.replayPartition, progress: progress)
                if let report { return report.events }
            }
            return try writeFolding { db, keys in try ProjectionEngine.catchUpLive(db, keys: keys, registry: projections) }
        }
    }

    /// Runs `body` holding the database's replay lock (one rebuild at a time; another waits,
    /// calling `waiting` first); a failure that is not ours is a storage error after `failed`.
    private func holdingReplayLock<T>(_ failed: String, waiting: () -> Void = {}, _ body: () throws -> T) throws(IdreconError) -> T {
        do {
            let lock = try LockFile(databasePath: path, name: "replay-lock", waiting: waiting)
            defer { withExtendedLifetime(lock) {} }
            return try body()
        } catch let error as IdreconError {
            throw error
        } catch {
            throw IdreconError(.storage, "\(failed): \(IdreconError.describe(error))")
        }
    }

    /// Events a replay folds in memory at a time. Smaller partitions also fill and drain the
    /// build's pipeline sooner (the writer waits for the first partition's logins, and the
    /// other core idles while the last one is written): against 500,000, a 1M `ingest`'s load
    /// 4.08-4.11 -> 3.81-3.84 s at 182 MB against 226 MB, its `replay` 5.0-5.45 -> 4.8-5.0 s.
    /// Against 250,000, as fast and 55-65 MB less at 1M: the build's stages each hold a
    /// partition, at its start on top of a consumer's own memory (`consume` 293-301 -> 232-236
    /// MB, `ingest` 265-289 -> 223-228 MB, `replay` 213-226 -> 156-165 MB; 10M `replay`
    /// 38.5-39.0 -> 36.7-38.0 s, 341 -> 286 MB). 64,000 saved 30 MB more at 1M, none at 10M.
    public static let replayPartition = 125_000

    /// One rebuild; nil when a `forget` rewrote the log meanwhile (nothing was swapped).
    private func rebuild(
        config newConfig: IdentityConfig?, purpose: RebuildPurpose, partitionSize: Int, progress: (Int64, Int64) -> Void
    ) throws -> ReplayReport? {
        let (comparing, verifyOnly) = (purpose.compares, !purpose.swaps)
        // The live projections, caught up first, are what the rebuilt ones are compared with.
        if comparing { _ = try writeFolding { db, keys in try ProjectionEngine.catchUpLive(db, keys: keys, registry: projections) } }
        var snapshots: (DatabaseSnapshot, DatabaseSnapshot)? = (try pool.makeSnapshot(), try pool.makeSnapshot())
        for snapshot in [snapshots!.0, snapshots!.1] {
            // The scan reads each page once: a big page cache would only cost memory.
            try snapshot.read { db in try db.execute(sql: "PRAGMA cache_size = -4096") }
        }
        let seen = try snapshots!.0.read { db in try LogVersion(db, projections) }
        // The log's events are never deleted, so its last sequence number is their count for the
        // progress; the report counts those the build loaded.
        let total = seen.lastSeq
        let (generation, config, liveBTrees, sampledBTrees) = try pool.write { db in
            let state = try ProjectionState.load(db, registry: projections)
            let next = ProjectionTables(generation: state.generation + 1, registry: projections)
            try next.drop(db) // leftovers of an interrupted replay
            try next.createTables(db)
            func bTrees(_ table: String) throws -> [String] {
                try String.fetchAll(
                    db, sql: "SELECT name FROM sqlite_schema WHERE tbl_name = ?", arguments: [state.tables.name(table)])
            }
            let live = try state.tables.names.flatMap(bTrees)
            let sampled = try ProjectionBuilder.sampledTables.flatMap(bTrees)
            return (next.generation, newConfig ?? state.config, live, sampled)
        }
        let tables = ProjectionTables(generation: generation, registry: projections)
        let builder = ProjectionBuilder(tables: tables, config: config, partitionSize: partitionSize)
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        // The scan first reads the live tables it samples, every page: asked for at once, beside the
        // samples' seeks into the log (a cold 10M replay read them one after the other, 0.4 GB in ~1 s
        // at half a core).
        let sampling = PageWarmer.start(pool, bTrees: sampledBTrees)
        let scanned = try builder.scan(snapshots!, lastSeq: seen.lastSeq, spillDirectory: directory, readAhead: pool)
        sampling.stop()

        // Loading and finishing are single-threaded SQLite writes: the other core digests
        // the live projections as the snapshot saw them, then the rebuilt tables `finish`
        // leaves alone. The snapshot is released as soon as it is digested, or at once when
        // nothing is compared: its read transaction would keep the WAL from being checkpointed.
        let held = comparing ? Handoff(snapshots!.0) : nil
        snapshots = nil
        let liveDigests = held.map { held in
            Background { try held.take().read { db in try ProjectionTables.digests(db, tables: ProjectionTables(generation: seen.generation, registry: self.projections)) } }
        }
        // The rebuilt tables are checkpointed beside the writer as they are loaded: the one
        // writer checkpointing itself, or the connection's close copying all of them at the end
        // of an `ingest`, was time on the build's critical path while the other core had some.
        let checkpoints = checkpointInBackground()
        defer { checkpoints?.stop() }
        // The swap drops the live generation, which reads every page of it: from a cold page cache
        // (a 10M log: 1.5 GB) that was 3.5 s at the end on the writer alone. They are read while the
        // disk idles, during the load (a 10M replay's took 7-10 s cached, 30 s cold, of its 35 s).
        // Digesting them (`comparing`) reads them anyway.
        let warming = comparing ? nil : PageWarmer.start(pool, bTrees: liveBTrees)
        defer { warming?.stop() }
        // Consumes the facts: freed as they are written.
        let events = try builder.load(scanned, into: pool) { progress($0, total) }
        let liveAtSnapshot = try liveDigests?.result().get() ?? [:]
        let (_, loaded) = try concurrently(
            { try builder.finish(pool) },
            { comparing ? try self.digestsOnReader(tables, names: tables.loadedNames) : [:] })
        // Projections without a bulk load are folded as the live ones are, a chunk per transaction.
        let refolds = projections.projections.filter { $0.bulk == .refold }
        var refolded: Int64 = 0
        while !refolds.isEmpty, refolded < seen.lastSeq {
            let next = try writeFolding { db, keys in
                try ProjectionEngine.catchUp(
                    db, keys: keys, tables: tables, config: config, after: refolded, through: seen.lastSeq,
                    projections: refolds, chunks: 1
                ).cursor
            }
            guard next > refolded else { break }
            refolded = next
        }

        warming?.stop()
        // Catch up with events appended since the snapshot, then swap, atomically.
        let report = try writeFolding { db, keys -> ReplayReport? in
            let now = try LogVersion(db, projections)
            guard now.forgotten == seen.forgotten else {
                try tables.drop(db, erasing: true) // folded from events a forget has since scrubbed
                return nil
            }
            let (cursor, caughtUpEvents) = try ProjectionEngine.catchUp(
                db, keys: keys, tables: tables, config: config, after: seen.lastSeq)
            let done = events + caughtUpEvents
            var report = ReplayReport(events: done, seconds: 0, rebuilt: [:], live: [:], swapped: false)
            if comparing {
                // A writer's write-behind may have left the live projections behind the log:
                // they are compared as they are once caught up.
                let liveLagged = try ProjectionEngine.catchUpLive(db, keys: keys, registry: projections) > 0
                let live = try ProjectionState.load(db, registry: projections).tables
                // What changed since the digests above is digested again. The live tables cannot
                // change while this transaction holds the write lock, so a reader digests them
                // on the other core (unless this transaction changed them).
                let caughtUp = cursor != seen.lastSeq
                let rebuiltNames = caughtUp ? tables.names : tables.names.filter { loaded[$0] == nil }
                let (rest, liveNow) = liveLagged
                    ? (try ProjectionTables.digests(db, tables: tables, names: rebuiltNames), try ProjectionTables.digests(db, tables: live))
                    : try concurrently(
                        { try ProjectionTables.digests(db, tables: tables, names: rebuiltNames) },
                        { now == seen ? liveAtSnapshot : try self.digestsOnReader(live, names: tables.names) })
                report.rebuilt = caughtUp ? rest : rest.merging(loaded) { new, _ in new }
                report.live = liveNow
            }
            let state = try ProjectionState.load(db, registry: projections)
            if verifyOnly {
                try tables.drop(db)
            } else {
                let configJSON = String(decoding: try JSONEncoder().encode(config), as: UTF8.self)
                try db.execute(sql: "UPDATE projection_meta SET generation = ?, config = ?, applied_seq = ?",
                               arguments: [generation, configJSON, cursor])
                try tables.publish(db)
                try ProjectionCursors.advance(db, projections, to: cursor)
                let erasing = try Self.rebuildPending(db)
                // A projection this writer does not register is not rebuilt: its tables go, and
                // a writer that registers it builds it again from the log.
                for other in try state.unregistered(db) {
                    try state.tables.drop(db, names: other.tables, erasing: erasing)
                    for view in other.tables { try db.execute(sql: "DROP VIEW IF EXISTS \(view)") }
                    try db.execute(sql: "DELETE FROM projection_cursors WHERE name = ?", arguments: [other.name])
                }
                try state.tables.drop(db, erasing: erasing)
                try db.execute(sql: "DELETE FROM pending_rebuild")
                report.swapped = true
            }
            return report
        }
        if let report { progress(report.events, report.events) }
        return report
    }

    /// Digests of `names` in `tables`, read on a reader connection (with a small page cache:
    /// one pass needs none).
    private func digestsOnReader(_ tables: ProjectionTables, names: [String]) throws -> [String: String] {
        try pool.read { reader in
            try reader.withPageCache(kibibytes: 4096) {
                try ProjectionTables.digests(reader, tables: tables, names: names)
            }
        }
    }
}

extension EventStore {
    /// Whether a `forget` scrubbed the log after the live projections were folded (its
    /// rebuild failed or was interrupted): they still hold erased data until a replay.
    static func rebuildPending(_ db: Database) throws -> Bool {
        try Int.fetchOne(db, sql: "SELECT 1 FROM pending_rebuild") != nil
    }

    /// Finishes an erasure whose rebuild did not complete (a full disk, a kill).
    func finishPendingRebuild() throws(IdreconError) {
        guard try read({ db in try Self.rebuildPending(db) }) else { return }
        _ = try replay(comparing: false)
    }
}

/// Why the projections are rebuilt from the log, which decides whether the rebuild is compared
/// with the live projections and whether it is swapped in.
enum RebuildPurpose {
    /// `replay` (a `forget`'s too): rebuilt and swapped in; when `comparing`, compared with the
    /// live projections (caught up first) as well.
    case replay(comparing: Bool)
    /// `replay --verify`: rebuilt and compared only.
    case verify
    /// The live projections are so far behind the log that building them anew costs less
    /// than folding what they lack (`ProjectionEngine.bulkDue`): rebuilt and swapped in,
    /// with nothing to compare.
    case catchUp

    var compares: Bool {
        switch self {
        case .replay(let comparing): comparing
        case .verify: true
        case .catchUp: false
        }
    }

    var swaps: Bool {
        switch self {
        case .verify: false
        case .replay, .catchUp: true
        }
    }
}

/// What the live projections are a function of, besides the rules: the log's last event,
/// the last event the projections applied, their generation, and the log's erasures.
private struct LogVersion: Equatable {
    var lastSeq: Int64
    var appliedSeq: Int64
    var generation: Int
    /// ASIDs forgotten and events scrubbed so far: a forget rewrites logged events.
    var forgotten: [Int64]

    init(_ db: Database, _ registry: ProjectionRegistry) throws {
        lastSeq = try Int64.fetchOne(db, sql: "SELECT max(seq) FROM events") ?? 0
        let state = try ProjectionState.load(db, registry: registry)
        (appliedSeq, generation) = (state.appliedSeq, state.generation)
        let row = try Row.fetchOne(db, sql: "SELECT count(*), coalesce(sum(events), 0), coalesce(max(forgotten_at), 0) FROM forgotten")!
        forgotten = [row[0], row[1], row[2]]
    }
}

/// Has b-trees of the database (tables and indexes, by name) read into the kernel's page cache,
/// for a later step that reads them all to find cold pages there: the kernel is asked for their
/// pages (`BTreePages`), many at a time, while the disk idles, up to a quarter of the machine's
/// memory. Without a descriptor of the file to ask with, a reader visits every page (`dbstat`)
/// at idle priority, each b-tree in a transaction of its own, so that no read keeps the WAL from
/// being checkpointed for long (at the normal priority, the cached pages of a 10M log's
/// generation took ~1 s of CPU from the load; at idle priority, a cold generation was mostly
/// left to the swap: 1.1 GB read in 3 s at the end of a cold 10M replay). Stopped, it ends
/// between runs of pages.
private enum PageWarmer {
    static func start(_ pool: DatabasePool, bTrees: [String]) -> StoppableWork {
        StoppableWork { isStopped in
            var budget = Int(clamping: ProcessInfo.processInfo.physicalMemory / 4)
            for name in bTrees where !isStopped() && budget > 0 {
                if let pages = try pool.read({ db in try BTreePages(db, path: pool.path, bTree: name) }),
                   pages.forEachLeafRun({ _, run in
                       budget -= pages.bytes(run)
                       return !isStopped() && budget > 0 && pages.willNeed(run)
                   }) {
                    continue
                }
                ThreadPriority.yieldToOthers()
                try pool.read { db in
                    // A small page cache: the pages are read for the kernel's cache, not this connection's.
                    try db.withPageCache(kibibytes: 256) {
                        _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM dbstat WHERE name = ?", arguments: [name])
                    }
                }
            }
        }
    }
}
