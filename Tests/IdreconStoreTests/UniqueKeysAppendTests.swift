import Foundation
import GRDB
import IdreconDomain
import IdreconIngest
import IdreconLog
@testable import IdreconStore
import Testing

/// The append's verdicts on the log's unique keys when the first holder of a key is in the
/// open run, in a sealed run or in a merged one, seen by the writer that holds the runs and by
/// a new one (a new process: nothing cached). Runs of 7 keys merged 2 at a time, the first tier's
/// merges in the writer's transaction or in the background (`KeyRuns.MergeJob`).
@Suite struct UniqueKeysAppendTests {
    @Test(arguments: [1, 2], [false, true])
    func verdictsHoldWhateverRunHoldsTheKey(seed: UInt64, background: Bool) throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        let shape = KeyRuns.Shape(firstCapacity: 7, fanOut: 2, mergesInBackground: background)
        var store = try EventStore(path: path, projections: .standard, keyShape: shape)
        var rng = SeededGenerator(seed: seed)
        var logged: [(id: String, nonce: String)] = []
        var expected = (appended: 0, duplicates: 0, conflicts: 0, replays: 0)
        var got = expected
        var next = 0
        for round in 0..<40 {
            var lines: [String] = []
            var new: [(id: String, nonce: String)] = []
            for _ in 0..<(Int(rng.next() % 10) + 1) {
                let old = logged.isEmpty ? nil : logged[Int(rng.next() % UInt64(logged.count))]
                switch (rng.next() % 5, old) {
                case let (0, old?): // re-delivered
                    lines.append(eventLine(old.id, ["nonce": old.nonce]))
                    expected.duplicates += 1
                case let (1, old?): // the same event ID, another payload
                    lines.append(eventLine(old.id, ["nonce": old.nonce, "asid": "12"]))
                    expected.conflicts += 1
                case let (2, old?): // a new event reusing a logged nonce
                    next += 1
                    lines.append(eventLine("r-\(next)", ["nonce": old.nonce]))
                    expected.replays += 1
                default:
                    next += 1
                    let event = (id: "e-\(next)-\(rng.next() % 1000)", nonce: "n-\(next)")
                    lines.append(eventLine(event.id, ["nonce": event.nonce]))
                    new.append(event)
                    expected.appended += 1
                }
            }
            let outcome = try FileIngestor(store: store).ingest(path: dir.write("r\(round).jsonl", lines)).outcome
            got.appended += outcome.appended
            got.duplicates += outcome.duplicates
            got.conflicts += outcome.quarantined[.eventIDConflict] ?? 0
            got.replays += outcome.quarantined[.nonceReplay] ?? 0
            logged += new
            if round % 9 == 8 { store = try EventStore(path: path, projections: .standard, keyShape: shape) }
        }
        #expect(got == expected)
        let (sealed, tiers, keys, events) = try store.read { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM key_runs WHERE sealed")!,
             try Int.fetchOne(db, sql: "SELECT max(tier) FROM key_runs")!,
             try Int.fetchOne(db, sql: "SELECT sum(keys) FROM key_runs WHERE name = 'event_id_runs'")!,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM events")!)
        }
        #expect(sealed >= 2 && tiers >= (background ? 1 : 2) && keys == events)
    }

    /// A background merge whose runs another writer merged meanwhile is dropped, not written: the keys
    /// stay once each and every verdict holds. The first writer's merges start in its transactions (an
    /// ingest's append or its catch-up) and are written by the next: after `before` ingests the other
    /// writer comes while one is in flight or while none is (a print in the drop: three of the five).
    @Test(arguments: 2...6) func aBackgroundMergeOfRunsMergedMeanwhileIsDropped(before: Int) throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        let shape = KeyRuns.Shape(firstCapacity: 7, fanOut: 2, mergesInBackground: true)
        let background = try EventStore(path: path, projections: .standard, keyShape: shape)
        var next = 0
        func ingest(_ store: EventStore, _ count: Int) throws -> BatchOutcome {
            let lines = (0..<count).map { _ in
                next += 1
                return eventLine("e-\(next)", ["nonce": "n-\(next)"])
            }
            return try FileIngestor(store: store).ingest(path: dir.write("b\(next).jsonl", lines)).outcome
        }
        // A run sealed by each ingest; a merge of two started in the background.
        for _ in 0..<before { _ = try ingest(background, 8) }
        // Another writer (nothing cached, merging in its transactions) merges the same runs.
        let inTransaction = KeyRuns.Shape(firstCapacity: 7, fanOut: 2)
        let other = try EventStore(path: path, projections: .standard, keyShape: inTransaction)
        for _ in 0..<3 { _ = try ingest(other, 8) }
        // The first writer's merge is done now or soon; its runs are gone: dropped.
        for _ in 0..<4 { _ = try ingest(background, 8) }
        let again = (1...next).map { eventLine("e-\($0)", ["nonce": "n-\($0)"]) }
        let outcome = try FileIngestor(store: background).ingest(path: dir.write("again.jsonl", again)).outcome
        #expect(outcome.appended == 0 && outcome.duplicates == next)
        let (keys, distinct, events) = try background.read { db in
            (try Int.fetchOne(db, sql: "SELECT sum(keys) FROM key_runs WHERE name = 'event_id_runs'")!,
             try Int.fetchOne(db, sql: "SELECT count(DISTINCT run) FROM key_runs WHERE name = 'event_id_runs'")!,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM events")!)
        }
        #expect(keys == events && events == next && distinct >= 2)
    }
}
