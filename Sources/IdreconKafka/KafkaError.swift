import CRdKafka

/// The one error type of the Kafka layer: librdkafka's code (stable, from
/// `rd_kafka_resp_err_t`) or a configuration failure, with a readable message.
public struct KafkaError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable { case configuration, client }
    public var kind: Kind
    /// librdkafka's error code (`rd_kafka_resp_err_t`), 0 for configuration errors.
    public var code: Int32
    public var message: String

    public var description: String { message }

    public static func configuration(_ message: String) -> KafkaError { KafkaError(kind: .configuration, code: 0, message: message) }

    /// Codes that mean no broker answered (transport failure, timeout, all brokers down):
    /// asking again at once would fail the same way.
    public static let unreachableCodes: Set<Int32> = [
        RD_KAFKA_RESP_ERR__TRANSPORT.rawValue, RD_KAFKA_RESP_ERR__TIMED_OUT.rawValue, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN.rawValue,
    ]

    init(kind: Kind, code: Int32, message: String) {
        self.kind = kind
        self.code = code
        self.message = message
    }

    init(_ err: rd_kafka_resp_err_t, _ context: String) {
        self.init(kind: .client, code: err.rawValue, message: "\(context): \(String(cString: rd_kafka_err2str(err))) (\(String(cString: rd_kafka_err2name(err))))")
    }
}

/// Builds an `rd_kafka_conf_t` from key/value pairs; unknown keys and bad values are
/// configuration errors naming the key. Its log lines go through `KafkaLog`. Every client starts
/// here: librdkafka is loaded here first (`CRdKafka`), and a machine without it is told so.
func makeConfiguration(_ settings: [(String, String)]) throws(KafkaError) -> OpaquePointer {
    if let failure = idrecon_rdkafka_load_error() { throw .configuration(String(cString: failure)) }
    let conf = rd_kafka_conf_new()!
    rd_kafka_conf_set_log_cb(conf, KafkaLog.callback)
    var errstr = [CChar](repeating: 0, count: 512)
    for (key, value) in settings {
        let result = rd_kafka_conf_set(conf, key, value, &errstr, errstr.count)
        if result != RD_KAFKA_CONF_OK {
            rd_kafka_conf_destroy(conf)
            let detail = String(decoding: errstr.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw .configuration("Kafka setting \(key)=\(value): \(detail)")
        }
    }
    return conf
}

/// Creates a client handle from a configuration (which it takes ownership of).
func makeClient(_ type: rd_kafka_type_t, _ conf: OpaquePointer) throws(KafkaError) -> OpaquePointer {
    var errstr = [CChar](repeating: 0, count: 512)
    guard let rk = rd_kafka_new(type, conf, &errstr, errstr.count) else {
        rd_kafka_conf_destroy(conf)
        throw .configuration("cannot create Kafka client: " + String(decoding: errstr.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return rk
}
