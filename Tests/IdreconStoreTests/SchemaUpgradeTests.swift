import Foundation
import GRDB
import IdreconDomain
import IdreconIngest
@testable import IdreconStore
import Testing

/// A database made by the first shipped schema upgrades with today's migrations, and its
/// log gives the same projections as today's ingest of the same records.
@Suite struct SchemaUpgradeTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    @Test func firstShippedSchemaUpgradesAndReplays() throws {
        let dir = TempDir()
        let old = dir.path("old.sqlite")
        let script = try String(contentsOf: Self.fixtures.appendingPathComponent("v1-event-log.sql"), encoding: .utf8)
        try DatabaseQueue(path: old).writeWithoutTransaction { try $0.execute(sql: script) }

        let upgraded = try EventStore(path: old)
        let applied = try DatabaseQueue(path: old).read { try String.fetchAll($0, sql: "SELECT identifier FROM grdb_migrations") }
        #expect(Set(applied) == Set(Schema.migrator.migrations))
        #expect(try upgraded.read { db in try logKeysKept(db) })
        _ = try upgraded.replay()

        let fresh = try EventStore(path: dir.path("fresh.sqlite"))
        _ = try FileIngestor(store: fresh).ingest(path: Self.fixtures.appendingPathComponent("v1-event-log.jsonl").path)
        #expect(try upgraded.eventPayloads().map(\.payload) == fresh.eventPayloads().map(\.payload))
        #expect(try upgraded.stats().quarantinedByCode == fresh.stats().quarantinedByCode)
        #expect(try upgraded.projectionDigests() == fresh.projectionDigests())

        // The upgraded database takes new records (appended, quarantined) and stays consistent.
        let more = dir.write("more.jsonl", [eventLine("after-upgrade"), "{not json", eventLine("after-upgrade")])
        let summary = try FileIngestor(store: upgraded).ingest(path: more)
        #expect(summary.outcome.appended == 1 && summary.outcome.duplicates == 1 && summary.outcome.quarantinedTotal == 1)
        #expect(try upgraded.replay(verifyOnly: true).drift.isEmpty)
        #expect(try upgraded.read { db in try logKeysKept(db) })

        // The nonces moved to sorted runs (v15): an old nonce under a new event ID is a replay.
        let logged = try Data(contentsOf: Self.fixtures.appendingPathComponent("v1-event-log.jsonl"))
        let replayed = String(decoding: logged.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
            .replacingOccurrences(of: #""event_id":"ev-9-7""#, with: #""event_id":"replayed""#)
        let replay = try FileIngestor(store: upgraded).ingest(path: dir.write("replay.jsonl", [replayed]))
        #expect(replay.outcome.quarantined == [.nonceReplay: 1])
        let message = try upgraded.read { db in
            try String.fetchOne(db, sql: "SELECT message FROM quarantine WHERE event_id = 'replayed'")
        }
        #expect(message == "nonce already used by event 'ev-9-7' of app 1001")

        // So did the event IDs (v16): an old event again is a duplicate, changed a conflict.
        let original = String(decoding: logged.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        let changed = original.replacingOccurrences(of: #""device_id":"dev-4b6a548c3""#, with: #""device_id":"other""#)
        let again = try FileIngestor(store: upgraded).ingest(path: dir.write("again.jsonl", [original, changed]))
        #expect(again.outcome.duplicates == 1 && again.outcome.quarantined == [.eventIDConflict: 1])
        let (runs, events) = try upgraded.read { db in
            (try Int.fetchOne(db, sql: "SELECT sum(keys) FROM key_runs WHERE name = 'event_id_runs'"),
             try Int.fetchOne(db, sql: "SELECT count(*) FROM events"))
        }
        #expect(runs == events)
    }

    /// A database idrecon creates has `pageSizeBytes` pages; one made before (SQLite's default
    /// 4 KiB) keeps its own. Both checkpoint at the same WAL size in bytes (the writer's setting:
    /// a read-only connection never commits, so it has none of the settings of writes).
    @Test func newDatabasesTakeLargerPagesAndOldOnesKeepTheirs() throws {
        let dir = TempDir()
        let old = dir.path("old.sqlite")
        let script = try String(contentsOf: Self.fixtures.appendingPathComponent("v1-event-log.sql"), encoding: .utf8)
        try DatabaseQueue(path: old).writeWithoutTransaction { try $0.execute(sql: script) }
        for (path, pageSize) in [(dir.path("new.sqlite"), EventStore.pageSizeBytes), (old, 4096)] {
            let store = try EventStore(path: path)
            _ = try FileIngestor(store: store).ingest(path: dir.write("one-\(pageSize).jsonl", [eventLine("pages")]))
            let (size, interval) = try store.write { db in
                (try Int.fetchOne(db, sql: "PRAGMA page_size"), try Int.fetchOne(db, sql: "PRAGMA wal_autocheckpoint"))
            }
            #expect(size == pageSize && interval == EventStore.walAutocheckpointBytes / pageSize)
        }
    }

    /// A database whose live projections predate the access history (v8) gets it filled
    /// from the events they had folded: equal to what a replay builds, and it keeps folding.
    @Test func accessHistoryMigrationFillsTheLiveGeneration() throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        let lines = generatedLines(seed: 7, events: 400)
        do {
            let store = try EventStore(path: path)
            _ = try store.replay() // a generation other than the first
            try ingest(Array(lines[..<300]), into: store, dir: dir, batchSize: 40)
        }
        try DatabaseQueue(path: path).write { db in
            let g = try Int.fetchOne(db, sql: "SELECT generation FROM projection_meta")!
            try db.execute(sql: """
                DROP VIEW asid_last_logins; DROP VIEW asid_limited_spans;
                DROP TABLE asid_last_logins_g\(g); DROP TABLE asid_limited_spans_g\(g);
                DELETE FROM grdb_migrations WHERE identifier = 'v8-access-history';
                """)
        }
        let upgraded = try EventStore(path: path)
        #expect(try upgraded.replay(verifyOnly: true).drift.isEmpty)
        try ingest(Array(lines[300...]), into: upgraded, dir: dir, batchSize: 40)
        #expect(try upgraded.replay(verifyOnly: true).drift.isEmpty)
    }

    /// Every quarantine reason code the code knows is accepted by the schema a database has.
    @Test func everyReasonCodeFitsTheSchema() throws {
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"))
        let records = ReasonCode.allCases.enumerated().map { i, code in
            IncomingRecord(raw: [UInt8(ascii: "x")], origin: RecordOrigin(source: "test", position: Int64(i)),
                           validation: .failure(Rejection(code, "test")))
        }
        let outcome = try store.append(records, positions: [])
        #expect(outcome.quarantinedTotal == ReasonCode.allCases.count)
    }

    /// Shipped migrations are literal SQL: they name none of today's types, whose changes
    /// (a new reason code, a projection column) would silently change what they create.
    @Test func migrationsDependOnNoApplicationType() throws {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/IdreconLog/Schema.swift")
        let text = try String(contentsOf: source, encoding: .utf8)
        for name in ["ReasonCode", "ProjectionTables", "IdentityConfig", "JSONEncoder", "allCases", "\\("] {
            #expect(!text.contains(name), "Schema.swift uses \(name)")
        }
    }
}
