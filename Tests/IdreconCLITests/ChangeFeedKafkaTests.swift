import EventGenerator
import Foundation
import IdreconDomain
import IdreconKafka
import IdreconStore
import Logging
import Testing

/// Every record of a topic, from all its partitions.
func topicRecords(_ cluster: MockCluster, _ topic: String, partitions: Int32) throws -> [KafkaPartitionReader.Record] {
    let reader = try KafkaPartitionReader(brokers: cluster.bootstrap, topic: topic)
    var records: [KafkaPartitionReader.Record] = []
    for p in 0..<partitions { records += try reader.records(partition: p, from: 0) }
    return records
}

/// A change record's number, and the record with its feed ID blanked (as `feedFromLog` has it).
func changeRecord(_ record: KafkaPartitionReader.Record, feedID: String) -> (change: Int64, body: String) {
    let body = String(decoding: record.value ?? [], as: UTF8.self)
    guard let value = try? JSONParser.parse(Array(body.utf8)), case let .number(n)? = value["change"], let change = Int64(n)
    else { return (-1, body) }
    return (change, body.replacingOccurrences(of: #""feed":"\#(feedID)""#, with: #""feed":"""#))
}

/// The change feed delivered through Kafka (README, "Change feed").
@Suite(.serialized) struct ChangeFeedKafkaTests {
    let lines = kafkaStream(events: 20_000, seed: 5)

    /// What the topic holds after any number of runs: every change decided, once, keyed and
    /// partitioned as promised, equal to the feed a replay of the log computes.
    func expectExactlyOnce(_ cluster: MockCluster, partitions: Int32, db: String) throws {
        let store = try EventStore(path: db, readOnly: true)
        let feed = try #require(try store.changeFeed())
        let records = try topicRecords(cluster, "changes", partitions: partitions)
        let changes = records.map { changeRecord($0, feedID: feed.feedID) }
        #expect(changes.count == Set(changes.map(\.change)).count, "a change was sent twice")
        #expect(changes.map(\.change).sorted() == Array(1...feed.lastChange), "changes missing")
        #expect(feed.sentChange == feed.lastChange && feed.lastChange > 100)
        let schema = MiniSchema(schema: try JSONParser.parse([UInt8](try Data(contentsOf: OutputSchemaTests.schemas
            .deletingLastPathComponent().appendingPathComponent("changes.schema.json")))))
        for (record, change) in zip(records, changes) {
            let problems = schema.errors(try JSONParser.parse(record.value ?? []))
            #expect(problems.isEmpty, "\(problems)")
            let key = String(decoding: record.key ?? [], as: UTF8.self)
            #expect(record.partition == ChangeFeedSender.partition(of: key, among: partitions))
            #expect(change.body.contains(#""asid":"\#(key)""#) || change.body.contains(#""user_id":"\#(key)""#))
        }
        // Within a partition, in the order decided.
        for p in 0..<partitions {
            let numbers = zip(records, changes).filter { $0.0.partition == p }.map(\.1.change)
            #expect(numbers == numbers.sorted())
        }
        #expect(changes.sorted { $0.change < $1.change }.map(\.body) == (try store.feedFromLog()))
    }

    /// A consumer killed at random moments (while folding, deciding or sending) and started
    /// again sends every change exactly once.
    @Test func killedConsumerSendsEveryChangeOnce() throws {
        let s = Scratch()
        let cluster = try MockCluster()
        try cluster.createTopic("t", partitions: 6)
        try cluster.createTopic("changes", partitions: 3)
        let db = s.path("f.sqlite")
        var rng = SeededRandom(seed: UInt64(Date().timeIntervalSince1970))
        var kills = 0
        var consumed: Int64 = 0
        func feed() -> ChangeFeedStatus? { try? EventStore(path: db, readOnly: true).changeFeed() }
        let waves = 4
        for round in 0..<waves {
            // Each run gets new events, so it folds, decides and sends.
            try produce(Array(lines[lines.count * round / waves ..< lines.count * (round + 1) / waves]), to: cluster, topic: "t")
            let p = try startConsumer(cluster, topic: "t", db: db, extra: ["--changes-topic", "changes"])
            // Kill once this run has committed events (even rounds), or has changes decided
            // and not yet delivered (odd ones: while it sends).
            let deadline = Date().addingTimeInterval(60)
            while p.isRunning, Date() < deadline,
                  round % 2 == 0
                      ? storedOffsets(db) < consumed + 300 : feed().map({ $0.lastChange <= $0.sentChange }) ?? true {
                usleep(2_000)
            }
            usleep(UInt32(rng.next() % (round % 2 == 0 ? 100_000 : 20_000)))
            if p.isRunning { kill(p.processIdentifier, SIGKILL); kills += 1 }
            p.waitUntilExit()
            consumed = storedOffsets(db)
        }
        #expect(wait(try startConsumer(cluster, topic: "t", db: db, extra: ["--changes-topic", "changes"])) == 0)
        #expect(kills >= 3, "the consumer finished before it could be killed")
        try expectExactlyOnce(cluster, partitions: 3, db: db)
    }

    /// Changes Kafka got but the database was not told of (a crash between the two) are not
    /// sent again: the sender reads each partition's last record first.
    @Test func changesDeliveredBeforeACrashAreNotSentAgain() throws {
        let s = Scratch()
        let cluster = try MockCluster()
        try cluster.createTopic("changes", partitions: 4)
        let db = s.path("d.sqlite")
        _ = try EventStore(path: db).enableChangeFeed(topic: "changes")
        let file = s.path("events.jsonl")
        _ = FileManager.default.createFile(atPath: file, contents: Data(lines.prefix(5_000).flatMap { $0 + [0x0A] }))
        #expect(try run(Binaries.idrecon, ["ingest", file, "--db", db]).status == 0)
        let store = try EventStore(path: db)
        _ = try store.backup(to: s.path("backup.sqlite")) // then more is decided, and everything sent
        _ = FileManager.default.createFile(
            atPath: s.path("more.jsonl"), contents: Data(lines[5_000..<6_000].flatMap { $0 + [0x0A] }))
        #expect(try run(Binaries.idrecon, ["ingest", s.path("more.jsonl"), "--db", db]).status == 0)
        let pending = try store.pendingChanges(after: 0, limit: .max)
        #expect(pending.count > 50)
        // The first two thirds reached Kafka; then the process died.
        let producer = try KafkaProducer(brokers: cluster.bootstrap, topic: "changes", settings: [("enable.idempotence", "true")])
        for change in pending.prefix(pending.count * 2 / 3) {
            try producer.send(key: Array(change.key.utf8), value: Array(change.body.utf8),
                              partition: ChangeFeedSender.partition(of: change.key, among: 4))
        }
        try producer.flush()
        let sender = try ChangeFeedSender(store: store, topic: "changes", brokers: cluster.bootstrap, logger: Logger(label: "test"))
        try sender.drain()
        #expect(sender.sentChanges == pending.count - pending.count * 2 / 3)
        try expectExactlyOnce(cluster, partitions: 4, db: db)

        // The backup, restored, would number its next changes as ones the topic holds: refused.
        let restored = try EventStore(path: s.path("backup.sqlite"))
        #expect(throws: (any Error).self) {
            _ = try ChangeFeedSender(store: restored, topic: "changes", brokers: cluster.bootstrap, logger: Logger(label: "test"))
        }

        // A topic whose tail another writer wrote is refused.
        try cluster.createTopic("shared", partitions: 1)
        let other = try KafkaProducer(brokers: cluster.bootstrap, topic: "shared")
        try other.send(key: nil, value: Array(#"{"hello":1}"#.utf8), partition: 0)
        try other.flush()
        let second = s.path("e.sqlite")
        #expect(throws: (any Error).self) {
            _ = try ChangeFeedSender(store: try EventStore(path: second), topic: "shared", brokers: cluster.bootstrap,
                                     logger: Logger(label: "test"))
        }
    }
}
