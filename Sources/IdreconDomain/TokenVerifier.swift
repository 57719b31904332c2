import Crypto
import Foundation
import X509
import _CryptoExtras

/// Public keys by `kid`, from a JWKS document `{"keys": [{kty, kid, alg, use, n, e}]}`.
public struct KeySet: Sendable {
    public var keys: [String: _RSA.Signing.PublicKey]

    public init(keys: [String: _RSA.Signing.PublicKey] = [:]) { self.keys = keys }

    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    /// Parses a JWKS document (RSA keys only; others are skipped), or Facebook's
    /// certificate map `{"kid": "-----BEGIN CERTIFICATE-----…"}`.
    public init(jwks data: [UInt8]) throws(Invalid) {
        guard let doc = try? JSONParser.parse(data), case let .object(members) = doc else {
            throw Invalid(description: "not a JWKS document: expected {\"keys\": [...]} or {\"kid\": \"PEM certificate\"}")
        }
        guard case let .array(entries)? = doc["keys"] else {
            var keys: [String: _RSA.Signing.PublicKey] = [:]
            for (kid, value) in members {
                guard case let .string(pem) = value, let certificate = try? Certificate(pemEncoded: pem),
                      let key = _RSA.Signing.PublicKey(certificate.publicKey)
                else { throw Invalid(description: "certificate map entry \(kid) is not a PEM certificate with an RSA key") }
                keys[kid] = key
            }
            guard !keys.isEmpty else { throw Invalid(description: "not a JWKS document: expected {\"keys\": [...]}") }
            self.keys = keys
            return
        }
        var keys: [String: _RSA.Signing.PublicKey] = [:]
        for entry in entries {
            guard case .string("RSA")? = entry["kty"] else { continue }
            guard case let .string(kid)? = entry["kid"], !kid.isEmpty, case let .string(n)? = entry["n"], case let .string(e)? = entry["e"],
                  let modulus = Base64URL.decode(n), let exponent = Base64URL.decode(e)
            else { throw Invalid(description: "a JWKS key lacks kid, n or e") }
            do {
                keys[kid] = try _RSA.Signing.PublicKey(n: modulus, e: exponent)
            } catch {
                throw Invalid(description: "JWKS key \(kid) is not a usable RSA key (2048 bits or more)")
            }
        }
        self.keys = keys
    }
}

/// Base64url without padding (RFC 7515), decoded strictly: only `A–Z a–z 0–9 - _`, no `=`,
/// no `+`/`/`, and no leftover bits (one text per byte string).
public enum Base64URL {
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count * 3 / 4)
        var buffer: UInt32 = 0, bits = 0
        for byte in text.utf8 {
            let value: UInt32
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = UInt32(byte - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = UInt32(byte - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = UInt32(byte - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "-"): value = 62
            case UInt8(ascii: "_"): value = 63
            default: return nil
            }
            buffer = (buffer << 6) | value
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
                buffer &= (1 << UInt32(bits)) - 1
            }
        }
        // 6 leftover bits are a dangling character; other leftovers must be zero padding bits.
        guard bits < 6, buffer == 0 else { return nil }
        return out
    }

    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}

/// Verifies Limited Login `id_token`s (SPEC section 1): RS256 with a key chosen by `kid`,
/// issuer, audience, subject, nonce, and time checks at the time of the login — never the
/// wall clock, so a nightly replay of old events verifies them as they were.
public struct TokenVerifier: Sendable {
    /// The public key for a `kid`, or nil (a caller may re-read its key file here).
    public var key: @Sendable (String) -> _RSA.Signing.PublicKey?
    public var issuers: Set<String>
    /// Allowed clock skew for `iat`, milliseconds.
    public var skewMillis: Int64
    /// Quarantine limited logins that carry no `id_token`.
    public var requireToken: Bool

    public static let defaultIssuers: Set<String> = ["https://www.facebook.com", "https://facebook.com", "https://limited.facebook.com"]

    public init(keys: KeySet, issuers: Set<String> = defaultIssuers, skewMillis: Int64 = 60_000, requireToken: Bool = false) {
        self.init(key: { keys.keys[$0] }, issuers: issuers, skewMillis: skewMillis, requireToken: requireToken)
    }

    public init(key: @escaping @Sendable (String) -> _RSA.Signing.PublicKey?, issuers: Set<String> = defaultIssuers,
                skewMillis: Int64 = 60_000, requireToken: Bool = false) {
        self.key = key
        self.issuers = issuers
        self.skewMillis = skewMillis
        self.requireToken = requireToken
    }

    /// Why a token fails; the detail names the failed check.
    public enum Failure: Error, Equatable, Sendable {
        case missing, malformed(String), algorithm(String), unknownKey(String), signature, issuer(String), audience, subject, nonce
        case expired, issuedInFuture, claimMismatch(String), outOfRange(String)

