import CRdKafka

/// An in-process Kafka cluster (librdkafka's mock cluster): a real Kafka-protocol server
/// on loopback that any client can reach at `bootstrap`, with fault injection.
public final class MockCluster: @unchecked Sendable {
    private let handle: OpaquePointer
    private let cluster: OpaquePointer
    /// `host:port,…` for `bootstrap.servers`.
    public let bootstrap: String

    /// Kafka protocol request types used for fault injection.
    public enum Request: Int16, Sendable {
        case produce = 0, fetch = 1, listOffsets = 2, metadata = 3, offsetCommit = 8, offsetFetch = 9, findCoordinator = 10
        case joinGroup = 11, heartbeat = 12, syncGroup = 14
    }

    public init(brokers: Int = 1) throws(KafkaError) {
        let conf = try makeConfiguration([("log_level", "3")])
        handle = try makeClient(RD_KAFKA_PRODUCER, conf)
        guard let cluster = rd_kafka_mock_cluster_new(handle, Int32(brokers)) else {
            rd_kafka_destroy(handle)
            throw .configuration("cannot start the embedded Kafka cluster")
        }
        self.cluster = cluster
        bootstrap = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster)
        rd_kafka_destroy(handle)
    }

    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws(KafkaError) {
        let err = rd_kafka_mock_topic_create(cluster, name, Int32(partitions), Int32(replicationFactor))
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "create topic \(name)") }
    }

    /// The next `errors.count` requests of this type fail with these librdkafka error codes.
    public func pushRequestErrors(_ request: Request, _ errors: [Int32]) {
        let codes = errors.map { rd_kafka_resp_err_t(rawValue: $0) }
        codes.withUnsafeBufferPointer { rd_kafka_mock_push_request_errors_array(cluster, request.rawValue, codes.count, $0.baseAddress) }
    }

    public func setBroker(_ id: Int32, up: Bool) {
        if up { _ = rd_kafka_mock_broker_set_up(cluster, id) } else { _ = rd_kafka_mock_broker_set_down(cluster, id) }
    }

    public func setLeader(topic: String, partition: Int32, broker: Int32) {
        _ = rd_kafka_mock_partition_set_leader(cluster, topic, partition, broker)
    }

    /// librdkafka error codes for fault injection.
    public enum ErrorCode {
        public static let notLeader: Int32 = RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION.rawValue
        public static let requestTimedOut: Int32 = RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT.rawValue
        public static let coordinatorNotAvailable: Int32 = RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE.rawValue
        public static let transport: Int32 = RD_KAFKA_RESP_ERR__TRANSPORT.rawValue
        public static let unknownTopicOrPartition: Int32 = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART.rawValue
    }
}
