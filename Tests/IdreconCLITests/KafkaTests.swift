import EventGenerator
import Foundation
import GRDB
import IdreconDomain
import IdreconKafka
import IdreconStore
import Testing

/// A generated stream whose bad records do not depend on arrival order (Kafka spreads a
/// stream over partitions, so which of two conflicting records comes first is not fixed).
func kafkaStream(events: Int, seed: UInt64) -> [[UInt8]] {
    var config = GeneratorConfig(events: events, seed: seed)
    config.badFraction = 0.03
    config.badCodes = [.malformedJSON, .unsupportedSchema, .missingField, .invalidField, .tokenTypeMismatch,
                       .permissionOutOfScope, .limitedUnsupported, .claimWithoutPermission]
    var generator = EventStreamGenerator(config: config)
    var lines: [[UInt8]] = []
    while let line = generator.next() { lines.append(line) }
    return lines
}

/// Produces lines with key = device_id, as `idrecon produce` does.
func produce(_ lines: [[UInt8]], to cluster: MockCluster, topic: String) throws {
    let producer = try KafkaProducer(brokers: cluster.bootstrap, topic: topic)
    for line in lines {
        var key: [UInt8]?
        if let v = try? JSONParser.parse(line), case let .string(d)? = v["device_id"] { key = Array(d.utf8) }
        try producer.send(key: key, value: line)
    }
    try producer.flush()
}

func startConsumer(_ cluster: MockCluster, topic: String, db: String, exitAtEnd: Bool = true, extra: [String] = []) throws -> Process {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: Binaries.idrecon)
    process.arguments = ["consume", "--brokers", cluster.bootstrap, "--topic", topic, "--group", "g", "--db", db,
                         "--batch-size", "500", "--log-level", "warning",
                         // The mock coordinator waits out a dead member's session: keep it short.
                         "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500"] + (exitAtEnd ? ["--exit-at-end"] : []) + extra
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    return process
}

/// Sum of the offsets stored in `db` (0 while it cannot be read yet).
func storedOffsets(_ db: String) -> Int64 {
    (try? EventStore(path: db, readOnly: true).positions().reduce(0) { $0 + $1.position }) ?? 0
}

/// Waits for a process, killing it after `seconds`; returns its exit status.
@discardableResult
func wait(_ process: Process, seconds: Double = 120) -> Int32 {
    let deadline = Date().addingTimeInterval(seconds)
    while process.isRunning, Date() < deadline { usleep(50_000) }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
    return process.terminationStatus
}

/// What a run must be equal on: events, quarantine by code, projection digests.
struct Outcome: Equatable {
    var events: Set<String>
    var quarantine: [String: Int]
    var digests: [String: String]

    init(db: String) throws {
        let store = try EventStore(path: db, readOnly: true)
        events = Set(try store.eventPayloads().map { $0.eventID + " " + $0.payload })
        quarantine = try store.stats().quarantinedByCode
        digests = try store.projectionDigests()
    }
}

@Suite(.serialized) struct KafkaTests {
    let lines = kafkaStream(events: 20_000, seed: 3)

    /// A mock cluster with topic "t" holding `lines`.
    func cluster(partitions: Int, brokers: Int = 1) throws -> MockCluster {
        let cluster = try MockCluster(brokers: brokers)
        try cluster.createTopic("t", partitions: partitions, replicationFactor: brokers)
        try produce(lines, to: cluster, topic: "t")
        return cluster
    }

    func reference(_ s: Scratch) throws -> Outcome {
        let file = s.path("events.jsonl")
        _ = FileManager.default.createFile(atPath: file, contents: Data(lines.flatMap { $0 + [0x0A] }))
        #expect(try run(Binaries.idrecon, ["ingest", file, "--db", s.path("ref.sqlite")]).status == 0)
        return try Outcome(db: s.path("ref.sqlite"))
    }

