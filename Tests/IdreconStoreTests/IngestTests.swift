import EventGenerator
import Foundation
import IdreconDomain
import IdreconIngest
import IdreconLog
import IdreconProjections
@testable import IdreconStore
import Testing

@Suite struct IngestTests {
    /// The log's keys are the append's, bulk or not: after a bulk ingest, projections left
    /// behind (a writer killed before its catch-up or build), another writer's open and a
    /// replay, they find every event of each device and every login of each ASID.
    @Test func logKeysAreKeptThroughABulkIngestAKillAndAReplay() throws {
        func keysKept(_ store: EventStore) throws -> Bool { try store.read { db in try logKeysKept(db) } }
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"))
        var ingestor = FileIngestor(store: store, chunkSize: 2)
        ingestor.bulkFrom = 1
        _ = try ingestor.ingest(path: dir.write("a.jsonl", (1...5).map { eventLine("e\($0)") }))
        #expect(try keysKept(store))
        #expect(try store.logPosition().appliedSeq == 5)

        // Projections left behind: running the same ingest again, which appends nothing, brings them up.
        var taken = false
        let more = BatchValidator.validate((6...8).map { (Array(eventLine("e\($0)").utf8), RecordOrigin(source: "t", position: Int64($0))) })
        _ = try store.appendBatches(projectionLag: .max) { defer { taken = true }; return taken ? nil : (more, []) }
        #expect(try store.logPosition().appliedSeq == 5)
        #expect(try keysKept(store))
        let next = try EventStore(path: dir.path("db.sqlite"))
        #expect(try keysKept(next))
        _ = try ingestor.ingest(path: dir.path("a.jsonl"))
        #expect(try store.logPosition().appliedSeq == 8)

        let later = BatchValidator.validate((9...12).map {
            (Array(eventLine("e\($0)").utf8), RecordOrigin(source: "t", position: Int64($0)))
        })
        taken = false
        _ = try store.appendBatches(projectionLag: .max) { defer { taken = true }; return taken ? nil : (later, []) }
        let replayed = try EventStore(path: dir.path("db.sqlite")).replay(comparing: false)
        #expect(replayed.events == 12)
        #expect(try keysKept(store))
        #expect(try store.replay(verifyOnly: true).drift.isEmpty)
    }

