/// A parsed JSON value. Objects keep their members in document order; numbers keep
/// their lexeme so that re-encoding never changes a value the producer sent.
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.number(a), .number(b)): return a.sameBytes(as: b)
        case let (.string(a), .string(b)): return a.sameBytes(as: b)
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.key.sameBytes(as: $1.key) && $0.value == $1.value }
        default: return false
        }
    }

    /// The member named `key` of an object, or nil.
    public subscript(key: String) -> JSONValue? {
        guard case let .object(members) = self else { return nil }
        return members.first(where: { $0.key.sameBytes(as: key) })?.value
    }
}

/// Why a byte sequence is not a JSON value.
public struct JSONParseError: Error, Equatable, Sendable {
    public var message: String
    public var offset: Int
}

/// A strict RFC 8259 parser over UTF-8 bytes. Rejects invalid UTF-8, duplicate object
/// keys, trailing garbage and nesting deeper than `maxDepth`.
public struct JSONParser {
    public static let maxDepth = 64

    public static func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { buffer throws(JSONParseError) in
            guard isUTF8(buffer) else {
                throw JSONParseError(message: "not valid UTF-8", offset: 0)
            }
            var parser = Cursor(bytes: buffer)
            parser.skipWhitespace()
            let value = try parser.parseValue(depth: 0)
            parser.skipWhitespace()
            guard parser.index == buffer.count else {
                throw JSONParseError(message: "unexpected data after the JSON value", offset: parser.index)
            }
            return value
        }
    }

    /// Whether `buffer` is valid UTF-8. Most texts are ASCII: checked eight bytes at a time,
    /// without building a String.
    public static func isUTF8(_ buffer: UnsafeBufferPointer<UInt8>) -> Bool {
        isASCII(buffer) || String(validating: buffer, as: UTF8.self) != nil
    }

    /// Whether every byte is below 0x80.
    static func isASCII(_ buffer: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = buffer.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        var i = 0
        var high: UInt64 = 0
        while i + 8 <= buffer.count {
            high |= raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < buffer.count {
            high |= UInt64(buffer[i])
            i += 1
        }
        return high & 0x8080_8080_8080_8080 == 0
    }

    private struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        func fail(_ message: String) -> JSONParseError { JSONParseError(message: message, offset: index) }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return
                }
            }
        }

        mutating func expect(_ literal: StaticString, _ value: JSONValue) throws(JSONParseError) -> JSONValue {
            let count = literal.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw fail("truncated literal") }
            for i in 0..<count where bytes[index + i] != literal.utf8Start[i] { throw fail("invalid literal") }
            index += count
            return value
        }

        mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
            guard depth < JSONParser.maxDepth else { throw fail("nesting deeper than \(JSONParser.maxDepth)") }
            guard index < bytes.count else { throw fail("unexpected end of input") }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try parseObject(depth: depth)
            case UInt8(ascii: "["): return try parseArray(depth: depth)
            case UInt8(ascii: "\""): return .string(try parseString())
            case UInt8(ascii: "t"): return try expect("true", .bool(true))
            case UInt8(ascii: "f"): return try expect("false", .bool(false))
            case UInt8(ascii: "n"): return try expect("null", .null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
            default: throw fail("unexpected character")
            }
        }

        mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
            index += 1
            var members: [(key: String, value: JSONValue)] = []
            // Keys are compared by bytes (RFC 8259: "é" and "e\u0301" differ); a few through
            // a hash of their bytes, compared whole only when the hashes match; past a few
            // through a set, so a record with many keys stays linear.
            var hashes: [UInt64] = []
            var seen = Set<[UInt8]>()
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            members.reserveCapacity(16)
            hashes.reserveCapacity(16)
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected an object key") }
                let key = try parseString()
                let duplicate: Bool
                if members.count < 16 {
                    let hash = key.utf8.reduce(0xCBF2_9CE4_8422_2325 as UInt64) { ($0 ^ UInt64($1)) &* 0x100_0000_01B3 }
                    duplicate = hashes.indices.contains { hashes[$0] == hash && members[$0].key.sameBytes(as: key) }
                    hashes.append(hash)
                } else {
                    if seen.isEmpty { for member in members { seen.insert(Array(member.key.utf8)) } }
                    duplicate = !seen.insert(Array(key.utf8)).inserted
                }
                if duplicate { throw fail("duplicate key \"\(key.prefix(64))\"") }
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                index += 1
                skipWhitespace()
                members.append((key, try parseValue(depth: depth + 1)))
                skipWhitespace()
                guard index < bytes.count else { throw fail("unterminated object") }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
                throw fail("expected ',' or '}'")
            }
        }

        mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
            index += 1
            var elements: [JSONValue] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            while true {
                skipWhitespace()
                elements.append(try parseValue(depth: depth + 1))
                skipWhitespace()
                guard index < bytes.count else { throw fail("unterminated array") }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
                throw fail("expected ',' or ']'")
            }
        }

        mutating func parseNumber() throws(JSONParseError) -> JSONValue {
            let start = index
            func digits(_ c: inout Cursor) -> Int {
                let s = c.index
                while c.index < c.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(c.bytes[c.index]) { c.index += 1 }
                return c.index - s
            }
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count else { throw fail("truncated number") }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
            } else if digits(&self) == 0 {
                throw fail("invalid number")
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digits(&self) > 0 else { throw fail("invalid number fraction") }
            }
            if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard digits(&self) > 0 else { throw fail("invalid number exponent") }
            }
            return .number(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self))
        }

        mutating func parseString() throws(JSONParseError) -> String {
            index += 1
            let start = index
            // Fast path: no escapes.
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let s = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                    index += 1
                    return s
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { throw fail("control character in string") }
                index += 1
            }
            var scalars = Array(bytes[start..<index])
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return String(decoding: scalars, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { throw fail("truncated escape") }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""): scalars.append(0x22)
                    case UInt8(ascii: "\\"): scalars.append(0x5C)
                    case UInt8(ascii: "/"): scalars.append(0x2F)
                    case UInt8(ascii: "b"): scalars.append(0x08)
                    case UInt8(ascii: "f"): scalars.append(0x0C)
                    case UInt8(ascii: "n"): scalars.append(0x0A)
                    case UInt8(ascii: "r"): scalars.append(0x0D)
                    case UInt8(ascii: "t"): scalars.append(0x09)
                    case UInt8(ascii: "u"):
                        var code = try hex4()
                        if (0xD800...0xDBFF).contains(code) {
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                            else { throw fail("unpaired surrogate") }
                            index += 2
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw fail("unpaired surrogate") }
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(code) {
                            throw fail("unpaired surrogate")
                        }
                        scalars.append(contentsOf: String(Character(Unicode.Scalar(code)!)).utf8)
                    default: throw fail("invalid escape")
                    }
                default:
                    if byte < 0x20 { throw fail("control character in string") }
                    scalars.append(byte)
                    index += 1
                }
            }
            throw fail("unterminated string")
        }

        mutating func hex4() throws(JSONParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw fail("truncated \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let c = bytes[index]
                let digit: UInt8
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = c - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = c - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = c - UInt8(ascii: "A") + 10
                default: throw fail("invalid \\u escape")
                }
                value = value << 4 | UInt32(digit)
                index += 1
            }
            return value
        }
    }
}