    @Test func consumeEqualsIngest() throws {
        let s = Scratch()
        let cluster = try cluster(partitions: 8)
        let db = s.path("k.sqlite")
        #expect(wait(try startConsumer(cluster, topic: "t", db: db)) == 0)
        let expected = try reference(s)
        let got = try Outcome(db: db)
        #expect(got.events.count == expected.events.count)
        #expect(got == expected)
        // Stored offsets are the partitions' ends.
        let positions = try EventStore(path: db, readOnly: true).positions()
        #expect(positions.count == 8 && positions.reduce(0) { $0 + $1.position } == Int64(lines.count))
        let stats = try run(Binaries.idrecon, ["stats", "--db", db, "--brokers", cluster.bootstrap, "--format", "csv"]).stdout
        #expect(stats.components(separatedBy: "lag.kafka:t/").count == 9)
        #expect(!stats.split(separator: "\n").contains { $0.hasPrefix("lag.") && !$0.hasSuffix(",0") })
        // Run again: nothing new.
        #expect(wait(try startConsumer(cluster, topic: "t", db: db)) == 0)
        #expect(try Outcome(db: db) == got)
    }

    /// A backlog that at least doubles the log is appended first, and the projections are
    /// built in bulk once the consumer has caught up: the same as folding them as it goes.
    @Test func backlogIsBuiltInBulk() throws {
        let s = Scratch()
        let cluster = try cluster(partitions: 4)
        let db = s.path("k.sqlite")
        #expect(wait(try startConsumer(cluster, topic: "t", db: db, extra: ["--bulk-from", "1"])) == 0)
        #expect(try Outcome(db: db) == reference(s))
        let generation = try DatabaseQueue(path: db).read { db in try Int.fetchOne(db, sql: "SELECT generation FROM projection_meta") }
        // At least one build replaced the first generation; a backlog seen partly (ends of some
        // partitions not fetched yet) may end a deferral early and start another, as the
        // doubling rule allows.
        #expect((generation ?? 0) >= 2)
        // The log's keys hold every event's device and every login's ASID.
        let keys = try DatabaseQueue(path: db).read { db in
            try Int.fetchOne(db, sql: """
                SELECT (SELECT sum(keys) FROM key_runs WHERE name = 'device_key_runs') = (SELECT count(*) FROM events)
                    AND (SELECT sum(keys) FROM key_runs WHERE name = 'login_key_runs')
                        = (SELECT count(*) FROM events WHERE type = 'login')
                """)
        }
        #expect(keys == 1)
    }

