import Foundation
@testable import IdreconDomain
import Testing

/// Inputs that once trapped, were silently merged or were accepted against the spec.
@Suite struct HostileInputTests {
    let issuer = TestIssuer.shared

    @Test(arguments: [
        ("exp", "1e19"), ("exp", "1e300"), ("exp", "9223372036854775807"), ("exp", "-1"), ("exp", "253402300800"),
        ("iat", "-9223372036854775807"), ("iat", "1e400"), ("iat", "-0.5e309"),
    ])
    func numericDatesOutOfRangeAreTokenInvalid(claim: String, value: String) {
        let failure = issuer.verifier.check(limitedLogin(token: issuer.token(claims: [claim: value])))
        #expect(failure == .outOfRange(claim))
        #expect(failure?.detail.contains("\(claim) out of range") == true)
    }

    @Test func numericDatesAtTheEdgesAreJudgedNormally() {
        #expect(issuer.verifier.check(limitedLogin(token: issuer.token(claims: ["exp": "253402300799"]))) == nil)
        #expect(issuer.verifier.check(limitedLogin(token: issuer.token(claims: ["exp": "1793527200.75"]))) == nil)
        #expect(issuer.verifier.check(limitedLogin(token: issuer.token(claims: ["iat": "0"]))) == nil)
        #expect(issuer.verifier.check(limitedLogin(token: issuer.token(claims: ["exp": #""soon""#]))) == .malformed("exp is not a NumericDate"))
    }

    @Test func base64urlIsDecodedStrictly() {
        #expect(Base64URL.decode("-_8") == [0xFB, 0xFF])
        #expect(Base64URL.decode("+/8") == nil)
        #expect(Base64URL.decode("-_8=") == nil)
        #expect(Base64URL.decode("AQ==") == nil)
        #expect(Base64URL.decode("AQ") == [1])
        #expect(Base64URL.decode("AR") == nil) // leftover bits not zero: a second text for the same bytes
        #expect(Base64URL.decode("A") == nil)
        #expect(Base64URL.decode("") == [])
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }

    @Test func standardBase64OrPaddedSignatureIsMalformed() {
        let token = issuer.token()
        let parts = token.split(separator: ".").map(String.init)
        let standard = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        if standard != parts[2] {
            #expect(issuer.verifier.check(limitedLogin(token: parts[0] + "." + parts[1] + "." + standard))
                == .malformed("signature is not base64url"))
        }
        #expect(issuer.verifier.check(limitedLogin(token: token + "==")) == .malformed("signature is not base64url"))
        #expect(issuer.verifier.check(limitedLogin(token: parts[0] + "=." + parts[1] + "." + parts[2]))
            == .malformed("header is not base64url JSON"))
    }

    @Test func objectKeysAreComparedByBytes() throws {
        // "é" as one scalar and as e + U+0301; "Å" as U+00C5 and as the Angstrom sign U+212B.
        for text in [#"{"\#u{E9}":1,"e\#u{301}":2}"#, #"{"\#u{C5}":1,"\#u{212B}":2}"#] {
            guard case let .object(members) = try JSONParser.parse(Array(text.utf8)) else { Issue.record("not an object"); continue }
            #expect(members.count == 2)
        }
        #expect(throws: JSONParseError.self) { try JSONParser.parse(Array(#"{"a":1,"a":2}"#.utf8)) }
        // Many keys: still linear, still byte-exact.
        let many = "{" + (0..<5000).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + ",\"k17\":0}"
        #expect(throws: JSONParseError.self) { try JSONParser.parse(Array(many.utf8)) }
        #expect(JSONValue.string("\u{E9}") != JSONValue.string("e\u{301}"))
    }

    @Test func instantsOutsideYearsOneToNineThousandNineHundredNinetyNineAreRejected() {
        #expect(Timestamp.parse("0000-01-01T00:00:00+00:01") == nil)
        #expect(Timestamp.parse("9999-12-31T23:59:59-00:01") == nil)
        #expect(Timestamp.parse("0000-12-31T23:59:59Z") == nil)
        #expect(Timestamp.parse("0001-01-01T00:00:00Z") == Timestamp.range.lowerBound)
        #expect(Timestamp.parse("9999-12-31T23:59:59.999Z") == Timestamp.range.upperBound)
        #expect(Timestamp.parse("0001-01-01T00:59:00+00:59") == Timestamp.range.lowerBound)
        #expect(Timestamp.format(Timestamp.range.lowerBound) == "0001-01-01T00:00:00.000Z")
        #expect(Timestamp.format(Timestamp.range.upperBound) == "9999-12-31T23:59:59.999Z")
        let line = #"{"schema":"login-event/v1","event_id":"x","occurred_at":"9999-12-31T23:59:59-00:01","app_id":"1","#
            + #""device_id":"d","tracking":"enabled","token_type":"access_token","asid":"1"}"#
        guard case let .failure(rejection) = EventValidator.validate(Array(line.utf8)) else { Issue.record("accepted"); return }
        #expect(rejection.code == .invalidField)
    }

    @Test func eventIDScannerFindsTheFirstValidID() {
        func scan(_ pieces: [String]) -> String? {
            var scanner = EventIDScanner()
            for piece in pieces { scanner.feed(Array(piece.utf8)) }
            return scanner.eventID
        }
        #expect(scan([#"{"schema":"x","event_id" :  "big-1","#]) == "big-1")
        #expect(scan([#"{"ev"#, #"ent_id"#, #"":"sp"#, #"lit"}"#]) == "split")
        #expect(scan([#"{"event_id":"bad id","other":1,"event_id":"good"}"#]) == "good")
        #expect(scan([#"{"event_id":12}"#]) == nil)
        #expect(scan([#"{"event_id":""#, String(repeating: "a", count: 129), "\"}"]) == nil)
        #expect(scan([#""event_id""event_id":"x""#]) == "x")
    }
}