    /// A late event's refold finds the events of its device and the logins of its ASID in the
    /// open run, in sealed runs and in merged ones, from the writer that holds them and from a
    /// new one (nothing cached): the live projections equal a replay's. Runs of 5 keys merged 2
    /// at a time; late events are a third of the stream, some before every event of their device.
    @Test(arguments: [1, 2, 3])
    func lateEventsRefoldFromWhicheverRunsHoldTheirEntity(seed: UInt64) throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        let shape = KeyRuns.Shape(firstCapacity: 5, fanOut: 2)
        var store = try EventStore(path: path, projections: .standard, keyShape: shape)
        var rng = SeededGenerator(seed: seed)
        var n = 0
        for round in 0..<30 {
            var lines: [String] = []
            for _ in 0..<(Int(rng.next() % 6) + 1) {
                n += 1
                let device = "D\(rng.next() % 4)", asid = "1\(rng.next() % 5)"
                // Mostly in order, a third late (anywhere in the days before).
                let day = rng.next() % 3 == 0 ? 1 + Double(rng.next() % 1000) / 100 : 1 + Double(n) / 20
                lines.append(rng.next() % 5 == 0
                    ? Stream.logout("e\(n)", day: day, device: device)
                    : Stream.login("e\(n)", day: day, device: device, asid: asid, limited: rng.next() % 2 == 0))
            }
            #expect(try appendFolding(store, lines, after: n) == lines.count)
            if round % 7 == 6 { store = try EventStore(path: path, projections: .standard, keyShape: shape) }
        }
        #expect(try store.read { db in try logKeysKept(db) })
        let (sealed, tiers) = try store.read { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM key_runs WHERE sealed AND name = 'device_key_runs'")!,
             try Int.fetchOne(db, sql: "SELECT max(tier) FROM key_runs WHERE name = 'login_key_runs'")!)
        }
        #expect(sealed >= 2 && tiers >= 1)
        #expect(try store.replay(verifyOnly: true).drift.isEmpty)
    }

    /// A late event of a device or an ASID with a long history refolds from the entity's
    /// checkpoint when the log shows it holds, and from its first event when an event older than
    /// the checkpoint came in since: the live projections equal a replay's throughout, and each
    /// entity keeps a checkpoint behind its latest events.
    @Test(arguments: [4, 5])
    func lateEventsRefoldFromTheirEntitysCheckpoint(seed: UInt64) throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        var store = try EventStore(path: path, projections: .standard)
        var rng = SeededGenerator(seed: seed)
        var n = 0
        for round in 0..<160 {
            var lines: [String] = []
            for _ in 0..<(Int(rng.next() % 5) + 1) {
                n += 1
                let device = "D\(rng.next() % 3)", asid = "1\(rng.next() % 2)"
                // Mostly in order; late ones mostly a little late (behind the checkpoint's lag or
                // not), a few before every login of their ASID.
                let lateness = rng.next() % 4 == 0 ? Double(rng.next() % 200) / 20 : 0
                let day = max(0.001, 1 + Double(n) / 20 - lateness)
                lines.append(rng.next() % 9 == 0
                    ? Stream.logout("e\(n)", day: day, device: device)
                    : Stream.login("e\(n)", day: day, device: device, asid: asid, limited: rng.next() % 3 == 0))
            }
            #expect(try appendFolding(store, lines, after: n) == lines.count)
            if round % 40 == 39 {
                #expect(try store.replay(verifyOnly: true).drift.isEmpty)
                store = try EventStore(path: path, projections: .standard)
            }
        }
        let (asids, devices) = try store.read { db in
            (try Int.fetchOne(db, sql: """
                SELECT count(*) FROM asid_fold_checkpoints c
                WHERE c.from_seq > (SELECT min(seq) FROM events e WHERE e.asid = c.asid)
                  AND (SELECT count(*) FROM events e WHERE e.asid = c.asid AND (e.occurred_at, e.event_id) > (c.last_at, c.last_event)) >= 64
                """)!,
             try Int.fetchOne(db, sql: """
                SELECT count(*) FROM device_fold_checkpoints c
                WHERE (SELECT count(*) FROM events e WHERE e.device_id = c.device_id
                         AND (e.occurred_at, e.event_id) > (c.last_at, c.last_event)) >= 64
                """)!)
        }
        #expect(asids == 2 && devices == 3)
        #expect(try store.replay(verifyOnly: true).drift.isEmpty)
    }

    /// Late events at every depth (1 to 1,000 events back) into entities with histories long
    /// enough for several checkpoint levels: refolds from whichever level holds, void ones
    /// dropped and rewritten; the live projections equal a replay's throughout.
    @Test(arguments: [6, 7])
    func lateEventsAtEveryDepthRefoldAsAReplayFolds(seed: UInt64) throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        var store = try EventStore(path: path, projections: .standard)
        var rng = SeededGenerator(seed: seed)
        var n = 0
        for round in 0..<300 {
            var lines: [String] = []
            for _ in 0..<(Int(rng.next() % 8) + 1) {
                n += 1
                let device = "D\(rng.next() % 2)", asid = rng.next() % 5 == 0 ? "12" : "11"
                // A third late, up to 1,000 events back halved 0 to 9 times: a few back as often as hundreds.
                let back = rng.next() % 3 == 0 ? Double(rng.next() % 1000 + 1) / Double(1 << (rng.next() % 10)) : 0
                let day = max(0.001, 1 + (Double(n) - back) / 20)
                lines.append(rng.next() % 9 == 0
                    ? Stream.logout("e\(n)", day: day, device: device)
                    : Stream.login("e\(n)", day: day, device: device, asid: asid, limited: rng.next() % 3 == 0))
            }
            #expect(try appendFolding(store, lines, after: n) == lines.count)
            if round % 100 == 99 {
                #expect(try store.replay(verifyOnly: true).drift.isEmpty)
                store = try EventStore(path: path, projections: .standard)
            }
        }
        let levels = try store.read { db in
            try Int.fetchOne(db, sql: "SELECT count(DISTINCT level) FROM asid_fold_checkpoints WHERE asid = '11'")!
        }
        #expect(levels >= 2)
        #expect(try store.replay(verifyOnly: true).drift.isEmpty)
    }

    /// A fold whose tables are behind the log (a replay's catch-up, chunk by chunk) does not
    /// refold from a checkpoint written past them: it would keep spans its tables never had. A
    /// new generation caught up in two chunks, the second holding a late login the live
    /// generation's checkpoint holds, equals the live generation.
    @Test func aCatchUpBehindACheckpointFoldsAsTheLiveGenerationDid() throws {
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"), projections: .standard)
        let logins = (1...150).map { i in
            Stream.login("e\(i)", day: 1 + Double(i) / 20, device: "D", asid: "11", limited: i % 3 == 0)
        }
        #expect(try appendFolding(store, logins, after: 0) == 150)
        // Early in the history: refolded from the first login, leaving a checkpoint (written at seq 151).
        let early = Stream.login("e151", day: 1 + 50.5 / 20, device: "D", asid: "11", limited: true)
        #expect(try appendFolding(store, [early], after: 151) == 1)
        // After the checkpoint: refolded from it.
        let late = Stream.login("e152", day: 1 + 140.5 / 20, device: "D", asid: "11", limited: false)
        #expect(try appendFolding(store, [late], after: 152) == 1)
        let written = try store.read { db in
            try Int64.fetchAll(db, sql: """
                SELECT written_seq FROM asid_fold_checkpoints UNION ALL SELECT written_seq FROM device_fold_checkpoints
                """)
        }
        #expect(written == [151, 151])
        let rebuilt = ProjectionTables(generation: 9, registry: .standard)
        let (digests, live) = try store.writeFolding { db, keys in
            try rebuilt.createTables(db, indexed: true)
            _ = try ProjectionEngine.catchUp(db, keys: keys, tables: rebuilt, config: IdentityConfig(), after: 0, through: 140)
            _ = try ProjectionEngine.catchUp(db, keys: keys, tables: rebuilt, config: IdentityConfig(), after: 140)
            let names = ["devices", "limited_spans", "asid_last_logins", "asid_limited_spans"]
            return (try ProjectionTables.digests(db, tables: rebuilt, names: names),
                    try ProjectionTables.digests(db, tables: .views, names: names))
        }
        #expect(digests == live)
    }

    /// A late event refolds from the latest checkpoint older than it: an ASID and a device with
    /// 2,600 events keep checkpoints 64, 256 and 1,024 events behind (`FoldCheckpoint.lags`); an
    /// event 500 back folds on from the deepest (which it leaves as it was, having read fewer
    /// than twice its lag) and moves the two above it; one older than every checkpoint voids them
    /// and refolds from the first event. Live equals replay after each.
    @Test func aLateEventRefoldsFromTheLatestCheckpointOlderThanIt() throws {
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"), projections: .standard)
        func day(_ i: Double) -> Double { 1 + i / 200 }
        var n = 0
        for _ in 0..<26 {
            let lines = (0..<100).map { _ in
                n += 1
                return Stream.login("e\(n)", day: day(Double(n)), device: "D", asid: "11", limited: n % 7 < 3)
            }
            #expect(try appendFolding(store, lines, after: n) == 100)
        }
        // Each table's checkpoints' `written_seq`, by level.
        func written() throws -> [[Int64]] {
            try store.read { db in
                try ["asid_fold_checkpoints", "device_fold_checkpoints"].map { table in
                    try Int64.fetchAll(db, sql: "SELECT written_seq FROM \(table) ORDER BY level")
                }
            }
        }
        func late(_ at: Double) throws {
            n += 1
            let line = Stream.login("e\(n)", day: day(at), device: "D", asid: "11", limited: n % 2 == 0)
            #expect(try appendFolding(store, [line], after: n) == 1)
            #expect(try store.replay(verifyOnly: true).drift.isEmpty)
        }
        // Before every event: a refold from the first, which leaves three levels.
        try late(0.5)
        #expect(try written() == Array(repeating: [2601, 2601, 2601], count: 2))
        // 500 back: older than levels 0 and 1, later than level 2.
        try late(2100.5)
        #expect(try written() == Array(repeating: [2602, 2602, 2601], count: 2))
        // 150 back: older than level 0 alone.
        try late(2450.5)
        #expect(try written() == Array(repeating: [2603, 2602, 2601], count: 2))
        // Within the last 64: level 0 is read, and stays.
        try late(2595.5)
        #expect(try written() == Array(repeating: [2603, 2602, 2601], count: 2))
        // Older than every checkpoint: all void, a refold from the first writes them again.
        try late(1000.5)
        #expect(try written() == Array(repeating: [2605, 2605, 2605], count: 2))
    }

    /// Appends `lines` in one transaction, which folds them (no write-behind), so that a late
    /// event meets its entity's stored state; their positions follow `n`'s. Returns the appended.
    private func appendFolding(_ store: EventStore, _ lines: [String], after n: Int) throws -> Int {
        let records = BatchValidator.validate(lines.enumerated().map { i, line in
            (Array(line.utf8), RecordOrigin(source: "t", position: Int64(n * 10 + i)))
        })
        return try store.append(records, positions: []).appended
    }

    /// A late event's refold, right after an append that made the projections due a bulk
    /// build, finds the events of its device through the log's keys.
    @Test func aLateEventAfterABulkDueAppendRefoldsItsDevice() throws {
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"))
        let lines = (1...3).map { eventLine("e\($0)", ["device_id": "D"], time: "2026-11-01T09:00:0\($0)Z") }
        _ = try FileIngestor(store: store).ingest(path: dir.write("a.jsonl", lines))
        #expect(try store.bulkBuildDue(from: 1, expecting: 100))
        let late = eventLine("late", ["device_id": "D"], time: "2026-11-01T08:00:00Z")
        let outcome = try store.append(BatchValidator.validate([(Array(late.utf8), RecordOrigin(source: "t", position: 1))]), positions: [])
        #expect(outcome.appended == 1)
        #expect(try store.read { db in try logKeysKept(db) })
        #expect(try store.read { db in try Int.fetchOne(db, sql: "SELECT logins FROM devices WHERE device_id = 'D'") } == 4)
        #expect(try store.replay(verifyOnly: true).drift.isEmpty)
    }

    /// A consumer sharing its process with the read API validates on its own (lowered) thread
    /// alone: the same records, in the same order, as validating on every core.
    @Test func validatingOnOneThreadGivesWhatAllCoresGive() {
        let lines = (0..<3000).map { i -> (raw: [UInt8], origin: RecordOrigin) in
            let text = i % 7 == 3 ? "{\"event_id\": \"x\(i)\"" : i % 11 == 5 ? eventLine("e\(i)", ["asid": "abc"]) : eventLine("e\(i)")
            return (Array(text.utf8), RecordOrigin(source: "t", position: Int64(i + 1)))
        }
        func summary(_ records: [IncomingRecord]) -> [String] {
            records.map { record in
                switch record.validation {
                case let .success(event): "\(record.origin.position) \(event.canonicalPayload)"
                case let .failure(rejection): "\(record.origin.position) \(rejection.code.rawValue) \(rejection.message)"
                }
            }
        }
        let everyCore = summary(BatchValidator.validate(lines))
        #expect(everyCore.count == 3000)
        #expect(summary(BatchValidator.validate(lines, yielding: true)) == everyCore)
    }

    @Test func duplicatesAreCountedAndConflictsQuarantined() throws {
        let dir = TempDir()
        let file = dir.write("a.jsonl", [
            eventLine("e1", ["nonce": "n1"]),
            // Same event, other key order and offset: a duplicate, not a conflict.
            #"{"asid":"11","token_type":"access_token","tracking":"enabled","device_id":"D-e1","app_id":"1","occurred_at":"2026-11-01T10:00:00+01:00","event_id":"e1","schema":"login-event/v1","nonce":"n1"}"#,
            eventLine("e1", ["nonce": "n1", "device_id": "other"]),
            eventLine("e2", ["nonce": "n1"]),
            eventLine("e3", ["nonce": "n1", "app_id": "2"]), // other app: the nonce is free there
        ])
        let store = try EventStore(path: dir.path("db.sqlite"))
        let summary = try FileIngestor(store: store).ingest(path: file)
        #expect(summary.outcome.appended == 2)
        #expect(summary.outcome.duplicates == 1)
        #expect(summary.outcome.quarantined == [.eventIDConflict: 1, .nonceReplay: 1])
        let q = try store.quarantineEntries()
        #expect(q.map(\.code) == ["event_id_conflict", "nonce_replay"])
        #expect(q.map(\.position) == [3, 4])
        #expect(q[1].message.contains("e1"))
        #expect(try store.stats().duplicates == 1)
    }

    @Test func duplicateAcrossBatchesAndRunsIsStillADuplicate() throws {
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"))
        _ = try FileIngestor(store: store, batchSize: 1).ingest(path: dir.write("a.jsonl", [eventLine("e1"), eventLine("e2")]))
        let s = try FileIngestor(store: store, batchSize: 1).ingest(path: dir.write("b.jsonl", [eventLine("e2"), eventLine("e1", ["asid": "12"])]))
        #expect(s.outcome.duplicates == 1)
        #expect(s.outcome.quarantined == [.eventIDConflict: 1])
    }

    @Test func quarantineKeepsRawBytesExactly() throws {
        let dir = TempDir()
        let garbage: [UInt8] = [0x7B, 0xFF, 0xFE, 0x00, 0x22, 0x0D]
        var bytes = Array((eventLine("ok") + "\n").utf8)
        bytes += garbage + [0x0A]
        bytes += Array("{\"schema\":\"login-event/v1\"}\r\n".utf8)
        let file = dir.path("raw.jsonl")
        _ = FileManager.default.createFile(atPath: file, contents: Data(bytes))
        let store = try EventStore(path: dir.path("db.sqlite"))
        let summary = try FileIngestor(store: store).ingest(path: file)
        #expect(summary.outcome.appended == 1)
        let q = try store.quarantineEntries()
        #expect(q.count == 2)
        #expect(q[0].raw == garbage)
        #expect(q[0].code == "malformed_json")
        #expect(q[1].code == "missing_field")
        #expect(q[1].raw == Array("{\"schema\":\"login-event/v1\"}\r".utf8))
    }

    @Test func hugeLineIsQuarantinedNotFatal() throws {
        let dir = TempDir()
        let big = #"{"schema":"login-event/v1","event_id":"big","blob":""# + String(repeating: "x", count: 10 << 20)
        let file = dir.write("big.jsonl", [eventLine("a"), big, eventLine("b")])
        let store = try EventStore(path: dir.path("db.sqlite"))
        let summary = try FileIngestor(store: store).ingest(path: file)
        #expect(summary.outcome.appended == 2)
        #expect(summary.outcome.quarantined == [.malformedJSON: 1])
        let entry = try store.quarantineEntries()[0]
        #expect(entry.raw == Array(big.utf8.prefix(RecordSize.keptBytes)))
        #expect(entry.eventID == "big")
    }

    @Test func emptyAndBlankFilesAreFine() throws {
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"))
        #expect(try FileIngestor(store: store).ingest(path: dir.write("empty.jsonl", [])).lines == 0)
        let s = try FileIngestor(store: store).ingest(path: dir.write("blank.jsonl", ["", "  ", eventLine("x"), ""]))
        #expect(s.skippedBlank == 3 && s.outcome.appended == 1)
    }

    @Test func directoryAndMissingFileAreOneLineErrors() throws {
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"))
        #expect(throws: IdreconError.self) { try FileIngestor(store: store).ingest(path: dir.url.path) }
        #expect(throws: IdreconError.self) { try FileIngestor(store: store).ingest(path: dir.path("missing.jsonl")) }
    }

    @Test func rerunResumesAtStoredPositionAndPicksUpAppendedLines() throws {
        let dir = TempDir()
        let file = dir.write("a.jsonl", [eventLine("e1"), "bad", eventLine("e2")])
        let store = try EventStore(path: dir.path("db.sqlite"))
        let first = try FileIngestor(store: store, batchSize: 2).ingest(path: file)
        #expect(first.outcome.appended == 2 && first.outcome.quarantinedTotal == 1)
        let again = try FileIngestor(store: store).ingest(path: file)
        #expect(again.lines == 0 && again.outcome == BatchOutcome())
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        handle.seekToEndOfFile()
        handle.write(Data((eventLine("e3") + "\nworse\n").utf8))
        try handle.close()
        let third = try FileIngestor(store: store).ingest(path: file)
        #expect(third.outcome.appended == 1)
        #expect(try store.quarantineEntries().map(\.position) == [2, 5]) // line numbers continue
        let size = try FileManager.default.attributesOfItem(atPath: file)[.size] as! Int64
        #expect(try store.positions().map(\.position) == [size])
    }

    @Test func batchSizeDoesNotChangeTheLog() throws {
        let dir = TempDir()
        var generator = EventStreamGenerator(config: GeneratorConfig(events: 3000, seed: 7))
        var lines: [String] = []
        while let line = generator.next() { lines.append(String(decoding: line, as: UTF8.self)) }
        let file = dir.write("g.jsonl", lines)
        let a = try EventStore(path: dir.path("a.sqlite"))
        let b = try EventStore(path: dir.path("b.sqlite"))
        _ = try FileIngestor(store: a, batchSize: 7).ingest(path: file)
        _ = try FileIngestor(store: b, batchSize: 5000).ingest(path: file)
        #expect(try a.eventPayloads().map(\.payload) == b.eventPayloads().map(\.payload))
        #expect(try a.quarantineEntries(limit: nil).map(\.raw) == b.quarantineEntries(limit: nil).map(\.raw))
    }

    /// The generator's manifest is what ingest and stats must report.
    @Test func generatedStreamMatchesItsManifest() throws {
        let dir = TempDir()
        var config = GeneratorConfig(events: 20_000, seed: 11)
        config.badFraction = 0.05
        config.duplicateFraction = 0.02
        var generator = EventStreamGenerator(config: config)
        var data = Data()
        while let line = generator.next() { data.append(contentsOf: line); data.append(0x0A) }
        let manifest = generator.manifest
        let file = dir.path("g.jsonl")
        _ = FileManager.default.createFile(atPath: file, contents: data)
        let store = try EventStore(path: dir.path("db.sqlite"))
        let summary = try FileIngestor(store: store).ingest(path: file)
        #expect(summary.lines == Int64(manifest.lines))
        #expect(summary.outcome.appended == manifest.valid)
        #expect(summary.outcome.duplicates == manifest.duplicates)
        #expect(Dictionary(uniqueKeysWithValues: summary.outcome.quarantined.map { ($0.key.rawValue, $0.value) }) == manifest.quarantined)
        let stats = try store.stats()
        #expect(stats.events == manifest.valid && stats.logins == manifest.logins && stats.logouts == manifest.logouts)
        #expect(stats.limitedLogins == manifest.limitedLogins)
        #expect(stats.duplicates == manifest.duplicates)
        #expect(stats.quarantinedByCode == manifest.quarantined)
        // Every catalogued defect is present.
        #expect(Set(manifest.quarantined.keys) == Set(config.badCodes.map(\.rawValue)))
    }

    @Test func corruptDatabaseIsAClearError() throws {
        let dir = TempDir()
        let path = dir.path("bad.sqlite")
        _ = FileManager.default.createFile(atPath: path, contents: Data(repeating: 0x41, count: 8192))
        #expect {
            _ = try EventStore(path: path)
        } throws: { error in
            (error as? IdreconError)?.description.contains("not an idrecon SQLite database") == true
        }
    }
}