    /// `IDRECON_BROKERS`, `IDRECON_TOPIC` and `IDRECON_GROUP` stand in for the flags (as the
    /// deploy example sets them); contradicting flags are usage errors, not silently ignored.
    @Test func environmentNamesTheClusterAndFlagsThatContradictAreUsageErrors() throws {
        let s = Scratch()
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("env-topic", partitions: 2, replicationFactor: 1)
        let file = s.path("events.jsonl"), db = s.path("env.sqlite"), conf = s.path("kafka.conf")
        _ = FileManager.default.createFile(atPath: file, contents: Data(lines.prefix(300).flatMap { $0 + [0x0A] }))
        _ = FileManager.default.createFile(atPath: conf, contents: Data("session.timeout.ms=6000\n".utf8))
        func idrecon(_ arguments: [String], environment: [String: String] = [:]) throws -> Int32 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Binaries.idrecon)
            process.arguments = arguments
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return wait(process)
        }
        let environment = ["IDRECON_BROKERS": cluster.bootstrap, "IDRECON_TOPIC": "env-topic", "IDRECON_GROUP": "env-group",
                           "IDRECON_DB": db]
        #expect(try idrecon(["produce", file], environment: environment) == 0)
        #expect(try idrecon(["consume", "--exit-at-end", "--kafka-config", conf, "--log-level", "error"], environment: environment) == 0)
        #expect(try EventStore(path: db, readOnly: true).positions().reduce(0) { $0 + $1.position } == 300)
        #expect(try EventStore(path: db, readOnly: true).positions().allSatisfy { $0.source.hasPrefix("kafka:env-topic/") })
        for arguments in [["consume", "--embedded=0"], ["consume", "--embedded", "--brokers", cluster.bootstrap],
                          ["consume", "--brokers", cluster.bootstrap, "--kafka-config", conf, "--config", conf], ["consume"], ["produce", file]] {
            let db = arguments[0] == "consume" ? ["--db", s.path("unused.sqlite")] : []
            #expect(try idrecon(arguments + db, environment: ["IDRECON_BROKERS": ""]) == 2, "\(arguments)")
        }
    }

    /// `stats --brokers` with brokers that do not answer: one timeout, not one per partition;
    /// every lag null with its reason, the rest of the stats printed, exit 1.
    @Test func statsWithUnreachableBrokersFailsFast() throws {
        let s = Scratch()
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("u", partitions: 6, replicationFactor: 1)
        try produce(Array(lines.prefix(600)), to: cluster, topic: "u")
        let db = s.path("u.sqlite")
        #expect(wait(try startConsumer(cluster, topic: "u", db: db)) == 0)
        let started = Date()
        let r = try run(Binaries.idrecon, ["stats", "--db", db, "--brokers", "127.0.0.1:1", "--format", "json"])
        #expect(Date().timeIntervalSince(started) < 20)
        #expect(r.status == 1 && r.stderr.contains("unknown"), "\(r.status) \(r.stderr)")
        let stats = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any]
        let lags = stats?["lag"] as? [[String: Any]] ?? []
        #expect(lags.count == 6 && lags.allSatisfy { $0["records"] is NSNull && $0["reason"] is String }, "\(r.stdout)")
        let sources = (stats?["positions"] as? [[String: Any]] ?? []).compactMap { $0["source"] as? String }
        #expect(sources == (0..<6).map { "kafka:u/\($0)" })
    }

    @Test func killedConsumerResumesWithoutLossOrDuplicates() throws {
        let s = Scratch()
        let cluster = try cluster(partitions: 6)
        let db = s.path("k.sqlite")
        var rng = SeededRandom(seed: UInt64(Date().timeIntervalSince1970))
        var kills = 0
        var consumed: Int64 = 0
        for _ in 0..<6 {
            let p = try startConsumer(cluster, topic: "t", db: db)
            // Kill only once this run has committed something, at a random moment after.
            let deadline = Date().addingTimeInterval(60)
            while p.isRunning, storedOffsets(db) < consumed + 500, Date() < deadline { usleep(10_000) }
            usleep(UInt32(rng.next() % 150_000))
            if p.isRunning { kill(p.processIdentifier, SIGKILL); kills += 1 }
            p.waitUntilExit()
            consumed = storedOffsets(db)
        }
        #expect(wait(try startConsumer(cluster, topic: "t", db: db)) == 0)
        #expect(kills >= 5, "the consumer finished before it could be killed 5 times")
        #expect(try Outcome(db: db) == reference(s))
    }

    @Test func faultsLoseNothing() throws {
        let s = Scratch()
        let cluster = try cluster(partitions: 6, brokers: 3)
        let db = s.path("k.sqlite")
        cluster.pushRequestErrors(.fetch, [MockCluster.ErrorCode.notLeader, MockCluster.ErrorCode.requestTimedOut, MockCluster.ErrorCode.transport])
        cluster.pushRequestErrors(.offsetCommit, [MockCluster.ErrorCode.requestTimedOut, MockCluster.ErrorCode.coordinatorNotAvailable])
        let first = try startConsumer(cluster, topic: "t", db: db)
        usleep(1_500_000)
        cluster.setLeader(topic: "t", partition: 0, broker: 2)
        cluster.setLeader(topic: "t", partition: 1, broker: 3)
        cluster.setBroker(3, up: false)
        let second = try startConsumer(cluster, topic: "t", db: db) // joins mid-run: rebalance
        usleep(3_000_000)
        cluster.setBroker(3, up: true)
        #expect(wait(first) == 0)
        #expect(wait(second) == 0)
        // Whatever the faults left unconsumed, a last run finishes; nothing is lost or doubled.
        #expect(wait(try startConsumer(cluster, topic: "t", db: db)) == 0)
        #expect(try Outcome(db: db) == reference(s))
    }

    /// Two consumers on one database and group split the partitions; when one dies the
    /// other takes over from the stored offsets; SIGTERM commits, leaves and exits 0.
    @Test func survivorTakesOverAndSigtermExitsCleanly() throws {
        let s = Scratch()
        let cluster = try cluster(partitions: 6)
        let db = s.path("k.sqlite")
        func sources() -> Int { (try? EventStore(path: db, readOnly: true).positions().count) ?? 0 }
        let a = try startConsumer(cluster, topic: "t", db: db, exitAtEnd: false, extra: ["--batch-size", "200"])
        let b = try startConsumer(cluster, topic: "t", db: db, exitAtEnd: false, extra: ["--batch-size", "200"])
        // Both must be working before one dies.
        var deadline = Date().addingTimeInterval(60)
        while sources() < 6, Date() < deadline { usleep(20_000) }
        #expect(storedOffsets(db) < Int64(lines.count), "consumed everything before the kill; the test needs a larger stream")
        kill(a.processIdentifier, SIGKILL)
        a.waitUntilExit()
        // The survivor takes over a's partitions (after the dead member's session times out).
        deadline = Date().addingTimeInterval(90)
        while storedOffsets(db) < Int64(lines.count), Date() < deadline { usleep(50_000) }
        #expect(storedOffsets(db) == Int64(lines.count))
        kill(b.processIdentifier, SIGTERM)
        #expect(wait(b, seconds: 30) == 0)
        #expect(try Outcome(db: db) == reference(s))
    }

    /// SIGTERM in the middle of a stream, with records fetched and not yet read: the consumer
    /// leaves the group (the fetched records are dropped, not stored) and exits 0; the next run
    /// goes on from the stored offsets.
    @Test func sigtermMidStreamLeavesAndTheNextRunGoesOn() throws {
        let s = Scratch()
        let cluster = try cluster(partitions: 4)
        let db = s.path("k.sqlite")
        let consumer = try startConsumer(cluster, topic: "t", db: db, exitAtEnd: false, extra: ["--batch-size", "200"])
        let deadline = Date().addingTimeInterval(60)
        while storedOffsets(db) == 0, Date() < deadline { usleep(5_000) }
        kill(consumer.processIdentifier, SIGTERM)
        #expect(wait(consumer, seconds: 40) == 0)
        #expect(storedOffsets(db) < Int64(lines.count), "consumed everything before the stop; needs a larger stream")
        #expect(wait(try startConsumer(cluster, topic: "t", db: db)) == 0)
        #expect(try Outcome(db: db) == reference(s))
    }

    /// With the brokers gone, SIGTERM still ends the consumer in bounded time (it gives up on
    /// leaving the group after `leaveSeconds`), exit 0, everything it consumed kept.
    @Test func sigtermExitsWhenTheBrokersAreGone() throws {
        let s = Scratch()
        let cluster = try cluster(partitions: 4)
        let db = s.path("k.sqlite")
        let consumer = try startConsumer(cluster, topic: "t", db: db, exitAtEnd: false)
        let deadline = Date().addingTimeInterval(90)
        while storedOffsets(db) < Int64(lines.count), Date() < deadline { usleep(50_000) }
        #expect(storedOffsets(db) == Int64(lines.count))
        cluster.setBroker(1, up: false)
        usleep(500_000)
        let stopped = Date()
        kill(consumer.processIdentifier, SIGTERM)
        #expect(wait(consumer, seconds: 40) == 0)
        #expect(Date().timeIntervalSince(stopped) < 40)
        #expect(try Outcome(db: db) == reference(s))
    }

    @Test func badRecordsLandInQuarantineWithPartitionAndOffset() throws {
        let s = Scratch()
        let cluster = try MockCluster()
        try cluster.createTopic("t", partitions: 1)
        let producer = try KafkaProducer(brokers: cluster.bootstrap, topic: "t")
        try producer.send(key: Array("k".utf8), value: nil)
        try producer.send(key: nil, value: [0xFF, 0x00, 0x13, 0x37])
        try producer.send(key: nil, value: Array(#"{"schema":"login-event/v1","event_id":"x"}"#.utf8))
        try producer.flush()
        let db = s.path("k.sqlite")
        #expect(wait(try startConsumer(cluster, topic: "t", db: db)) == 0)
        let q = try EventStore(path: db, readOnly: true).quarantineEntries()
        #expect(q.map(\.code) == ["malformed_json", "malformed_json", "missing_field"])
        #expect(q.map(\.position) == [0, 1, 2])
        #expect(q.allSatisfy { $0.partition == 0 && $0.source == "kafka:t/0" })
        #expect(q[0].recordKey == Array("k".utf8) && q[0].message.contains("null"))
        #expect(q[1].raw == [0xFF, 0x00, 0x13, 0x37])
    }

    @Test func configurationErrorsExitTwo() throws {
        let s = Scratch()
        let r = try run(Binaries.idrecon, ["consume", "--brokers", "127.0.0.1:1", "-X", "no.such.setting=1", "--db", s.path("x.sqlite")])
        #expect(r.status == 2)
        #expect(r.stderr.contains("no.such.setting"))
        #expect(try run(Binaries.idrecon, ["consume", "--db", s.path("x.sqlite")]).status == 2)
        #expect(try run(Binaries.idrecon, ["consume", "--brokers", "127.0.0.1:1", "-X", "fetch.wait.max.ms=-5", "--db", s.path("x.sqlite")]).status == 2)
    }

    /// Resuming below the broker's log start (retention moved it) skips records: never
    /// silently. The run logs the range, records it (stats, export), and exits 1.
    @Test func retentionGapIsLoggedRecordedAndExitsOne() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("gap", partitions: 1, replicationFactor: 1)
        // As if an earlier run had read the first 5 records.
        _ = try EventStore(path: db).append([], positions: [ConsumedPosition(source: "kafka:gap/0", position: 5, records: 5, updatedAt: 0)])
        // More than the mock's ~5 MB into the one partition: its log start moves past 5.
        let lines = kafkaStream(events: 20_000, seed: 4)
        let file = s.path("lines.jsonl")
        _ = FileManager.default.createFile(atPath: file, contents: Data(lines.flatMap { $0 + [0x0A] }))
        let produced = try run(Binaries.idrecon, ["produce", file, "--brokers", cluster.bootstrap, "--topic", "gap"])
        #expect(produced.status == 0)
        #expect(produced.stderr.contains("the broker no longer holds the oldest records of gap"), "\(produced.stderr)")
        let start = try KafkaWatermarks(brokers: cluster.bootstrap).range(topic: "gap", partition: 0).start
        #expect(start > 5)
        let result = try run(Binaries.idrecon, [
            "consume", "--brokers", cluster.bootstrap, "--topic", "gap", "--group", "g", "--db", db, "--exit-at-end",
            "--log-level", "error", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("records skipped"), "\(result.stderr)")
        #expect(result.stderr.contains("\(start - 5) records were skipped"), "\(result.stderr)")
        let store = try EventStore(path: db, readOnly: true)
        #expect(try store.skippedRanges().map { [$0.source, "\($0.firstPosition)", "\($0.lastPosition)"] } == [["kafka:gap/0", "5", "\(start - 1)"]])
        let stats = try store.stats()
        #expect(stats.skippedRecords == start - 5)
        #expect(Int64(stats.events + stats.duplicates + stats.quarantined) == Int64(lines.count) - start)
        let export = try run(Binaries.idrecon, ["export", "skipped", "--db", db, "--format", "json"])
        #expect(export.stdout.contains(#""first_position":5,"last_position":\#(start - 1),"records":\#(start - 5)"#), "\(export.stdout)")
        // Resuming again skips nothing more.
        let again = try run(Binaries.idrecon, [
            "consume", "--brokers", cluster.bootstrap, "--topic", "gap", "--group", "g", "--db", db, "--exit-at-end",
            "--log-level", "error", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ])
        #expect(again.status == 0, "\(again.stderr)")
    }

    /// `--log-format json`: every stderr line is one JSON object with the fields a log
    /// shipper expects; at trace level no e-mail address or token of the stream appears.
    @Test func jsonLogsAreParseableAndCarryNoPersonalData() throws {
        let s = Scratch()
        let lines = kafkaStream(events: 2000, seed: 6)
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("logs", partitions: 2, replicationFactor: 1)
        try produce(lines, to: cluster, topic: "logs")
        let result = try run(Binaries.idrecon, [
            "consume", "--brokers", cluster.bootstrap, "--topic", "logs", "--group", "g", "--db", s.path("db.sqlite"),
            "--exit-at-end", "--log-level", "trace", "--log-format", "json", "-X", "session.timeout.ms=6000",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let logLines = result.stderr.split(separator: "\n")
        #expect(logLines.count >= 3)
        for line in logLines {
            guard let value = try? JSONParser.parse(Array(line.utf8)) else { Issue.record("not JSON: \(line)"); continue }
            for key in ["timestamp", "level", "logger", "message", "metadata"] { #expect(value[key] != nil, "\(key) missing: \(line)") }
        }
        var secrets: Set<String> = []
        for line in lines {
            guard let value = try? JSONParser.parse(line) else { continue }
            for key in ["email", "id_token", "token_for_business"] { if case let .string(v)? = value[key], v.count > 3 { secrets.insert(v) } }
        }
        #expect(!secrets.isEmpty)
        #expect(secrets.allSatisfy { !result.stderr.contains($0) }, "personal data was logged")
    }

    /// librdkafka's own lines (a refused connection) come through swift-log: JSON with
    /// `--log-format json`, with their level, and filtered by `--log-level`.
    @Test func librdkafkaLinesFollowTheLogFormatAndLevel() throws {
        let s = Scratch()
        func consume(_ level: String) throws -> [Substring] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Binaries.idrecon)
            process.arguments = ["consume", "--brokers", "127.0.0.1:1", "--db", s.path("db.sqlite"), "--log-format", "json",
                                 "--log-level", level]
            let err = Pipe()
            process.standardOutput = FileHandle.nullDevice
            process.standardError = err
            try process.run()
            usleep(2_500_000)
            kill(process.processIdentifier, SIGTERM)
            let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            _ = wait(process, seconds: 30)
            return text.split(separator: "\n")
        }
        let lines = try consume("info")
        #expect(!lines.isEmpty && lines.allSatisfy { (try? JSONParser.parse(Array($0.utf8))) != nil }, "\(lines)")
        let kafka = lines.compactMap { try? JSONParser.parse(Array($0.utf8)) }.filter { $0["logger"] == .string("librdkafka") }
        #expect(!kafka.isEmpty && kafka.allSatisfy { $0["level"] == .string("error") && $0["metadata"]?["facility"] != nil }, "\(lines)")
        #expect(try consume("critical").allSatisfy { !$0.contains("librdkafka") })
    }

    /// Offsets are stored per topic and partition: a second group, or the same topic name on
    /// another cluster, is refused until it rebinds (same cluster: offsets kept; another
    /// cluster: offsets dropped, events re-read as duplicates).
    @Test func secondGroupOrClusterIsRefusedUntilItRebinds() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        let lines = kafkaStream(events: 3000, seed: 41)
        let first = try MockCluster(brokers: 1), second = try MockCluster(brokers: 1)
        for cluster in [first, second] {
            try cluster.createTopic("shared", partitions: 2, replicationFactor: 1)
            try produce(lines, to: cluster, topic: "shared")
        }
        func consume(_ cluster: MockCluster, group: String, _ extra: [String] = []) throws -> RunResult {
            try run(Binaries.idrecon, ["consume", "--brokers", cluster.bootstrap, "--topic", "shared", "--group", group, "--db", db,
                                       "--exit-at-end", "--log-level", "error", "-X", "session.timeout.ms=6000"] + extra)
        }
        #expect(try consume(first, group: "g").status == 0)
        let after = try EventStore(path: db, readOnly: true).stats()
        #expect(after.events + after.duplicates + after.quarantined == lines.count)

        let otherGroup = try consume(first, group: "h")
        #expect(otherGroup.status == 2, "\(otherGroup.stderr)")
        #expect(otherGroup.stderr.contains("group 'g'") && otherGroup.stderr.contains("--rebind"), "\(otherGroup.stderr)")
        let otherCluster = try consume(second, group: "g")
        #expect(otherCluster.status == 2, "\(otherCluster.stderr)")
        let refused = try EventStore(path: db, readOnly: true).stats()
        #expect(refused.events == after.events && refused.duplicates == after.duplicates)

        // Another group of the same cluster takes over with the stored offsets: nothing is re-read.
        #expect(try consume(first, group: "h", ["--rebind"]).status == 0)
        #expect(try EventStore(path: db, readOnly: true).stats().duplicates == after.duplicates)
        // Another cluster takes over without them: everything is read again, as duplicates.
        #expect(try consume(second, group: "h", ["--rebind"]).status == 0)
        let rebound = try EventStore(path: db, readOnly: true).stats()
        #expect(rebound.events == after.events)
        #expect(rebound.events + rebound.duplicates + rebound.quarantined > after.events + after.duplicates + after.quarantined)
        #expect(try EventStore(path: db, readOnly: true).kafkaBindings().map(\.groupID) == ["h"])
    }
}
