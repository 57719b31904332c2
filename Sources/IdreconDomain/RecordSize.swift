/// The record size limit (SPEC section 2): a record longer than the limit is `malformed_json`
/// without being parsed, and only its first `keptBytes` are stored in quarantine, so reading
/// a 1 GB line (or `/dev/zero`) stays bounded in memory.
public enum RecordSize {
    /// Default for `--max-record-bytes`: 1 MiB, far above any real login event (~1 KB).
    public static let defaultLimit = 1 << 20
    /// Bytes of an oversized record kept in quarantine (its beginning).
    public static let keptBytes = 1 << 16

    /// The rejection of a record of `bytes` bytes over `limit`.
    public static func rejection(bytes: Int64, limit: Int) -> Rejection {
        Rejection(.malformedJSON, "record of \(bytes) bytes exceeds the limit of \(limit) bytes (--max-record-bytes); "
            + "its first \(min(Int64(keptBytes), bytes)) bytes are kept")
    }

    /// Whether a quarantine message is `rejection`'s (the record is kept only in part).
    public static func isOversizeRejection(_ message: String) -> Bool {
        message.hasPrefix("record of ") && message.contains(" bytes exceeds the limit of ")
    }
}

/// Finds the value of the first `"event_id": "…"` member in a byte stream fed in pieces,
/// without parsing it, so an oversized record still names its event in quarantine. Best
/// effort: it only accepts a value that is a valid event ID (1-128 of `[A-Za-z0-9._:-]`).
public struct EventIDScanner: Sendable {
    private static let pattern = Array(#""event_id""#.utf8)
    private enum State: Sendable { case key(Int), beforeColon, beforeValue, value }
    private var state = State.key(0)
    private var value: [UInt8] = []
    public private(set) var eventID: String?

    public init() {}

    public mutating func feed(_ bytes: some Sequence<UInt8>) {
        guard eventID == nil else { return }
        for byte in bytes {
            step(byte)
            if eventID != nil { return }
        }
    }

    private mutating func step(_ byte: UInt8) {
        let space = byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
        switch state {
        case let .key(matched):
            if byte == Self.pattern[matched] {
                state = matched + 1 == Self.pattern.count ? .beforeColon : .key(matched + 1)
            } else {
                state = byte == Self.pattern[0] ? .key(1) : .key(0)
            }
        case .beforeColon:
            if byte == UInt8(ascii: ":") { state = .beforeValue } else if !space { restart(byte) }
        case .beforeValue:
            if byte == UInt8(ascii: "\"") { state = .value; value.removeAll() } else if !space { restart(byte) }
        case .value:
            if byte == UInt8(ascii: "\"") {
                if !value.isEmpty { eventID = String(decoding: value, as: UTF8.self) } else { restart(byte) }
            } else if value.count < 128, Self.isEventIDByte(byte) {
                value.append(byte)
            } else {
                restart(byte)
            }
        }
    }

    private mutating func restart(_ byte: UInt8) {
        state = .key(0)
        value.removeAll()
        if byte == Self.pattern[0] { state = .key(1) }
    }

    private static func isEventIDByte(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
            || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: ":") || b == UInt8(ascii: "-")
    }
}
