import Crypto
import IdreconDomain
import _CryptoExtras

/// The record path as the pipeline runs it — JSON parse, validation, token verification,
/// canonical form, erasure — over arbitrary bytes, with the properties that must hold for
/// every input checked as it goes. A violated property traps, which is what a fuzzer (and
/// the regression test over its findings) reports.
public enum RecordPath {
    /// A fixed key (made for the fuzzer, used nowhere else), so a seed or a finding can carry
    /// a valid signature: `exp` and `iat` are only read from correctly signed tokens.
    static let key = try! _RSA.Signing.PrivateKey(pemRepresentation: """
        -----BEGIN RSA PRIVATE KEY-----
        MIIEpAIBAAKCAQEA1FiGbQO1YbSEeB5scLmVbLyeXXKBjGexLMFtiKmlm3dYQaAH
        2pEhe0xJdBWx4fGDSIv5hlxb2WwCQYEUIbBQf+mvHHJyc3LA9UXfOyRWgQ9toOA7
        4DsH/lQANWUKlKqk8TLxodZUZe2jALUBcgYPluP1H73swf2GleJoBS4Y+Mor3qGo
        Ua5ibl3lMwXrqE0se7Fyd/Iircz6SpejB1d4vVb7HDbESVjQRxkZLKMQ/um4wXUn
        +dXJAd83k+GTwqLqpRX4lCIjtsyH2jxo92RH/eKETigPA197cgdG+KPqNhM+zvvn
        ywSViDCEubZyq38Xzkq0m3r5ZAVO7YBRuSrdOwIDAQABAoIBAAig/6Fux6Wh8h92
        zl2hpP6nXDYcQO3FiZpx0nN9wALlItB+jM3Rx6Rc3BVGtmpMkqhVi9JtGWG99Qot
        ZnXcq4DEgb8BsECcbAFA5sqJS6dF9boBCAiGIukvslcjyn4dFcPOwqlFbjuQIGds
        c5PAcaIQ6bVHAK0nZ3CFeUhQmxItA2OLjOnKuhbLRB26nVgz4sCOp9aJdzSLgUom
        YxrFbb4w1xP5fulfZoWROvjRw6W3gjQsm20J0ZJnvh+QHSaTQX4QbHtW1uTgKacC
        MHe72he2bBeRe95XUEr8SeNzLGhCb/u+kVVntH6ZRq292E9awBMrcgidiZFXr3gW
        X7OoaBkCgYEA76UujqXJe3qd2v7yI/EBYTkrT1NugPUL0r74EHdjld63f6bzAwND
        jY0Xp0bFxCzaEsKBvzI2QziJSHm7AFGbNpnYtfBsY6FVqf0/F+LYSbkC4VD2JEp0
        c3JwFVRP4YHcGgTzq/YMGagoMj9pmyAH/GrdSTA+mOOsn01T5Xal55kCgYEA4tZl
        viR4kDpy6EFeWdhnyXysU1C8Lb6U/ABaADHsDPIENnD2xNO6HHSYJqRxpFhh6HMW
        4uDI4NgwYMILVe9EzQ3TpTEMcyFUmFDFzl9BFF8x1+Qx5BMNB/AGvpJtQ8vD5ao1
        oTtLEN+fOsfrdhHYBmR7nFdc6gFfGLaiU2yYn/MCgYEAkZiw/Ze6HtwzVd85LB77
        sJ70MkDFTXIT2dmOiyqOBXsHz3WWBUmRXEnRih7UfsilQWqNO6V9FEAgIDldJOdv
        vq+f24ITyEA39IxZLeDzeW7/UfdHZGsb7xwi/sJ3udGU8PX7OYnGdjwVF9oxBj9i
        urgOc63tCiShNzPa+fmo+FkCgYB/5vXdXcEhSeOqs9kYfd4fjQ25uKcyf+iPoz8c
        Jwn7Tqczb0SlPOEO1GtKNqThTvh90g8QhECgDyZQGHm9zbkUifxRg7OKYzvI2pp+
        P9V5QCfhnIjJGjjZxex3nia/+HAP2oZ8z+sGq6Cjy0AoBe2xxQyx3czFIVrWm3wx
        3+S7IwKBgQCxwPBaBfW1F8NM0PF6/ve46mOPBZ+jcvWnCzjTjXhJyyNUeyA8woNh
        opg8pFa7FlOUCvRB5Nq2FIcFfne3WQpPzOjC0jsdeaZrCxgZ276Mj8XZb/MTFSEp
        akj+T+5bqwNjbGeBX/rJJaBXr9lB1U2bfYLOHfyOjJXaoNE0P6J8JA==
        -----END RSA PRIVATE KEY-----
        """)
    public static let verifier = TokenVerifier(keys: KeySet(keys: ["fuzz": key.publicKey]))

