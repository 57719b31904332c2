import Foundation
import IdreconDomain
import IdreconStore
import Logging

/// Delivers the change feed from the database to its topic, exactly once in effect
/// (README, "Change feed"). The changes are decided in the transactions that fold the log
/// (`feed_changes`); this sends them in order, each to the partition its key hashes to,
/// with an idempotent producer (so each partition holds them in order, without
/// duplicates), and records the last one delivered once Kafka has acknowledged them all.
/// After a crash or a failed send it reads the last record of every partition first: a
/// change at or below its partition's last is there already and is not sent again.
public final class ChangeFeedSender: @unchecked Sendable {
    private let store: EventStore
    private let brokers: String
    private let settings: [(String, String)]
    private let logger: Logger
    public let feed: ChangeFeedStatus
    private var producer: KafkaProducer?
    private var partitions: Int32 = 0
    /// Per partition, the last change its tail showed; nil until the tails are read.
    private var delivered: [Int32: Int64]?
    private var sent: Int64
    /// Changes sent by this process.
    public private(set) var sentChanges = 0

    /// Starts the database's feed to `topic` (or opens it) and reads the topic's tails; fails
    /// when the topic holds another writer's records at a partition's end.
    public init(store: EventStore, topic: String, brokers: String, settings: [(String, String)] = [], logger: Logger) throws {
        self.store = store
        self.brokers = brokers
        self.settings = settings
        self.logger = logger
        feed = try store.enableChangeFeed(topic: topic)
        sent = feed.sentChange
        try recover()
    }

    /// The partition a change's key goes to: a stable hash of its bytes (so a restart, which
    /// must know where each change went, computes the same).
    public static func partition(of key: String, among count: Int32) -> Int32 {
        Int32(truncatingIfNeeded: StableHash.key(key) % Int64(count))
    }

    private func recover() throws {
        delivered = nil
        producer = nil
        let producer = try KafkaProducer(brokers: brokers, topic: feed.topic, settings: [
            ("enable.idempotence", "true"), ("acks", "all"), ("linger.ms", "5"),
        ] + settings)
        var count: Int32 = 0
        for _ in 0..<50 {
            // A topic the brokers create on first use (the producer's metadata request asks
            // for it) shows no partitions until it exists.
            count = try producer.partitionCount()
            if count > 0 { break }
            usleep(100_000)
        }
        guard count > 0 else { throw KafkaError.configuration("topic \(feed.topic) has no partitions; create it") }
        let reader = try KafkaPartitionReader(brokers: brokers, topic: feed.topic, settings: settings)
        let decided = try store.changeFeed()?.lastChange ?? 0
        var tails: [Int32: Int64] = [:]
        for p in 0..<count {
            guard let last = try reader.last(partition: p) else { continue }
            guard let value = last.value, let record = try? JSONParser.parse(value),
                  case let .string(id)? = record["feed"], id.sameBytes(as: feed.feedID),
                  case let .number(change)? = record["change"], let number = Int64(change) else {
                throw KafkaError.configuration("topic \(feed.topic) partition \(p) ends with a record this database's change "
                    + "feed did not write (offset \(last.offset)); give the feed a topic of its own")
            }
            // A topic ahead of the database: the database was restored from a backup, and
            // the changes it numbers next would be taken for ones the topic holds.
            guard number <= decided else {
                throw KafkaError.configuration("topic \(feed.topic) partition \(p) holds change \(number), beyond this "
                    + "database's last change \(decided) (restored from a backup?); give the feed a new topic")
            }
            tails[p] = number
        }
        partitions = count
        delivered = tails
        self.producer = producer
    }

    /// Sends the next decided changes (at most `limit`); returns how many were pending.
    @discardableResult
    public func sendPending(limit: Int = 10_000) throws -> Int {
        do {
            return try send(limit: limit)
        } catch {
            // Some of the records may have arrived: the partitions' tails will say which. The
            // producer is destroyed first, so that nothing it still holds arrives after them.
            producer = nil
            throw error
        }
    }

    private func send(limit: Int) throws -> Int {
        if producer == nil { try recover() }
        guard let producer, let delivered else { return 0 }
        let pending = try store.pendingChanges(after: sent, limit: limit)
        guard let last = pending.last else { return 0 }
        var sending = 0
        for change in pending {
            let p = Self.partition(of: change.key, among: partitions)
            if let tail = delivered[p], change.change <= tail { continue }
            try producer.send(key: Array(change.key.utf8), value: Array(change.body.utf8), partition: p)
            sending += 1
        }
        try producer.flush()
        try store.changesDelivered(upTo: last.change)
        sent = last.change
        sentChanges += sending
        return pending.count
    }

    /// Sends as changes are decided until `shouldStop`; a failure is logged and retried
    /// (the changes wait in the database), never passed on: the feed does not stop the consumer.
    public func run(shouldStop: () -> Bool) {
        var backoff = 1.0
        while !shouldStop() {
            do {
                if try sendPending() == 0 { usleep(100_000) }
                backoff = 1
            } catch {
                logger.warning("change feed: \(error); retrying in \(Int(backoff)) s (changes wait in the database)")
                let until = Date().addingTimeInterval(backoff)
                while !shouldStop(), Date() < until { usleep(100_000) }
                backoff = min(30, backoff * 2)
            }
        }
    }

    /// Sends what is decided, for up to `seconds` (a stopping consumer's last catch-up).
    public func drain(seconds: Double = 30) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            do {
                if try sendPending() == 0 { return }
            } catch {
                if Date() >= deadline { throw error }
                usleep(500_000)
            }
        }
    }
}
