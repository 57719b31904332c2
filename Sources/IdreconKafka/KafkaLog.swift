import CRdKafka
import Foundation
import Logging

/// librdkafka's own log lines (a broker down, a connection refused), through swift-log with
/// their level, so that they follow `--log-format` and `--log-level` like every other line.
/// Every client is configured with this callback (`makeConfiguration`); librdkafka calls it on
/// its own threads. Until a command routes them (`route(to:)`), warnings and worse go to
/// stderr as one plain line each.
public enum KafkaLog {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var logger: Logger?

    /// Sends librdkafka's lines to `logger` (its level filters them).
    public static func route(to logger: Logger) {
        lock.withLock { Self.logger = logger }
    }

    /// syslog levels, as librdkafka uses them, in swift-log's terms.
    static func level(_ syslog: Int32) -> Logger.Level {
        switch syslog {
        case ...2: .critical
        case 3: .error
        case 4: .warning
        case 5: .notice
        case 6: .info
        default: .debug
        }
    }

    static func emit(syslog: Int32, facility: String, message: String) {
        let level = level(syslog)
        if let logger = lock.withLock({ Self.logger }) {
            logger.log(level: level, "\(message)", metadata: ["facility": "\(facility)"])
        } else if level >= .warning {
            FileHandle.standardError.write(Data("librdkafka \(level) \(facility): \(message)\n".utf8))
        }
    }

    /// The C callback every configuration gets.
    static let callback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
        _, level, facility, message in
        KafkaLog.emit(syslog: level, facility: facility.map { String(cString: $0) } ?? "",
                      message: message.map { String(cString: $0) } ?? "")
    }
}
