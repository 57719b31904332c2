import Crypto
import Foundation
@testable import IdreconDomain
import Testing
import X509
import _CryptoExtras

/// A signing key generated for the tests, its JWKS, and a token factory.
struct TestIssuer: Sendable {
    let key: _RSA.Signing.PrivateKey
    let kid = "test-key-1"

    static let shared = TestIssuer()

    init() { key = try! _RSA.Signing.PrivateKey(keySize: .bits2048) }

    var jwks: [UInt8] {
        let p = try! key.publicKey.getKeyPrimitives()
        return Array(#"{"keys":[{"kty":"RSA","kid":"\#(kid)","alg":"RS256","use":"sig","n":"\#(Base64URL.encode(p.modulus))","e":"\#(Base64URL.encode(p.publicExponent))"}]}"#.utf8)
    }

    var verifier: TokenVerifier { TokenVerifier(keys: try! KeySet(jwks: jwks)) }

    static func part(_ json: String) -> String { Base64URL.encode(Array(json.utf8)) }

    func token(header: String? = nil, claims: [String: String] = [:], drop: Set<String> = []) -> String {
        var c: [String: String] = [
            "iss": #""https://www.facebook.com""#, "aud": #""1""#, "sub": #""400""#, "nonce": #""n-400""#,
            "iat": "1793523600", "exp": "1793527200", "email": #""ana@x.com""#,
        ]
        for (k, v) in claims { c[k] = v }
        for k in drop { c[k] = nil }
        let body = "{" + c.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",") + "}"
        let signingInput = Self.part(header ?? #"{"alg":"RS256","kid":"\#(kid)","typ":"JWT"}"#) + "." + Self.part(body)
        let signature = try! key.signature(for: SHA256.hash(data: Array(signingInput.utf8)), padding: .insecurePKCS1v1_5)
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }
}

/// A limited login at 2026-11-01T09:00:00Z (1793523600) carrying `token`.
func limitedLogin(token: String?, nonce: String = "n-400") -> LoginEvent {
    var o: [String: any Sendable] = [
        "schema": "login-event/v1", "event_id": "t", "occurred_at": "2026-11-01T09:00:00Z", "app_id": "1", "device_id": "D",
        "tracking": "limited", "token_type": "authentication_token", "asid": "400", "nonce": nonce, "email": " Ana@X.com",
    ]
    if let token { o["id_token"] = token }
    return try! EventValidator.validate([UInt8](try! JSONSerialization.data(withJSONObject: o))).get()
}

@Suite struct TokenTests {
    let issuer = TestIssuer.shared

    @Test func validTokenPasses() {
        #expect(issuer.verifier.check(limitedLogin(token: issuer.token())) == nil)
        // Classic logins and limited logins without a token are not checked unless required.
        #expect(issuer.verifier.check(limitedLogin(token: nil)) == nil)
        var required = issuer.verifier
        required.requireToken = true
        #expect(required.check(limitedLogin(token: nil)) == .missing)
    }

    /// Time is the login's, never the wall clock: an old token still verifies at replay.
    @Test func oldTokenStillVerifiesAtReplayTime() {
        let token = issuer.token(claims: ["iat": "1500000000", "exp": "1500003600"])
        var o = limitedLogin(token: token)
        o.occurredAt = 1_500_000_100_000
        #expect(issuer.verifier.check(o) == nil)
    }

    @Test func eachForgeryFailsWithItsOwnDetail() {
        let v = issuer.verifier
        let good = issuer.token()
        let parts = good.split(separator: ".").map(String.init)
        let tamperedPayload = TestIssuer.part(#"{"aud":"1","exp":1793527200,"iat":1793523600,"iss":"https://www.facebook.com","nonce":"n-400","sub":"999"}"#)
        let noneHeader = TestIssuer.part(#"{"alg":"none","kid":"test-key-1"}"#)
        let hsHeader = TestIssuer.part(#"{"alg":"HS256","kid":"test-key-1"}"#)
        let publicBytes = issuer.key.publicKey.pemRepresentation
        let hsInput = hsHeader + "." + parts[1]
        let hsSignature = HMAC<SHA256>.authenticationCode(for: Array(hsInput.utf8), using: SymmetricKey(data: Array(publicBytes.utf8)))
        let cases: [(String, TokenVerifier.Failure)] = [
            (noneHeader + "." + parts[1] + ".", .malformed("signature is not base64url")),
            (noneHeader + "." + parts[1] + "." + parts[2], .algorithm("none")),
            (hsInput + "." + Base64URL.encode(Array(hsSignature)), .algorithm("HS256")),
            (issuer.token(header: #"{"alg":"RS256","kid":"other"}"#), .unknownKey("other")),
            (parts[0] + "." + tamperedPayload + "." + parts[2], .signature),
            (parts[0] + "." + parts[1] + "." + String(parts[2].dropLast(18)), .signature),
            (good + ".extra", .malformed("4 parts, expected 3")),
            (issuer.token(claims: ["iss": #""https://evil.example""#]), .issuer("https://evil.example")),
            (issuer.token(claims: ["aud": #""2""#]), .audience),
            (issuer.token(claims: ["sub": #""401""#]), .subject),
            (issuer.token(claims: ["nonce": #""other""#]), .nonce),
            (issuer.token(claims: ["exp": "1793523600"]), .expired),
            (issuer.token(claims: ["iat": "1793523700"]), .issuedInFuture),
            (issuer.token(claims: ["email": #""bob@x.com""#]), .claimMismatch("email")),
        ]
        for (token, expected) in cases {
            #expect(v.check(limitedLogin(token: token)) == expected, "\(expected.detail)")
        }
        // Within the skew, iat may be a little after the login.
        #expect(v.check(limitedLogin(token: issuer.token(claims: ["iat": "1793523630"]))) == nil)
        // Audience may be a list.
        #expect(v.check(limitedLogin(token: issuer.token(claims: ["aud": #"["9","1"]"#]))) == nil)
    }

    /// Facebook also publishes its keys as a map of kid to PEM certificate.
    @Test func certificateMapIsAKeySet() throws {
        let name = try DistinguishedName { CommonName("idrecon test issuer") }
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(issuer.key.publicKey),
            notValidBefore: Date(timeIntervalSince1970: 1_700_000_000), notValidAfter: Date(timeIntervalSince1970: 1_900_000_000),
            issuer: name, subject: name, signatureAlgorithm: .sha256WithRSAEncryption, extensions: Certificate.Extensions(),
            issuerPrivateKey: .init(issuer.key))
        let pem = try certificate.serializeAsPEM().pemString
        let map = try JSONSerialization.data(withJSONObject: [issuer.kid: pem])
        let verifier = TokenVerifier(keys: try KeySet(jwks: [UInt8](map)))
        #expect(verifier.check(limitedLogin(token: issuer.token())) == nil)
        #expect(throws: KeySet.Invalid.self) { try KeySet(jwks: Array(#"{"k":"-----BEGIN CERTIFICATE-----\nnope\n"}"#.utf8)) }
    }

    @Test func jwksMustBeAKeySet() {
        #expect(throws: KeySet.Invalid.self) { try KeySet(jwks: Array("[]".utf8)) }
        #expect(throws: KeySet.Invalid.self) { try KeySet(jwks: Array(#"{"keys":[{"kty":"RSA","kid":"k","n":"AQAB","e":"AQAB"}]}"#.utf8)) }
    }
}
