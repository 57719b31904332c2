import GRDB
import IdreconDomain

/// Where a record came from: a file (`file:/abs/path`, position = line number) or a
/// Kafka partition (`kafka:topic/partition`, position = offset).
public struct RecordOrigin: Sendable, Equatable {
    public var source: String
    public var position: Int64
    public var partition: Int32?
    public var key: [UInt8]?

    public init(source: String, position: Int64, partition: Int32? = nil, key: [UInt8]? = nil) {
        self.source = source
        self.position = position
        self.partition = partition
        self.key = key
    }
}

/// One consumed record with its stateless validation already done.
public struct IncomingRecord: Sendable {
    public var raw: [UInt8]
    public var origin: RecordOrigin
    public var validation: Result<LoginEvent, Rejection> {
        didSet { derived = Self.derived(validation) }
    }
    /// Set when this record is a quarantine entry being retried.
    public var quarantineID: Int64?
    /// The valid event's derived `events` columns, computed where the record is validated
    /// (off the single writer).
    private(set) var derived: LoggedEvent.Derived?
    /// The event ID of a record that is not kept whole (oversized), when one could be read.
    public private(set) var knownEventID: String?

    /// Validates `raw`; a record over `maxBytes` is `malformed_json` without being parsed,
    /// and only its beginning is kept (`RecordSize`).
    public init(raw: [UInt8], origin: RecordOrigin, maxBytes: Int = RecordSize.defaultLimit) {
        guard raw.count <= maxBytes else {
            var scanner = EventIDScanner()
            scanner.feed(raw)
            self.init(oversized: Array(raw.prefix(RecordSize.keptBytes)), bytes: Int64(raw.count), limit: maxBytes,
                      eventID: scanner.eventID, origin: origin)
            return
        }
        self.init(raw: raw, origin: origin, validation: EventValidator.validate(raw))
    }

    /// A record of `bytes` bytes over `limit`, of which `prefix` is kept.
    public init(oversized prefix: [UInt8], bytes: Int64, limit: Int, eventID: String?, origin: RecordOrigin) {
        self.init(raw: prefix, origin: origin, validation: .failure(RecordSize.rejection(bytes: bytes, limit: limit)))
        knownEventID = eventID
    }

    private static func derived(_ validation: Result<LoginEvent, Rejection>) -> LoggedEvent.Derived? {
        if case let .success(event) = validation { return LoggedEvent.Derived(event) }
        return nil
    }

    /// A record validated by the caller (e.g. a quarantine entry being retried).
    public init(raw: [UInt8], origin: RecordOrigin, validation: Result<LoginEvent, Rejection>, quarantineID: Int64? = nil) {
        self.raw = raw
        self.origin = origin
        self.validation = validation
        self.quarantineID = quarantineID
        derived = Self.derived(validation)
    }
}

/// How far a source has been consumed: the resume point written with each batch.
public struct ConsumedPosition: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    public static let databaseTableName = "consumed_positions"
    /// `file:/abs/path` or `kafka:topic/partition`.
    public var source: String
    /// Byte offset (files) or next offset (Kafka).
    public var position: Int64
    /// Records consumed so far from this source (line count for files).
    public var records: Int64
    public var updatedAt: Int64

    public init(source: String, position: Int64, records: Int64, updatedAt: Int64) {
        self.source = source
        self.position = position
        self.records = records
        self.updatedAt = updatedAt
    }

    enum CodingKeys: String, CodingKey {
        case source, position, records
        case updatedAt = "updated_at"
    }
}

/// A quarantined record, raw bytes kept byte for byte.
public struct QuarantineEntry: Codable, FetchableRecord, Sendable, Equatable {
    public static let databaseTableName = "quarantine"
    public var id: Int64
    public var source: String
    public var position: Int64
    public var partition: Int32?
    public var recordKey: [UInt8]?
    public var raw: [UInt8]
    public var code: String
    public var message: String
    public var eventID: String?
    public var quarantinedAt: Int64

    enum CodingKeys: String, CodingKey {
        case id, source, position, partition, raw, code, message
        case recordKey = "record_key"
        case eventID = "event_id"
        case quarantinedAt = "quarantined_at"
    }

    public init(row: Row) throws {
        id = row["id"]
        source = row["source"]
        position = row["position"]
        partition = row["partition"]
        recordKey = (row["record_key"] as Data?).map { [UInt8]($0) }
        raw = [UInt8]((row["raw"] as Data?) ?? Data())
        code = row["code"]
        message = row["message"]
        eventID = row["event_id"]
        quarantinedAt = row["quarantined_at"]
    }
}

/// What one appended batch did.
public struct BatchOutcome: Sendable, Equatable {
    public var appended = 0
    public var duplicates = 0
    public var quarantined: [ReasonCode: Int] = [:]

    public init() {}

    public var quarantinedTotal: Int { quarantined.values.reduce(0, +) }

    public mutating func add(_ other: BatchOutcome) {
        appended += other.appended
        duplicates += other.duplicates
        quarantined.merge(other.quarantined, uniquingKeysWith: +)
    }
}

import Foundation

/// Positions of a source that were never read: the source no longer held them (Kafka
/// retention). Recorded once per range; `last_position` is inclusive.
public struct SkippedRange: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    public static let databaseTableName = "skipped_ranges"
    public var source: String
    public var firstPosition: Int64
    public var lastPosition: Int64
    public var detectedAt: Int64

    public var records: Int64 { lastPosition - firstPosition + 1 }

    public init(source: String, firstPosition: Int64, lastPosition: Int64, detectedAt: Int64) {
        self.source = source
        self.firstPosition = firstPosition
        self.lastPosition = lastPosition
        self.detectedAt = detectedAt
    }

    enum CodingKeys: String, CodingKey {
        case source
        case firstPosition = "first_position"
        case lastPosition = "last_position"
        case detectedAt = "detected_at"
    }
}
