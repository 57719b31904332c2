import Foundation
import IdreconDomain
import _CryptoExtras

/// A JWKS file as a key source: loaded once, re-read when a token names an unknown `kid`
/// (at most once a second), so a key rotation needs no restart.
public final class JWKSFile: @unchecked Sendable {
    public let path: String
    private let lock = NSLock()
    private var keys: KeySet
    private var lastReload = Date()

    public init(path: String) throws(IdreconError) {
        self.path = path
        keys = try Self.load(path)
    }

    static func load(_ path: String) throws(IdreconError) -> KeySet {
        guard let data = FileManager.default.contents(atPath: path) else { throw IdreconError(.input, "cannot read JWKS file \(path)") }
        do { return try KeySet(jwks: [UInt8](data)) } catch { throw IdreconError(.input, "JWKS file \(path): \(error.description)") }
    }

    public var count: Int { lock.withLock { keys.keys.count } }

    public func key(_ kid: String) -> _RSA.Signing.PublicKey? {
        lock.withLock {
            if let key = keys.keys[kid] { return key }
            guard Date().timeIntervalSince(lastReload) >= 1 else { return nil }
            lastReload = Date()
            if let fresh = try? Self.load(path) { keys = fresh }
            return keys.keys[kid]
        }
    }
}