/// Canonical JSON encoding: object keys sorted by UTF-8 bytes, no insignificant
/// whitespace, minimal string escapes, numbers as sent. Two payloads are the same event
/// iff their canonical encodings are equal.
public enum CanonicalJSON {
    public static func encode(_ value: JSONValue) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        write(value, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    public static func write(_ value: JSONValue, into out: inout [UInt8]) {
        write(value, sortKeys: true, into: &out)
    }

    /// Compact JSON; object keys sorted by UTF-8 bytes when `sortKeys`, else in document order.
    static func write(_ value: JSONValue, sortKeys: Bool, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case let .bool(b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case let .number(n): out.append(contentsOf: n.utf8)
        case let .string(s): writeString(s, into: &out)
        case let .array(elements):
            out.append(UInt8(ascii: "["))
            for (i, element) in elements.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                write(element, sortKeys: sortKeys, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case let .object(members):
            out.append(UInt8(ascii: "{"))
            func member(_ member: (key: String, value: JSONValue), first: Bool) {
                if !first { out.append(UInt8(ascii: ",")) }
                writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(member.value, sortKeys: sortKeys, into: &out)
            }
            if sortKeys {
                for (n, i) in byteOrder(of: members).enumerated() { member(members[i], first: n == 0) }
            } else {
                for (n, m) in members.enumerated() { member(m, first: n == 0) }
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// The indices of `members` in their keys' byte order. Indices are sorted, not members
    /// (moving a member retains and releases its texts), by the keys' first eight bytes,
    /// and only keys that share those by all their bytes: every event is encoded once.
    static func byteOrder(of members: [(key: String, value: JSONValue)]) -> [Int] {
        var order = members.indices.map { (prefix: members[$0].key.bytesWord(at: 0), index: $0) }
        order.sort { a, b in
            a.prefix != b.prefix ? a.prefix < b.prefix : members[a.index].key.bytesPrecede(members[b.index].key)
        }
        return order.map(\.index)
    }

    public static func writeString(_ s: String, into out: inout [UInt8]) {
        var s = s // a copy of the reference: `withUTF8` makes it native in place if needed
        s.withUTF8 { writeString($0, into: &out) }
    }

    /// Runs of bytes that need no escape are copied whole: digests and canonical payloads
    /// write every text of the projections and of each event through here.
    public static func writeString(_ bytes: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var run = 0
        for i in 0..<bytes.count {
            let byte = bytes[i]
            guard byte < 0x20 || byte == 0x22 || byte == 0x5C else { continue }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<i]))
            escape(byte, into: &out)
            run = i + 1
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run...]))
        out.append(UInt8(ascii: "\""))
    }

