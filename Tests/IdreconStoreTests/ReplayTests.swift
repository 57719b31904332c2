import Foundation
import GRDB
import IdreconDomain
import IdreconIngest
@testable import IdreconStore
import IdreconProjections
import Testing

@Suite struct ReplayTests {
    /// Two replays of one database at once (say a nightly replay and a forget's) take
    /// turns: both swap, and the result is the log's projections.
    @Test func concurrentReplaysTakeTurns() throws {
        var s = try Stream()
        try s.ingest((0..<400).map { i in
            Stream.login("e\(i)", day: 1 + Double(i) / 100, device: "d\(i % 60)", asid: "\(i % 90)", limited: i % 7 == 0,
                         extra: ["email": "p\(i % 30)@example.com"])
        }, batchSize: 50)
        let other = try EventStore(path: s.dir.path("db.sqlite"))
        for _ in 0..<3 {
            let second = Background { try other.replay(partitionSize: 150) }
            let first = try s.store.replay(partitionSize: 150)
            let report = try second.result().get()
            #expect(first.swapped && report.swapped)
            #expect(first.drift.isEmpty && report.drift.isEmpty)
            #expect(first.events == 400 && report.events == 400) // counted by the build, in partitions
        }
        try s.verifyReplay()
    }

    /// The log holds each event ID once (the append decides every key), but a row can be added
    /// to it by hand, with the `sqlite3` shell. Repeated rows are the same events again: a
    /// replay (in memory and in partitions), a late event's refold and the exports come out as
    /// without them. The devices' fold trapped on the repeated key before.
    @Test func rowsRepeatedByHandAreFoldedOnce() throws {
        var s = try Stream()
        var lines: [String] = []
        for i in 0..<240 {
            let device = "d\(i % 25)", day = 1 + Double(i) / 40
            lines.append(i % 11 == 5 ? Stream.logout("r\(i)", day: day, device: device)
                : Stream.login("r\(i)", day: day, device: device, asid: "\(i % 35)", limited: i % 3 == 0,
                               extra: ["email": "p\(i % 20)@example.com", "friend_asids": ["\((i + 1) % 35)"]]))
        }
        try s.ingest(lines, batchSize: 40)
        let digests = try s.store.projectionDigests()
        let exports = try ExportKind.allCases.map { try s.export($0) }
        try s.store.write { db in
            for seq in [1, 2, 6, 17, 100, 239] as [Int64] { // logins, limited ones, a logout
                try db.execute(sql: """
                    INSERT INTO event_payloads (seq, payload) SELECT (SELECT max(seq) + 1 FROM events), payload
                    FROM event_payloads WHERE seq = ?;
                    INSERT INTO events SELECT (SELECT max(seq) + 1 FROM events), event_id, type, occurred_at, app_id,
                        device_id, asid, tracking, nonce, device_key, asid_key, link_email, link_tfb, friends,
                        declines_friends, source_id, position + 1000 FROM events WHERE seq = ?;
                    """, arguments: [seq, seq])
            }
        }
        for partitionSize in [Int.max, 60] {
            let report = try s.store.replay(partitionSize: partitionSize)
            #expect(report.swapped && report.drift.isEmpty)
            #expect(report.events == 246) // every row, the repeated ones too, in memory and in partitions
            #expect(try s.store.projectionDigests() == digests)
        }
        #expect(try ExportKind.allCases.map { try s.export($0) } == exports)
        // A late event on a device and of an ASID whose rows are repeated: both fold again from the log.
        try s.ingest([Stream.login("late", day: 1.01, device: "d1", asid: "1", limited: true)])
        try s.verifyReplay()
    }

