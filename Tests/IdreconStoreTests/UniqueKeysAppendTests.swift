import Foundation
import GRDB
import IdreconDomain
import IdreconIngest
import IdreconLog
@testable import IdreconStore
import Testing

/// The append's verdicts on the log's unique keys when the first holder of a key is in the
/// open run, in a sealed run or in a merged one, seen by the writer that holds the runs and by
/// a new one (a new process: nothing cached). Runs of 7 keys merged 2 at a time.
@Suite struct UniqueKeysAppendTests {
    /// The third with a covering filter that may not grow past one block (51 keys): the runs past it
    /// are checked by their own filters.
    @Test(arguments: zip([1, 2, 3] as [UInt64], [1 << 28, 1 << 28, 512]))
    func verdictsHoldWhateverRunHoldsTheKey(seed: UInt64, coveringBits: Int) throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        let shape = KeyRuns.Shape(firstCapacity: 7, fanOut: 2, coveringBits: coveringBits)
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
        #expect(sealed >= 2 && tiers >= 2 && keys == events)
    }
}