    private static func escape(_ byte: UInt8, into out: inout [UInt8]) {
        switch byte {
        case 0x22: out.append(contentsOf: [0x5C, 0x22])
        case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
        case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
        case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
        case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
        case 0x08: out.append(contentsOf: [0x5C, UInt8(ascii: "b")])
        case 0x0C: out.append(contentsOf: [0x5C, UInt8(ascii: "f")])
        default:
            let hex = Array("0123456789abcdef".utf8)
            out.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
        }
    }
}

extension CanonicalJSON {
    /// Objects that all have the same keys (the rows of an answer), written in canonical order
    /// without a `JSONValue` object per row: the keys are ordered and encoded once. A batch of
    /// 1,000 access answers spent more CPU building and sorting their objects than reading them.
    public struct Layout: Sendable {
        /// The keys' indices as given, in canonical order, each with its encoded `"key":`.
        private let members: [(index: Int, key: [UInt8])]

        public init(_ keys: [String]) {
            members = CanonicalJSON.byteOrder(of: keys.map { ($0, JSONValue.null) }).map { i in
                var encoded: [UInt8] = []
                CanonicalJSON.writeString(keys[i], into: &encoded)
                encoded.append(UInt8(ascii: ":"))
                return (i, encoded)
            }
        }

        /// `{…}`, the value of each key written by `value(i, &out)`, `i` its index as given.
        public func write(into out: inout [UInt8], _ value: (Int, inout [UInt8]) -> Void) {
            out.append(UInt8(ascii: "{"))
            for (n, member) in members.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: member.key)
                value(member.index, &out)
            }
            out.append(UInt8(ascii: "}"))
        }

        /// `{…}` of `values`, one per key as given.
        public func write(_ values: [JSONValue], into out: inout [UInt8]) {
            write(into: &out) { i, out in CanonicalJSON.write(values[i], into: &out) }
        }
    }
}

extension JSONValue {
    /// Compact JSON in document order (not canonical), e.g. for producing records.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        CanonicalJSON.write(self, sortKeys: false, into: &out)
        return out
    }
}
