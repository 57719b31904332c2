import CRdKafka

/// Reads records of one topic's partitions by offset, without a consumer group (librdkafka's
/// simple consumer): the change feed's tail on restart, and tests reading a topic back.
public final class KafkaPartitionReader: @unchecked Sendable {
    private let rk: OpaquePointer
    private let topic: OpaquePointer
    public let topicName: String

    public struct Record: Sendable {
        public var partition: Int32
        public var offset: Int64
        public var key: [UInt8]?
        public var value: [UInt8]?
    }

    public init(brokers: String, topic: String, settings: [(String, String)] = []) throws(KafkaError) {
        let conf = try makeConfiguration([
            ("bootstrap.servers", brokers), ("enable.partition.eof", "true"), ("log_level", "4"),
        ] + settings)
        rk = try makeClient(RD_KAFKA_CONSUMER, conf)
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

    /// The partition's first held offset and its end.
    public func range(partition: Int32, timeoutMs: Int32 = 5000) throws(KafkaError) -> (start: Int64, end: Int64) {
        var low: Int64 = 0, high: Int64 = 0
        let err = rd_kafka_query_watermark_offsets(rk, topicName, partition, &low, &high, timeoutMs)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "watermarks of \(topicName)/\(partition)") }
        return (low, high)
    }

    /// The records of `partition` from `offset` to its end as of now.
    public func records(partition: Int32, from offset: Int64, timeoutMs: Int32 = 10_000) throws(KafkaError) -> [Record] {
        let end = try range(partition: partition).end
        guard offset < end else { return [] }
        guard rd_kafka_consume_start(topic, partition, offset) == 0 else {
            throw KafkaError(rd_kafka_last_error(), "read \(topicName)/\(partition) from \(offset)")
        }
        defer { rd_kafka_consume_stop(topic, partition) }
        var records: [Record] = []
        while records.last.map({ $0.offset + 1 < end }) ?? true {
            guard let message = rd_kafka_consume(topic, partition, timeoutMs) else {
                throw KafkaError(rd_kafka_last_error(), "read \(topicName)/\(partition) at \(records.last.map { $0.offset + 1 } ?? offset)")
            }
            defer { rd_kafka_message_destroy(message) }
            let m = message.pointee
            if m.err == RD_KAFKA_RESP_ERR__PARTITION_EOF { break }
            if m.err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(m.err, "read \(topicName)/\(partition)") }
            func bytes(_ pointer: UnsafeMutableRawPointer?, _ count: Int) -> [UInt8]? {
                pointer.map { Array(UnsafeRawBufferPointer(start: $0, count: count)) }
            }
            records.append(Record(partition: partition, offset: m.offset, key: bytes(m.key, m.key_len), value: bytes(m.payload, m.len)))
        }
        return records
    }

    /// The partition's last record, nil when it holds none.
    public func last(partition: Int32) throws(KafkaError) -> Record? {
        let (start, end) = try range(partition: partition)
        guard end > start else { return nil }
        return try records(partition: partition, from: end - 1).last
    }
}
