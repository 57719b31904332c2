import Crypto
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The total order of events in event time: `(occurred_at, event_id)`. "Latest" always
/// means the greatest key.
public struct EventKey: Comparable, Hashable, Sendable {
    public var at: Int64
    public var eventID: String

    public init(at: Int64, eventID: String) {
        self.at = at
        self.eventID = eventID
    }

    /// Byte equality, as everywhere data is compared (Swift's `String ==` is canonical equivalence).
    public static func == (a: EventKey, b: EventKey) -> Bool { a.at == b.at && a.eventID.sameBytes(as: b.eventID) }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(at)
        hasher.combine(eventID.utf8.count)
        for byte in eventID.utf8 { hasher.combine(byte) }
    }

    public static func < (a: EventKey, b: EventKey) -> Bool {
        a.at != b.at ? a.at < b.at : a.eventID.utf8.lexicographicallyPrecedes(b.eventID.utf8)
    }
}

/// Stable 63-bit keys for indexing text identifiers by integer (collisions are possible
/// and resolved by comparing the text).
public enum StableHash {
    public static func key(_ parts: String...) -> Int64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for (i, part) in parts.enumerated() { mix(&hash, part.utf8, first: i == 0) }
        return Int64(bitPattern: hash >> 1)
    }

    /// `key` of texts given as their UTF-8 bytes.
    public static func key(utf8 parts: UnsafeBufferPointer<UInt8>...) -> Int64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for (i, part) in parts.enumerated() { mix(&hash, part, first: i == 0) }
        return Int64(bitPattern: hash >> 1)
    }

    private static func mix(_ hash: inout UInt64, _ part: some Sequence<UInt8>, first: Bool) {
        if !first { hash = (hash ^ 0x1F) &* 0x0000_0100_0000_01B3 }
        for byte in part { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
    }
}

/// Identity link keys (SPEC section 4).
public enum LinkKey {
    /// Trimmed, lower-cased form of an e-mail address.
    public static func normalizedEmail(_ email: String) -> String {
        guard email.isASCII else { return email.trimmingWhitespace().lowercased() }
        // ASCII, as almost every address is: the same trim and lower-casing, byte by byte.
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || (0x09...0x0D).contains(b) }
        let bytes = email.utf8
        guard let first = bytes.firstIndex(where: { !isSpace($0) }) else { return "" }
        let last = bytes.lastIndex(where: { !isSpace($0) })!
        let trimmed = bytes[first...last]
        return String(unsafeUninitializedCapacity: trimmed.count) { out in
            for (i, b) in trimmed.enumerated() { out[i] = (0x41...0x5A).contains(b) ? b | 0x20 : b }
            return trimmed.count
        }
    }

    /// SHA-256 hex of the normalized e-mail: the only form an e-mail is stored in projections.
    public static func emailHash(_ email: String) -> String {
        sha256Hex(normalizedEmail(email))
    }

    /// The key string stored for an e-mail link.
    public static func email(_ email: String) -> String { "email:" + emailHash(email) }

    /// The key string stored for a token-for-business link.
    public static func tokenForBusiness(_ token: String) -> String { tokenForBusinessPrefix + token }

    public static let tokenForBusinessPrefix = "tfb:"

    public static func sha256Hex(_ text: String) -> String {
        var text = text
        return text.withUTF8 { hex(SHA256.hash(data: $0)) }
    }

    /// Lower-case hex of bytes (digests, for keys and projection digests).
    public static func hex(_ bytes: some Collection<UInt8>) -> String {
        String(unsafeUninitializedCapacity: 2 * bytes.count) { out in
            var i = 0
            for byte in bytes {
                out[i] = hexDigits[Int(byte >> 4)]
                out[i + 1] = hexDigits[Int(byte & 0xF)]
                i += 2
            }
            return i
        }
    }

    /// Lower-case hex of a digest.
    public static func hex(_ digest: some Digest) -> String { digest.withUnsafeBytes { hex($0) } }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
}

extension Optional where Wrapped == String {
    /// Byte equality of optional texts: both absent, or both present with the same bytes.
    @inlinable
    public func sameBytes(as other: String?) -> Bool {
        switch (self, other) {
        case let (a?, b?): a.sameBytes(as: b)
        case (nil, nil): true
        default: false
        }
    }
}

extension String {
    /// Whether both hold the same UTF-8 bytes: "the same data". Swift's `==` instead treats
    /// canonically equivalent texts (`é` and `e` + U+0301) as equal.
    @inlinable
    public func sameBytes(as other: String) -> Bool {
        var a = self, b = other // copies of the references: `withUTF8` needs them mutable
        return a.withUTF8 { x in b.withUTF8 { y in Self.sameBytes(x, y) } }
    }

    /// Whether every byte is below 0x80: the texts the validator's ASCII fast paths take.
    var isASCII: Bool { utf8.allSatisfy { $0 < 0x80 } }

    /// Whether this text's UTF-8 bytes order before `other`'s (SQLite's BINARY collation).
    @inlinable
    public func bytesPrecede(_ other: String) -> Bool {
        var a = self, b = other
        return a.withUTF8 { x in b.withUTF8 { y in Self.bytesPrecede(x, y) } }
    }

    /// Byte equality of two buffers (`memcmp`: the projections compare millions of keys).
    @inlinable
    public static func sameBytes(_ x: UnsafeBufferPointer<UInt8>, _ y: UnsafeBufferPointer<UInt8>) -> Bool {
        x.count == y.count && (x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0)
    }

    /// Byte order of two buffers as SQLite's BINARY collation orders text: -1, 0 or 1 as `x`
    /// precedes, equals or follows `y` (one `memcmp`).
    @inlinable
    public static func byteOrder(_ x: UnsafeBufferPointer<UInt8>, _ y: UnsafeBufferPointer<UInt8>) -> Int {
        let common = Swift.min(x.count, y.count)
        let order = common == 0 ? 0 : memcmp(x.baseAddress!, y.baseAddress!, common)
        if order != 0 { return order < 0 ? -1 : 1 }
        return x.count < y.count ? -1 : x.count == y.count ? 0 : 1
    }

    /// Bytes `start..<start + 8` of this text's UTF-8, big-endian, zero beyond its end: words
    /// that differ order as the texts' bytes do, so sorts compare them before the bytes.
    public func bytesWord(at start: Int) -> UInt64 {
        var text = self // a copy of the reference: `withUTF8` makes it native in place if needed
        return text.withUTF8 { bytes in
            var value: UInt64 = 0
            for i in start..<start + 8 { value = value << 8 | UInt64(i < bytes.count ? bytes[i] : 0) }
            return value
        }
    }

    /// Byte order of two buffers, as SQLite's BINARY collation orders text.
    @inlinable
    public static func bytesPrecede(_ x: UnsafeBufferPointer<UInt8>, _ y: UnsafeBufferPointer<UInt8>) -> Bool {
        let common = Swift.min(x.count, y.count)
        let order = common == 0 ? 0 : memcmp(x.baseAddress!, y.baseAddress!, common)
        return order != 0 ? order < 0 : x.count < y.count
    }

    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }
}
