import Foundation
import GRDB
import IdreconDomain
import IdreconProjections

/// Counts over the whole log, for `idrecon stats`.
public struct LogStats: Sendable, Codable, Equatable {
    public var events: Int
    public var logins: Int
    public var logouts: Int
    public var limitedLogins: Int
    public var enabledLogins: Int
    public var apps: Int
    public var devices: Int
    public var asids: Int
    public var duplicates: Int
    public var quarantined: Int
    public var quarantinedByCode: [String: Int]
    public var firstEventAt: Int64?
    public var lastEventAt: Int64?
    public var positions: [ConsumedPosition]
    public var databaseBytes: Int64
    /// Source records never read because the source no longer held them (see `SkippedRange`).
    public var skippedRecords: Int64 = 0
}

extension EventStore {
    public func stats() throws(IdreconError) -> LogStats {
        try read { db in
            let row = try Row.fetchOne(db, sql: """
                SELECT count(*) AS events,
                       coalesce(sum(type = 'login'), 0) AS logins,
                       coalesce(sum(type = 'logout'), 0) AS logouts,
                       coalesce(sum(tracking = 'limited'), 0) AS limited,
                       coalesce(sum(tracking = 'enabled'), 0) AS enabled,
                       min(occurred_at) AS first, max(occurred_at) AS last
                FROM events
                """)!
            var byCode: [String: Int] = [:]
            for r in try Row.fetchAll(db, sql: "SELECT code, count(*) AS n FROM quarantine GROUP BY code") {
                byCode[r["code"]] = r["n"]
            }
            return LogStats(
                events: row["events"], logins: row["logins"], logouts: row["logouts"],
                limitedLogins: row["limited"], enabledLogins: row["enabled"],
                apps: try Int.fetchOne(db, sql: "SELECT count(DISTINCT app_id) FROM events")!,
                devices: try Int.fetchOne(db, sql: "SELECT count(*) FROM (SELECT DISTINCT app_id, device_id FROM events)")!,
                asids: try Int.fetchOne(db, sql: "SELECT count(DISTINCT asid) FROM events")!,
                duplicates: try Int.fetchOne(db, sql: "SELECT value FROM counters WHERE name = 'duplicates'") ?? 0,
                quarantined: byCode.values.reduce(0, +), quarantinedByCode: byCode,
                firstEventAt: row["first"], lastEventAt: row["last"],
                positions: try ConsumedPosition.order(Column("source")).fetchAll(db),
                databaseBytes: databaseBytes(),
                skippedRecords: try Int64.fetchOne(db, sql: """
                    SELECT coalesce(sum(last_position - first_position + 1), 0) FROM skipped_ranges
                    """) ?? 0
            )
        }
    }

    /// Quarantine entries in id order, optionally of one code.
    public func quarantineEntries(code: ReasonCode? = nil, limit: Int? = nil, afterID: Int64 = 0) throws(IdreconError) -> [QuarantineEntry] {
        try read { db in
            var sql = "SELECT * FROM quarantine WHERE id > ?"
            var arguments: StatementArguments = [afterID]
            if let code { sql += " AND code = ?"; arguments += [code.rawValue] }
            sql += " ORDER BY id"
            if let limit { sql += " LIMIT \(limit)" }
            return try QuarantineEntry.fetchAll(db, sql: sql, arguments: arguments)
        }
    }

    public func quarantineEntry(id: Int64) throws(IdreconError) -> QuarantineEntry? {
        try read { db in try QuarantineEntry.fetchOne(db, sql: "SELECT * FROM quarantine WHERE id = ?", arguments: [id]) }
    }

    /// Every logged event as (event_id, canonical payload) in sequence order.
    public func eventPayloads() throws(IdreconError) -> [(eventID: String, payload: String)] {
        try read { db in
            try Row.fetchAll(db, sql: """
                SELECT event_id, payload FROM events JOIN event_payloads USING (seq) ORDER BY seq
                """).map { ($0["event_id"], $0["payload"]) }
        }
    }
}

extension EventStore {
    /// The log's last sequence number, the last one the projections applied, and the
    /// database's bytes on disk (with its WAL): cheap enough for every metrics scrape.
    public func logPosition() throws(IdreconError) -> (lastSeq: Int64, appliedSeq: Int64, bytes: Int64) {
        let (last, applied) = try read { db in try Self.sequences(db) }
        return (last, applied, databaseBytes())
    }

    /// The log's last sequence number and the last one the projections applied, in `db`'s
    /// transaction.
    static func sequences(_ db: Database) throws -> (lastSeq: Int64, appliedSeq: Int64) {
        (try BulkStatement(cached: db, "SELECT coalesce(max(seq), 0) FROM events").first({ _ in }, { $0.int(0) }) ?? 0,
         try BulkStatement(cached: db, "SELECT applied_seq FROM projection_meta").first({ _ in }, { $0.int(0) }) ?? 0)
    }

    /// Bytes of the database file and its WAL on disk.
    public func databaseBytes() -> Int64 {
        ["", "-wal"].reduce(0) { total, suffix in
            var info = stat()
            return stat(path + suffix, &info) == 0 ? total + Int64(info.st_size) : total
        }
    }

    /// Whether this process may write the database, its WAL and its directory.
    public func isWritable() -> Bool {
        let directory = (path as NSString).deletingLastPathComponent
        return Glibc.access(path, W_OK) == 0 && Glibc.access(directory.isEmpty ? "." : directory, W_OK) == 0
            && (Glibc.access(path + "-wal", F_OK) != 0 || Glibc.access(path + "-wal", W_OK) == 0)
    }

    /// Records that `source` skipped positions `first...last` (idempotent: a range found
    /// again after a restart is stored once).
    public func recordSkipped(_ range: SkippedRange) throws(IdreconError) {
        try write { db in try range.insert(db, onConflict: .ignore) }
    }

    /// Every skipped range, by source and position.
    public func skippedRanges() throws(IdreconError) -> [SkippedRange] {
        try read { db in try SkippedRange.order(Column("source"), Column("first_position")).fetchAll(db) }
    }

    /// Re-validates quarantined records (oldest first, optionally of one code) with
    /// `validate`, appending those that now pass in their original order and updating the
    /// reason of those that still fail. Returns what the retry did.
    public func retryQuarantine(
        code: ReasonCode? = nil, batchSize: Int = 2000, validate: ([UInt8]) -> Result<LoginEvent, Rejection>
    ) throws(IdreconError) -> BatchOutcome {
        var total = BatchOutcome()
        var after: Int64 = 0
        while true {
            let page = try quarantineEntries(code: code, limit: batchSize, afterID: after)
            guard let last = page.last else { break }
            after = last.id
            // An oversized record kept only in part cannot pass; its reason stays as it was.
            let records = page.filter { !RecordSize.isOversizeRejection($0.message) }.map { entry in
                IncomingRecord(
                    raw: entry.raw,
                    origin: RecordOrigin(source: entry.source, position: entry.position, partition: entry.partition, key: entry.recordKey),
                    validation: validate(entry.raw),
                    quarantineID: entry.id)
            }
            total.add(try append(records, positions: []))
        }
        return total
    }
}