        public var detail: String {
            switch self {
            case .missing: return "limited login without id_token (--require-token)"
            case let .malformed(why): return "malformed token: \(why)"
            case let .algorithm(alg): return "alg \(alg) is not allowed (RS256 only)"
            case let .unknownKey(kid): return "unknown kid '\(kid)' (not in the JWKS)"
            case .signature: return "signature does not verify"
            case let .issuer(iss): return "iss '\(iss)' is not a Facebook issuer"
            case .audience: return "aud does not equal app_id"
            case .subject: return "sub does not equal asid"
            case .nonce: return "nonce does not equal the event's nonce"
            case .expired: return "exp is not after occurred_at (expired at login time)"
            case .issuedInFuture: return "iat is after occurred_at (beyond the allowed skew)"
            case let .claimMismatch(claim): return "claim '\(claim)' disagrees with the event"
            case let .outOfRange(claim): return "\(claim) out of range (a NumericDate within the years 1970-9999)"
            }
        }
    }

    /// Whether events of this kind have their token checked: limited logins.
    public static func checks(type: EventType, tracking: Tracking?) -> Bool { type == .login && tracking == .limited }

    /// Checks the event's token; nil when it passes (or when there is nothing to check).
    public func check(_ event: LoginEvent) -> Failure? {
        guard Self.checks(type: event.type, tracking: event.tracking) else { return nil }
        guard let token = event.idToken else { return requireToken ? .missing : nil }
        do { try verify(token, event: event) } catch { return error }
        return nil
    }

    func verify(_ token: String, event: LoginEvent) throws(Failure) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("\(parts.count) parts, expected 3") }
        guard let headerBytes = Base64URL.decode(parts[0]), let header = try? JSONParser.parse(headerBytes) else {
            throw .malformed("header is not base64url JSON")
        }
        guard let payloadBytes = Base64URL.decode(parts[1]), let claims = try? JSONParser.parse(payloadBytes), case .object = claims else {
            throw .malformed("payload is not base64url JSON")
        }
        guard let signature = Base64URL.decode(parts[2]), !signature.isEmpty else { throw .malformed("signature is not base64url") }
        guard case let .string(alg)? = header["alg"], alg == "RS256" else {
            if case let .string(alg)? = header["alg"] { throw .algorithm(alg) }
            throw .algorithm("(none given)")
        }
        guard case let .string(kid)? = header["kid"], !kid.isEmpty else { throw .malformed("header has no kid") }
        guard let key = key(kid) else { throw .unknownKey(kid) }
        let signed = Array(parts[0].utf8) + [UInt8(ascii: ".")] + Array(parts[1].utf8)
        guard key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: signed), padding: .insecurePKCS1v1_5)
        else { throw .signature }

        guard case let .string(iss)? = claims["iss"], issuers.contains(where: { $0.sameBytes(as: iss) }) else {
            if case let .string(iss)? = claims["iss"] { throw .issuer(iss) }
            throw .issuer("(none)")
        }
        switch claims["aud"] {
        case let .string(aud)? where aud.sameBytes(as: event.appID): break
        case let .array(auds)? where auds.contains(where: { if case let .string(a) = $0 { a.sameBytes(as: event.appID) } else { false } }):
            break
        default: throw .audience
        }
        guard case let .string(sub)? = claims["sub"], let asid = event.asid, sub.sameBytes(as: asid) else { throw .subject }
        guard case let .string(nonce)? = claims["nonce"], let eventNonce = event.nonce, nonce.sameBytes(as: eventNonce) else {
            throw .nonce
        }
        guard let exp = try Self.seconds(claims["exp"], "exp"), exp * 1000 > event.occurredAt else { throw .expired }
        if let iat = try Self.seconds(claims["iat"], "iat"), iat * 1000 > event.occurredAt + skewMillis { throw .issuedInFuture }
        if case let .string(email)? = claims["email"], let eventEmail = event.email,
           !LinkKey.normalizedEmail(email).sameBytes(as: LinkKey.normalizedEmail(eventEmail)) {
            throw .claimMismatch("email")
        }
        if case let .array(friends)? = claims["user_friends"], let eventFriends = event.friendASIDs {
            let claimed = Set(friends.compactMap { v -> [UInt8]? in
                if case let .string(s) = v { return Array(s.utf8) }
                if case .object = v, case let .string(id)? = v["id"] { return Array(id.utf8) }
                return nil
            })
            if claimed.subtracting([Array((event.asid ?? "").utf8)]) != Set(eventFriends.map { Array($0.utf8) }) {
                throw .claimMismatch("user_friends")
            }
        }
    }

    /// The latest NumericDate accepted: 9999-12-31T23:59:59Z.
    static let maxSeconds: Int64 = 253_402_300_799

    /// A NumericDate claim in whole seconds; nil when absent, out of range when not a finite
    /// number within the years 1970-9999 (so no conversion can overflow).
    static func seconds(_ value: JSONValue?, _ claim: String) throws(Failure) -> Int64? {
        guard let value else { return nil }
        guard case let .number(n) = value else { throw .malformed("\(claim) is not a NumericDate") }
        if let whole = Int64(n) {
            guard whole >= 0, whole <= maxSeconds else { throw .outOfRange(claim) }
            return whole
        }
        guard let real = Double(n), real.isFinite, real >= 0, real < Double(maxSeconds + 1) else { throw .outOfRange(claim) }
        return Int64(real.rounded(.down))
    }
}
