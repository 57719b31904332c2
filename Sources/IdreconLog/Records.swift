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
    /// Set when this record is a quarantine entry being retried.
    public var quarantineID: Int64?
    /// What the append needs of the record, decided where it is validated (off the single
    /// writer): the accepted event's row image, or why the record is quarantined.
    package let verdict: Result<LoggedEvent.Image, Rejection>
    /// The event ID of a record that is not kept whole (oversized), when one could be read.
    public private(set) var knownEventID: String?

    /// The validated event: for an accepted record, decoded again from its canonical payload
    /// (a record keeps only what the append writes).
    public var validation: Result<LoginEvent, Rejection> {
        switch verdict {
        case let .success(image): EventValidator.validate(Array(image.payload.utf8))
        case let .failure(rejection): .failure(rejection)
        }
    }

    /// Validates `raw`, and with `tokens` the `id_token` of a limited login; a record over
    /// `maxBytes` is `malformed_json` without being parsed, and only its beginning is kept
    /// (`RecordSize`).
    public init(raw: [UInt8], origin: RecordOrigin, maxBytes: Int = RecordSize.defaultLimit, tokens: TokenVerifier? = nil) {
        guard raw.count <= maxBytes else {
            var scanner = EventIDScanner()
            scanner.feed(raw)
            self.init(oversized: Array(raw.prefix(RecordSize.keptBytes)), bytes: Int64(raw.count), limit: maxBytes,
                      eventID: scanner.eventID, origin: origin)
            return
        }
        // The fast path when it applies: an event whose token is to be verified takes the full
        // one, since verification reads the `LoginEvent`.
        let plain = raw.withUnsafeBufferPointer { record in
            EventValidator.acceptPlain(record).flatMap { event in
                tokens != nil && TokenVerifier.checks(type: event.type, tracking: event.tracking)
                    ? nil : LoggedEvent.Image(event, record: record)
            }
        }
        if let plain {
            self.init(raw: raw, origin: origin, verdict: .success(plain), quarantineID: nil)
            return
        }
        var validation = EventValidator.validate(raw)
        if let tokens, case let .success(event) = validation, let failure = tokens.check(event) {
            validation = .failure(Rejection(.tokenInvalid, failure.detail))
        }
        self.init(raw: raw, origin: origin, validation: validation)
    }

    /// A record of `bytes` bytes over `limit`, of which `prefix` is kept.
    public init(oversized prefix: [UInt8], bytes: Int64, limit: Int, eventID: String?, origin: RecordOrigin) {
        self.init(raw: prefix, origin: origin, validation: .failure(RecordSize.rejection(bytes: bytes, limit: limit)))
        knownEventID = eventID
    }

    /// A record validated by the caller (e.g. a quarantine entry being retried).
    public init(raw: [UInt8], origin: RecordOrigin, validation: Result<LoginEvent, Rejection>, quarantineID: Int64? = nil) {
        self.init(raw: raw, origin: origin, verdict: validation.map(LoggedEvent.Image.init), quarantineID: quarantineID)
    }

    private init(raw: [UInt8], origin: RecordOrigin, verdict: Result<LoggedEvent.Image, Rejection>, quarantineID: Int64?) {
        self.raw = raw
        self.origin = origin
        self.verdict = verdict
        self.quarantineID = quarantineID
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
