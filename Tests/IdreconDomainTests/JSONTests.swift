import Testing
@testable import IdreconDomain

@Suite struct JSONTests {
    func parse(_ s: String) throws -> JSONValue { try JSONParser.parse(Array(s.utf8)) }

    @Test func parsesNestedValues() throws {
        let v = try parse(#" {"a": [1, -2.5e3, true, false, null], "b": {"c": "d"}} "#)
        #expect(v["a"] == .array([.number("1"), .number("-2.5e3"), .bool(true), .bool(false), .null]))
        #expect(v["b"]?["c"] == .string("d"))
    }

    @Test func decodesEscapesAndSurrogatePairs() throws {
        #expect(try parse(#""a\"b\\c\/\n\t\u00e9\ud83d\ude00""#) == .string("a\"b\\c/\n\té😀"))
    }

    @Test(arguments: [
        "", "{", "{\"a\":1,}", "[1,]", "{\"a\" 1}", "01", "1.", "-", "tru", "\"abc", "{\"a\":1} x",
        "\"\\x\"", "\"\\ud800\"", "{\"a\":1,\"a\":2}", "\"tab\there\"", "NaN",
    ])
    func rejectsMalformed(_ text: String) {
        #expect(throws: JSONParseError.self) { try parse(text) }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xFF, 0x22]) }
    }

    @Test func rejectsDeepNesting() {
        let deep = String(repeating: "[", count: 200) + String(repeating: "]", count: 200)
        #expect(throws: JSONParseError.self) { try parse(deep) }
    }

    @Test func canonicalFormSortsKeysAndIsStable() throws {
        let a = try parse(#"{"b": 1, "a": "x\u0001", "c": [{"z": 1, "y": 2}]}"#)
        let b = try parse(#"{"c":[{"y":2,"z":1}],"a":"x\u0001","b":1}"#)
        #expect(CanonicalJSON.encode(a) == #"{"a":"x\u0001","b":1,"c":[{"y":2,"z":1}]}"#)
        #expect(CanonicalJSON.encode(a) == CanonicalJSON.encode(b))
        #expect(try parse(CanonicalJSON.encode(a)) == b.sortedForTest)
    }

    /// Keys are ordered by their first eight bytes and, where those are shared, by all of
    /// them: shared prefixes, prefixes of each other, NUL and non-ASCII bytes, lengths around 8.
    @Test func canonicalKeyOrderIsByteOrder() throws {
        let keys = [
            "token_type", "token_for_business", "token_fo", "token_f", "token_fo\\u0000", "token_fox", "é", "e\\u0301",
            "E", "", "a", "abcdefgh", "abcdefg", "abcdefghi", "abcdefgH", "\\u00ff", "zz",
        ]
        let text = "{" + keys.enumerated().map { "\"\($1)\": \($0)" }.joined(separator: ", ") + "}"
        guard case let .object(members) = try parse(text) else { Issue.record("not an object"); return }
        let expected = members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        var out: [UInt8] = []
        CanonicalJSON.write(.object(expected), sortKeys: false, into: &out)
        #expect(CanonicalJSON.encode(.object(members)) == String(decoding: out, as: UTF8.self))
        #expect(CanonicalJSON.encode(.object(members.reversed())) == String(decoding: out, as: UTF8.self))
    }

    /// A layout writes the bytes the canonical encoder writes for the same members, in any order.
    @Test func layoutWritesTheCanonicalObject() throws {
        let text = #"{"token_type": 1, "token_f": "a\"b", "é": null, "e\u0301": [2, {"y": 1, "x": 0}], "": "\u0001", "#
            + #""abcdefgh": true}"#
        guard case let .object(members) = try parse(text) else { Issue.record("not an object"); return }
        for members in [members, members.reversed()] {
            var out: [UInt8] = []
            CanonicalJSON.Layout(members.map(\.key)).write(members.map(\.value), into: &out)
            #expect(String(decoding: out, as: UTF8.self) == CanonicalJSON.encode(.object(members)))
        }
    }

    /// Duplicate keys are found by bytes past the first few members and beyond 16 of them.
    @Test func duplicateKeysAmongManyAreRejected() {
        for count in [2, 15, 16, 17, 40] {
            let keys = (0..<count).map { "k\($0)" }
            let unique = "{" + keys.map { "\"\($0)\": 1" }.joined(separator: ",") + "}"
            #expect((try? parse(unique)) != nil)
            let duplicated = "{" + (keys + [keys[count / 2]]).map { "\"\($0)\": 1" }.joined(separator: ",") + "}"
            #expect(throws: JSONParseError.self) { try parse(duplicated) }
        }
        // Canonically equivalent, different bytes: two keys.
        #expect((try? parse("{\"\\u00e9\": 1, \"e\\u0301\": 2}")) != nil)
    }
}

extension JSONValue {
    /// Keys sorted recursively, for comparing a re-parsed canonical form.
    var sortedForTest: JSONValue {
        switch self {
        case let .object(m): return .object(m.sorted { $0.key < $1.key }.map { ($0.key, $0.value.sortedForTest) })
        case let .array(a): return .array(a.map(\.sortedForTest))
        default: return self
        }
    }
}

@Suite struct TimestampTests {
    @Test func parsesOffsetsToUTCMilliseconds() {
        let utc = Timestamp.parse("2026-11-01T09:00:00Z")
        #expect(utc == 1_793_523_600_000)
        #expect(Timestamp.parse("2026-11-01T10:00:00+01:00") == utc)
        #expect(Timestamp.parse("2026-11-01t03:30:00.000-05:30") == utc)
        #expect(Timestamp.parse("2026-11-01 09:00:00.1234z") == utc! + 123)
        #expect(Timestamp.parse("2026-11-01T09:00:00.5Z") == utc! + 500)
    }

    @Test(arguments: [
        "2026-11-01T09:00:00", "2026-11-01", "2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-11-01T24:00:00Z",
        "2026-11-01T09:00:60Z", "2026-11-01T09:00:00+0100", "2026-11-01T09:00:00.Z", "yesterday at noon, UTC",
    ])
    func rejectsNonRFC3339(_ text: String) {
        #expect(Timestamp.parse(text) == nil)
    }

    @Test func formatRoundTrips() {
        for ms: Int64 in [0, 1_793_523_600_123, 951_782_400_000, -1] {
            #expect(Timestamp.parse(Timestamp.format(ms)) == ms)
        }
        #expect(Timestamp.format(1_793_523_600_123) == "2026-11-01T09:00:00.123Z")
        #expect(Timestamp.parse("2024-02-29T00:00:00Z") != nil)
        #expect(Timestamp.format(Timestamp.range.lowerBound) == "0001-01-01T00:00:00.000Z")
        #expect(Timestamp.format(Timestamp.range.upperBound) == "9999-12-31T23:59:59.999Z")
        // Instants `parse` never returns are still formatted, never trapped on.
        #expect(Timestamp.format(Timestamp.range.upperBound + 1) == "10000-01-01T00:00:00.000Z")
        #expect(!Timestamp.format(.min).isEmpty && !Timestamp.format(.max).isEmpty)
    }
}

@Suite struct LinkKeyTests {
    /// The ASCII fast path trims and lower-cases exactly as the Unicode path does, for every
    /// ASCII byte at either end and inside.
    @Test func asciiEmailsNormalizeAsUnicodeOnesDo() {
        for byte in UInt8(0)..<0x80 {
            let c = String(decoding: [byte], as: UTF8.self)
            for email in [c + "Ana@X.com" + c, "a" + c + "B@x", c, c + c] {
                #expect(LinkKey.normalizedEmail(email) == email.trimmingWhitespace().lowercased(), "byte \(byte)")
            }
        }
        #expect(LinkKey.normalizedEmail(" \tGus.X@Example.COM\r\n") == "gus.x@example.com")
        #expect(LinkKey.normalizedEmail("\u{00A0}Ana@X.COM") == "ana@x.com") // non-ASCII: the Unicode path
        #expect(LinkKey.sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }
}
