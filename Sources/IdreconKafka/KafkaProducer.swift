import CRdKafka
import Synchronization

/// Sends records to one topic; the partition is chosen from the key (librdkafka's default
/// partitioner) unless the caller names it. A record librdkafka gives up on (its delivery
/// report carries an error) makes the next `flush` throw.
public final class KafkaProducer: @unchecked Sendable {
    private let rk: OpaquePointer
    private let topic: OpaquePointer
    public let topicName: String
    private let failures = DeliveryFailures()

    public init(brokers: String, topic: String, settings: [(String, String)] = []) throws(KafkaError) {
        let conf = try makeConfiguration([
            ("bootstrap.servers", brokers), ("linger.ms", "20"), ("batch.num.messages", "10000"),
            ("queue.buffering.max.messages", "500000"), ("log_level", "4"),
        ] + settings)
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(failures).toOpaque())
        rd_kafka_conf_set_dr_msg_cb(conf) { _, message, opaque in
            guard let message, let opaque, message.pointee.err != RD_KAFKA_RESP_ERR_NO_ERROR else { return }
            Unmanaged<DeliveryFailures>.fromOpaque(opaque).takeUnretainedValue().record(KafkaError(message.pointee.err, "delivery"))
        }
        rk = try makeClient(RD_KAFKA_PRODUCER, conf)
        guard let t = rd_kafka_topic_new(rk, topic, nil) else {
            rd_kafka_destroy(rk)
            throw .configuration("cannot open topic \(topic)")
        }
        self.topic = t
        topicName = topic
    }

    deinit {
        rd_kafka_topic_destroy(topic)
        rd_kafka_destroy(rk)
    }

    /// Queues one record; waits for queue space when the local queue is full. A nil value
    /// sends a null record value (a tombstone), as some producers do.
    public func send(key: [UInt8]?, value: [UInt8]?, partition: Int32? = nil) throws(KafkaError) {
        while true {
            let result: Int32 = value.withOptionalBytes { valuePointer, valueCount in
                key.withOptionalBytes { keyPointer, keyCount in
                    rd_kafka_produce(topic, partition ?? RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY,
                                     valuePointer, valueCount, keyPointer, keyCount, nil)
                }
            }
            if result == 0 { return }
            let err = rd_kafka_last_error()
            if err == RD_KAFKA_RESP_ERR__QUEUE_FULL {
                rd_kafka_poll(rk, 50)
                continue
            }
            throw KafkaError(err, "produce to \(topicName)")
        }
    }

    /// Partitions of the topic, from the brokers' metadata.
    public func partitionCount(timeoutMs: Int32 = 5000) throws(KafkaError) -> Int32 {
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let err = rd_kafka_metadata(rk, 0, topic, &metadata, timeoutMs)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else { throw KafkaError(err, "metadata of \(topicName)") }
        defer { rd_kafka_metadata_destroy(metadata) }
        guard metadata.pointee.topic_cnt > 0 else { return 0 }
        return metadata.pointee.topics[0].partition_cnt
    }

    /// Serves delivery reports.
    public func poll() { rd_kafka_poll(rk, 0) }

    /// Waits until every queued record is delivered; throws if one was not (since the last flush).
    public func flush(timeoutMs: Int32 = 60_000) throws(KafkaError) {
        let err = rd_kafka_flush(rk, timeoutMs)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "flush to \(topicName)") }
        if let failure = failures.take() {
            throw KafkaError(kind: .client, code: failure.code, message: "\(failure.count) records to \(topicName) not delivered: \(failure.error)")
        }
    }
}

/// Failed deliveries reported on librdkafka's thread, taken by `flush`.
private final class DeliveryFailures: Sendable {
    private let state = Mutex<(count: Int, first: KafkaError?)>((0, nil))

    func record(_ error: KafkaError) {
        state.withLock { $0.count += 1; if $0.first == nil { $0.first = error } }
    }

    func take() -> (count: Int, code: Int32, error: KafkaError)? {
        state.withLock { s in
            defer { s = (0, nil) }
            return s.first.map { (s.count, $0.code, $0) }
        }
    }
}

extension Optional where Wrapped == [UInt8] {
    func withOptionalBytes<R>(_ body: (UnsafeMutableRawPointer?, Int) -> R) -> R {
        guard var bytes = self else { return body(nil, 0) }
        return bytes.withUnsafeMutableBytes { body($0.baseAddress, $0.count) }
    }
}

/// Reads partition end offsets (high watermarks) from the brokers, for lag.
public final class KafkaWatermarks: @unchecked Sendable {
    private let rk: OpaquePointer

    public init(brokers: String, settings: [(String, String)] = []) throws(KafkaError) {
        rk = try makeClient(RD_KAFKA_PRODUCER, try makeConfiguration([("bootstrap.servers", brokers), ("log_level", "3")] + settings))
    }

    deinit { rd_kafka_destroy(rk) }

    /// The next offset to be written to the partition (its end).
    public func end(topic: String, partition: Int32, timeoutMs: Int32 = 5000) throws(KafkaError) -> Int64 {
        try range(topic: topic, partition: partition, timeoutMs: timeoutMs).end
    }

    /// The first offset the partition still holds and its end.
    public func range(topic: String, partition: Int32, timeoutMs: Int32 = 5000) throws(KafkaError) -> (start: Int64, end: Int64) {
        var low: Int64 = 0, high: Int64 = 0
        let err = rd_kafka_query_watermark_offsets(rk, topic, partition, &low, &high, timeoutMs)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "watermarks of \(topic)/\(partition)") }
        return (low, high)
    }
}
