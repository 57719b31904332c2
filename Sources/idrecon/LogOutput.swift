import ArgumentParser
import Foundation
import IdreconDomain
import Logging

/// How log lines are written to standard error.
enum LogFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json
}

/// `--log-level` and `--log-format`, for the commands that log.
struct LoggingOptions: ParsableArguments {
    @Option(help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: Logger.Level = .info
    @Option(help: "text (human) or json (one object per line: timestamp, level, logger, message, metadata).")
    var logFormat: LogFormat = .text

    func logger(_ label: String) -> Logger {
        let format = logFormat
        LoggingSystem.bootstrap { label in
            switch format {
            case .text:
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = .trace
                return handler
            case .json:
                return JSONLogHandler(label: label)
            }
        }
        var logger = Logger(label: label)
        logger.logLevel = logLevel
        return logger
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// One JSON object per line on standard error, for log shippers. Metadata values are
/// strings (nested metadata becomes objects and arrays); the line is written with one
/// `write` so lines of concurrent threads never interleave.
struct JSONLogHandler: LogHandler {
    let label: String
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        let record = JSONValue.object([
            ("timestamp", .string(Timestamp.format(Int64(Date().timeIntervalSince1970 * 1000)))),
            ("level", .string(event.level.rawValue)),
            ("logger", .string(label)),
            ("message", .string(event.message.description)),
            ("metadata", Self.json(.dictionary(merged))),
        ])
        var bytes = Array(CanonicalJSON.encode(record).utf8)
        bytes.append(0x0A)
        bytes.withUnsafeBytes { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }

    static func json(_ value: Logger.Metadata.Value) -> JSONValue {
        switch value {
        case let .string(s): return .string(s)
        case let .stringConvertible(c): return .string(c.description)
        case let .array(items): return .array(items.map(json))
        case let .dictionary(d): return .object(d.sorted { $0.key < $1.key }.map { ($0.key, json($0.value)) })
        }
    }
}
