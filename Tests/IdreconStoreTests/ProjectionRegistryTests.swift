import Foundation
import GRDB
import IdreconDomain
import IdreconIngest
import IdreconProjections
@testable import IdreconStore
import Testing

/// A projection registered from outside the built-in four (`DailyActiveProjection`, one file)
/// builds itself on a database that already has the others, follows the log live, is built
/// by replay like the others, and survives writers that do not register it.
@Suite struct ProjectionRegistryTests {
    static let withDailyActive = ProjectionRegistry.standard.adding(DailyActiveProjection.self)

    /// Logins over four days and two apps, out of event-time order, with e-mail addresses that
    /// merge ASIDs into identities; and some logouts.
    static func lines(_ range: Range<Int>) -> [String] {
        range.map { i in
            i % 11 == 0
                ? Stream.logout("e\(i)", day: 1 + Double((i * 37) % 400) / 100, app: "\(1 + i % 2)", device: "d\(i % 50)")
                : Stream.login("e\(i)", day: 1 + Double((i * 37) % 400) / 100, app: "\(1 + i % 2)", device: "d\(i % 50)",
                               asid: "\(100 + i % 40)", limited: i % 5 == 0, extra: ["email": "p\(i % 25)@example.com"])
        }
    }

    /// Identities per app and day computed from the log and today's identities, apart from
    /// the projection.
    static func expected(_ db: Database) throws -> [String] {
        try Row.fetchAll(db, sql: """
            SELECT e.app_id, date(e.occurred_at / 1000, 'unixepoch') AS day, count(DISTINCT a.user_id) AS identities
            FROM events e JOIN asids a ON a.asid = e.asid WHERE e.type = 'login'
            GROUP BY 1, 2 ORDER BY 1, 2
            """).map { "\($0["app_id"] as String) \($0["day"] as String) \($0["identities"] as Int)" }
    }

    static func check(_ store: EventStore) throws {
        let answers: [String] = try store.read { db in try DailyActiveProjection.dailyActiveIdentities(db) }
        let fromLog: [String] = try store.read { db in try Self.expected(db) }
        #expect(!answers.isEmpty)
        #expect(answers == fromLog)
        let rows: [String] = try store.read { db in
            try String.fetchAll(db, sql: "SELECT app_id || ' ' || day || ' ' || asid FROM daily_active_asids ORDER BY app_id, day, asid")
        }
        let rowsFromLog: [String] = try store.read { db in
            try String.fetchAll(db, sql: """
                SELECT DISTINCT app_id || ' ' || date(occurred_at / 1000, 'unixepoch') || ' ' || asid FROM events
                WHERE type = 'login' ORDER BY app_id, date(occurred_at / 1000, 'unixepoch'), asid
                """)
        }
        #expect(rows == rowsFromLog)
    }

    static func cursors(_ store: EventStore) throws -> [String: Int64] {
        try store.read { db in try ProjectionState.load(db, registry: .standard).cursors }
    }

    @Test func aNewProjectionBuildsItselfWithoutRebuildingTheOthers() throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        var parts = 0
        func ingest(_ store: EventStore, _ lines: [String], batchSize: Int) throws {
            parts += 1
            let summary = try FileIngestor(store: store, batchSize: batchSize).ingest(path: dir.write("part\(parts).jsonl", lines))
            #expect(summary.outcome.quarantinedTotal == 0)
        }

        // A database of the built-in projections.
        let plain = try EventStore(path: path)
        try ingest(plain, Self.lines(0..<300), batchSize: 40)
        let before = try plain.projectionDigests()
        let generation = try plain.read { db in try ProjectionState.load(db, registry: .standard).generation }

        // Opened with the new projection registered: it is folded from the log; the others are
        // left as they were (same generation, same rows).
        let extended = try EventStore(path: path, projections: Self.withDailyActive)
        let after = try extended.projectionDigests()
        #expect(after.filter { before[$0.key] != nil } == before)
        #expect(Set(after.keys) == Set(before.keys).union(["daily_active_asids"]))
        #expect(try extended.read { db in try ProjectionState.load(db, registry: .standard).generation } == generation)
        try Self.check(extended)

        // It follows the log live (late events included), and replay builds the same rows.
        try ingest(extended, Self.lines(300..<500), batchSize: 30)
        try Self.check(extended)
        let verified = try extended.replay(verifyOnly: true)
        #expect(verified.drift.isEmpty, "drift: \(verified.drift)")
        #expect(verified.rebuilt["daily_active_asids"] != nil)

        // A writer that does not register it leaves it behind (its cursor says how far it is);
        // the next writer that registers it brings it level.
        try ingest(plain, Self.lines(500..<600), batchSize: 25)
        let behind = try Self.cursors(plain)
        #expect(behind["daily_active"]! < behind["devices"]!)
        let reopened = try EventStore(path: path, projections: Self.withDailyActive)
        let level = try Self.cursors(reopened)
        #expect(level["daily_active"] == level["devices"])
        try Self.check(reopened)

        // A replay by a writer that does not register it drops its tables; registering it
        // again builds it again, and a replay that registers it swaps in the same rows.
        #expect(try plain.replay().swapped)
        #expect(try plain.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE name LIKE 'daily_active%'") } == 0)
        #expect(try Self.cursors(plain)["daily_active"] == nil)
        let again = try EventStore(path: path, projections: Self.withDailyActive)
        try Self.check(again)
        let live = try again.projectionDigests()
        let report = try again.replay()
        #expect(report.swapped && report.drift.isEmpty)
        #expect(try again.projectionDigests() == live)
        try Self.check(again)
    }
}
