import Crypto
import Foundation
import IdreconDomain
import IdreconIngest
@testable import IdreconStore
import Testing
import _CryptoExtras

@Suite struct TokenIngestTests {
    @Test func ingestVerifiesTokensAndRetryAppendsAfterAKeyRotation() throws {
        let dir = TempDir()
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let p = try key.publicKey.getKeyPrimitives()
        func sign(_ kid: String, sub: String, nonce: String) -> String {
            let header = Base64URL.encode(Array(#"{"alg":"RS256","kid":"\#(kid)"}"#.utf8))
            let body = Base64URL.encode(Array(#"{"iss":"https://facebook.com","aud":"1","sub":"\#(sub)","nonce":"\#(nonce)","iat":1793523600,"exp":1793527200}"#.utf8))
            let sig = try! key.signature(for: SHA256.hash(data: Array((header + "." + body).utf8)), padding: .insecurePKCS1v1_5)
            return header + "." + body + "." + Base64URL.encode(sig.rawRepresentation)
        }
        func jwks(_ kid: String) -> Data {
            Data(#"{"keys":[{"kty":"RSA","kid":"\#(kid)","n":"\#(Base64URL.encode(p.modulus))","e":"\#(Base64URL.encode(p.publicExponent))"}]}"#.utf8)
        }
        func login(_ id: String, asid: String, token: String?) -> String {
            Stream.login(id, day: 1 + 9.0 / 24, device: "D\(id)", asid: asid, limited: true,
                         extra: ["nonce": "n\(id)"].merging(token.map { ["id_token": $0] } ?? [:]) { a, _ in a })
        }
        let jwksPath = dir.path("jwks.json")
        _ = FileManager.default.createFile(atPath: jwksPath, contents: jwks("k1"))
        let file = dir.write("in.jsonl", [
            login("a", asid: "1", token: sign("k1", sub: "1", nonce: "na")),   // valid
            login("b", asid: "2", token: sign("k1", sub: "9", nonce: "nb")),   // sub != asid
            login("c", asid: "3", token: sign("k2", sub: "3", nonce: "nc")),   // kid not (yet) known
            login("d", asid: "4", token: nil),                                 // no token, required
        ])
        let store = try EventStore(path: dir.path("db.sqlite"))
        let file1 = try JWKSFile(path: jwksPath)
        let verifier = TokenVerifier(key: { file1.key($0) }, requireToken: true)
        let summary = try FileIngestor(store: store, tokens: verifier).ingest(path: file)
        #expect(summary.outcome.appended == 1)
        #expect(summary.outcome.quarantined == [.tokenInvalid: 3])
        let messages = try store.quarantineEntries().map(\.message)
        #expect(messages[0].contains("sub does not equal asid"))
        #expect(messages[1].contains("unknown kid 'k2'"))
        #expect(messages[2].contains("without id_token"))

        // The key rotates in: retry appends what now passes, in order, and keeps the rest.
        let both = #"{"keys":[\#(String(decoding: jwks("k1"), as: UTF8.self).dropFirst(9).dropLast(2)),\#(String(decoding: jwks("k2"), as: UTF8.self).dropFirst(9).dropLast(2))]}"#
        _ = FileManager.default.createFile(atPath: jwksPath, contents: Data(both.utf8))
        let file2 = try JWKSFile(path: jwksPath)
        let retry = TokenVerifier(key: { file2.key($0) }, requireToken: true)
        let outcome = try store.retryQuarantine { raw in
            let result = EventValidator.validate(raw)
            if case let .success(e) = result, let failure = retry.check(e) { return .failure(Rejection(.tokenInvalid, failure.detail)) }
            return result
        }
        #expect(outcome.appended == 1 && outcome.quarantinedTotal == 2)
        #expect(try store.quarantineEntries().map(\.position) == [2, 4])
        #expect(try store.eventPayloads().map(\.eventID) == ["a", "c"])
        #expect(try store.userID(asid: "3") == "u:3") // projections updated too
        // Without --require-token the token-less login passes on retry.
        let lenient = try store.retryQuarantine(code: .tokenInvalid) { EventValidator.validate($0) }
        #expect(lenient.appended == 2)
        #expect(try store.quarantineEntries().isEmpty)
    }
}