    /// A writer that is released leaves the WAL checkpointed and empty even while another
    /// connection keeps the database open: SQLite deletes the WAL at close only for the last
    /// connection, and readers that come later would look each page up in what it left.
    @Test func aReleasedWriterLeavesTheWALEmpty() throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        var reader: DatabaseQueue?
        do {
            let store = try EventStore(path: path)
            var readOnly = Configuration()
            readOnly.readonly = true
            reader = try DatabaseQueue(path: path, configuration: readOnly)
            let lines = (0..<300).map { i in Stream.login("w\(i)", day: 1 + Double(i) / 100, device: "d\(i % 40)", asid: "\(i % 70)") }
            _ = try FileIngestor(store: store, batchSize: 50).ingest(path: dir.write("w.jsonl", lines))
            _ = try store.replay()
            let walBytes = try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int ?? 0
            #expect(walBytes > 0)
        }
        let walBytes = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        #expect(walBytes == 0)
        #expect(try reader?.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM events") } == 300)
    }

    /// The log's device and ASID indexes lead with the event's tier (`seq >> 18`): a late
    /// event's refold and an as-of access answer find events in every tier, not only the newest.
    @Test func lookupsSpanEveryTierOfTheLog() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a1", day: 1, device: "D", asid: "500", limited: true),
            Stream.login("a3", day: 3, device: "D", asid: "500"),
            Stream.login("b1", day: 1, device: "F", asid: "502"),
        ])
        // The next events land two tiers later (seq 600,000 and on).
        try s.store.write { db in
            try db.execute(sql: """
                INSERT INTO events (seq, event_id, type, occurred_at, app_id, device_id, device_key, source_id, position)
                VALUES (600000, 'pad', 'logout', 0, 'pad', 'pad', 0, (SELECT min(id) FROM sources), 0);
                INSERT INTO event_payloads (seq, payload) VALUES (600000, '{}');
                """)
        }
        // Late for device D: its fold must start again from a1 and a3, two tiers back.
        try s.ingest([Stream.login("a2", day: 2, device: "D", asid: "501", limited: true)])
        #expect(try s.store.device(app: "1", device: "D")?.logins == 3)
        #expect(try s.access("502", 1.5) == .allowed)
        #expect(try s.access("501", 2.5) == .forbiddenLimited)
        #expect(try s.access("500", 3.5) == .allowed)
        try s.verifyReplay()
    }

    /// A forget that commits while a replay folds the log it read before: the replay starts
    /// over instead of swapping in projections with the erased links.
    @Test func replayOvertakenByForgetStartsOver() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, device: "P", asid: "300", extra: ["email": "zed@forget.me"]),
            Stream.login("b", day: 2, device: "Q", asid: "301", extra: ["email": "zed@forget.me"]),
            Stream.login("c", day: 3, device: "R", asid: "302", extra: ["email": "ann@example.com"]),
        ])
        let other = try EventStore(path: s.dir.path("db.sqlite"))
        var forget: Background<ForgetReport>?
        let report = try s.store.replay { _, _ in
            guard forget == nil else { return }
            forget = Background { try other.forget("300") }
            // Wait (outside any transaction of this replay) until the forget has scrubbed the log.
            let deadline = Date().addingTimeInterval(20)
            while (try? other.read({ db in try Int.fetchOne(db, sql: "SELECT count(*) FROM forgotten") })) == 0, Date() < deadline {
                usleep(10_000)
            }
        }
        let forgot = try #require(forget).result()
        #expect(try forgot.get().events == 2)
        #expect(report.swapped)
        // What this replay swapped in is already the scrubbed log's projections.
        #expect(report.rebuilt == (try s.store.projectionDigests()))
        #expect(try s.store.userID(asid: "301") == "u:301")
    }
}

@Suite struct SpilledScanTests {
    /// Texts that are not valid UTF-8 (written by another program) are folded as the decoded
    /// scan repairs them: a replay in many partitions (its scan spills from SQLite's bytes) equals
    /// a replay in one partition (its scan decodes every row).
    @Test func invalidUTF8IsSpilledAsTheDecodedScanReadsIt() throws {
        var s = try Stream()
        var lines: [String] = []
        for i in 0..<120 {
            let limited = i % 3 == 0
            let friends: [String: any Sendable] = [
                "friend_asids": ["\(1000 + (i + 1) % 30)", "\(2000 + i)"], "granted_permissions": ["public_profile", "user_friends"],
            ]
            lines.append(Stream.login("ev-1-\(i)", day: 1 + Double(i) / 100, device: "d\(i % 20)", asid: "\(1000 + i % 30)",
                                      limited: limited, extra: limited ? [:] : friends))
        }
        try s.ingest(lines, batchSize: 40)
        try s.store.write { db in
            try db.execute(sql: "UPDATE events SET device_id = CAST(X'64FF' AS TEXT) WHERE seq % 7 = 0")
            try db.execute(sql: "UPDATE events SET friends = CAST(X'313030C32C32303030' AS TEXT) WHERE seq % 11 = 0")
        }
        let spilled = try s.store.replay(verifyOnly: true, partitionSize: 30)
        let decoded = try s.store.replay(verifyOnly: true, partitionSize: 100_000)
        #expect(spilled.rebuilt == decoded.rebuilt)
        #expect(spilled.rebuilt.count == decoded.rebuilt.count && !spilled.rebuilt.isEmpty)
    }
}

@Suite struct PartitionWeightTests {
    /// A log whose texts are heap objects (UUID event IDs, long friend lists) is split into
    /// more partitions, so a partition's memory stays what the configuration sets; a log
    /// like the bench's stream (short IDs, short lists) weighs 1, and its replay is split as
    /// before. The replays still equal the live projections.
    @Test func largerEventsMakeMorePartitionsAndTheSameProjections() throws {
        func weight(_ id: (Int) -> String, friends: Int) throws -> Double {
            var s = try Stream()
            try s.ingest((0..<200).map { i in
                Stream.login(id(i), day: 1 + Double(i) / 100, device: "d\(i % 20)", asid: "\(1000 + i % 30)",
                             extra: friends > 0 ? ["friend_asids": (0..<friends).map { "\(5000 + i + $0)" },
                                                   "granted_permissions": ["public_profile", "user_friends"]] : [:])
            }, batchSize: 50)
            let w = try s.store.read { db in try ProjectionBuilder.memoryWeight(db, seqs: 1...200) }
            try s.verifyReplay()
            let report = try s.store.replay(verifyOnly: true, partitionSize: 60)
            #expect(report.drift.isEmpty)
            return w
        }
        #expect(try weight({ "ev-1-\($0)" }, friends: 3) == 1)
        let uuids = try weight({ i in "0000000\(i % 10)-0ff0-4954-a19f-b2adec\(String(format: "%06d", i))" }, friends: 3)
        #expect(uuids > 1.15)
        #expect(try weight({ "ev-1-\($0)" }, friends: 30) > 2)
    }
}