    /// A valid RS256 token for `claims` (JSON object text), for seeds.
    public static func token(claims: String) -> String {
        let input = Base64URL.encode(Array(#"{"alg":"RS256","kid":"fuzz"}"#.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try! key.signature(for: SHA256.hash(data: Array(input.utf8)), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    public static func exercise(_ bytes: [UInt8]) {
        // Parsing never traps; a parsed value re-encodes to JSON (keys sorted) that parses
        // and re-encodes to the same bytes.
        if let value = try? JSONParser.parse(bytes) {
            let encoded = CanonicalJSON.encode(value)
            guard let again = try? JSONParser.parse(Array(encoded.utf8)) else { fatalError("canonical JSON does not parse: \(encoded)") }
            check(CanonicalJSON.encode(again).sameBytes(as: encoded), "canonical JSON is not a fixed point")
            if let scrubbed = ErasureRules.scrub(value) {
                check(scrubbed["email"] == nil && scrubbed["id_token"] == nil, "erasure kept a secret")
            }
        }
        var scanner = EventIDScanner()
        scanner.feed(bytes)
        // Oversized records keep a bounded prefix; the limit is the smallest allowed.
        if bytes.count > 1024 {
            var limited = EventIDScanner()
            limited.feed(bytes.prefix(1024))
            _ = limited.eventID
        }
        let validation = EventValidator.validate(bytes)
        // The fast path only ever accepts, and then exactly what `validate` accepts.
        if let plain = bytes.withUnsafeBufferPointer({ EventValidator.acceptPlain($0) }) {
            guard case let .success(event) = validation else { fatalError("the fast path accepted a record validate rejects") }
            check(plain.agrees(with: event, record: bytes), "the fast path and validate disagree")
        }
        switch validation {
        case let .success(event):
            // The stored form is valid and stable: validating it again gives the same bytes.
            guard case let .success(again) = EventValidator.validate(Array(event.canonicalPayload.utf8)) else {
                fatalError("the canonical payload does not validate: \(event.canonicalPayload)")
            }
            check(again.canonicalPayload.sameBytes(as: event.canonicalPayload), "canonical payload is not a fixed point")
            check(Timestamp.range.contains(event.occurredAt), "occurred_at out of range")
            check(Timestamp.parse(Timestamp.format(event.occurredAt)) == event.occurredAt, "occurred_at does not round-trip")
            _ = verifier.check(event)
            _ = EventKey(at: event.occurredAt, eventID: event.eventID)
            if let clean = ErasureRules.scrub(payload: event.canonicalPayload) {
                guard case .success = EventValidator.validate(Array(clean.utf8)) else { fatalError("a scrubbed event does not validate") }
            }
        case .failure:
            break
        }
        // Text-level parsers on the same bytes.
        if let text = String(validating: bytes, as: UTF8.self) {
            if let ms = Timestamp.parse(text) {
                check(Timestamp.range.contains(ms), "timestamp out of range")
                check(Timestamp.parse(Timestamp.format(ms)) == ms, "timestamp does not round-trip")
            }
            if let decoded = Base64URL.decode(text) {
                check(Base64URL.encode(decoded) == text, "base64url has two texts for one byte string")
            }
            _ = ErasureRules.redactEmails(text)
        }
    }

    private static func check(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition { fatalError(message()) }
    }
}
