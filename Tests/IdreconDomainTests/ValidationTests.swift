import Foundation
import Testing
@testable import IdreconDomain

/// A valid classic login; tests change one field at a time.
let classic: [String: any Sendable] = [
    "schema": "login-event/v1", "event_id": "e-1", "occurred_at": "2026-11-01T09:00:00Z", "app_id": "1",
    "device_id": "D", "platform": "ios", "tracking": "enabled", "token_type": "access_token", "asid": "11",
    "email": "Ana@X.com", "friend_asids": ["99"], "granted_permissions": ["public_profile", "email", "user_friends"],
    "nonce": "n-1", "token_for_business": "tfb",
]

/// A valid limited login.
let limited: [String: any Sendable] = [
    "schema": "login-event/v1", "event_id": "e-2", "occurred_at": "2026-11-01T08:00:00Z", "app_id": "2",
    "device_id": "iphone", "tracking": "limited", "token_type": "authentication_token", "asid": "400",
    "granted_permissions": ["public_profile", "email"], "email": " ana@x.com ", "nonce": "n-2",
]

func json(_ object: [String: any Sendable], _ changes: [String: (any Sendable)?] = [:]) -> [UInt8] {
    var o: [String: Any] = object
    for (k, v) in changes { o[k] = v }
    return [UInt8](try! JSONSerialization.data(withJSONObject: o))
}

func code(_ bytes: [UInt8]) -> ReasonCode? {
    if case let .failure(r) = EventValidator.validate(bytes) { return r.code }
    return nil
}

@Suite struct ValidationTests {
    @Test func acceptsClassicAndLimitedLogins() throws {
        let e = try EventValidator.validate(json(classic)).get()
        #expect(e.type == .login && e.tracking == .enabled && e.asid == "11" && e.platform == .ios)
        #expect(e.occurredAt == Timestamp.parse("2026-11-01T09:00:00Z"))
        let l = try EventValidator.validate(json(limited)).get()
        #expect(l.tracking == .limited && l.tokenType == .authenticationToken && l.platform == .ios)
    }

    @Test func logoutNeedsNoTrackingOrASID() throws {
        let e = try EventValidator.validate(json([
            "schema": "login-event/v1", "event_id": "o", "type": "logout", "occurred_at": "2026-11-01T09:00:00Z",
            "app_id": "1", "device_id": "D",
        ])).get()
        #expect(e.type == .logout && e.asid == nil && e.tracking == nil)
    }

    @Test func malformedJSON() {
        #expect(code(Array("{not json".utf8)) == .malformedJSON)
        #expect(code(Array("[1]".utf8)) == .malformedJSON)
        #expect(code(Array("\"string\"".utf8)) == .malformedJSON)
        #expect(code([0x7B, 0xC3, 0x28, 0x7D]) == .malformedJSON)
        #expect(code([]) == .malformedJSON)
    }

    @Test func unsupportedSchema() {
        #expect(code(json(classic, ["schema": nil])) == .unsupportedSchema)
        #expect(code(json(classic, ["schema": "login-event/v2"])) == .unsupportedSchema)
        #expect(code(json(classic, ["schema": 1])) == .unsupportedSchema)
    }

    @Test(arguments: ["event_id", "occurred_at", "app_id", "device_id", "tracking", "token_type", "asid"])
    func missingField(_ field: String) throws {
        guard case let .failure(r) = EventValidator.validate(json(classic, [field: nil])) else {
            Issue.record("accepted without \(field)")
            return
        }
        #expect(r.code == .missingField)
        #expect(r.message.contains(field))
    }

    @Test(arguments: [
        ("event_id", "has space" as any Sendable), ("event_id", String(repeating: "x", count: 129)), ("occurred_at", "2026-11-01T09:00:00"),
        ("app_id", "1a"), ("app_id", 1), ("app_id", String(repeating: "1", count: 33)), ("device_id", ""),
        ("device_id", "tab\there"), ("platform", "symbian"), ("flow", "web_view"), ("tracking", "partial"),
        ("token_type", "id_token"), ("asid", "-1"), ("email", "no-at"), ("email", "a@b@c"), ("friend_asids", ["1x"]),
        ("friend_asids", "1"), ("granted_permissions", [1]), ("nonce", ""), ("nonce", "a b"), ("type", "signup"),
        ("id_token", "a.b.c"),
    ] as [(String, any Sendable)])
    func invalidField(_ field: String, _ value: any Sendable) {
        guard case let .failure(r) = EventValidator.validate(json(classic, [field: value])) else {
            Issue.record("accepted \(field)=\(value)")
            return
        }
        #expect(r.code == .invalidField)
        #expect(r.message.contains(field))
    }

    @Test func tokenForBusinessOnlyOnClassic() {
        #expect(code(json(limited, ["token_for_business": "t"])) == .invalidField)
        #expect(code(json(limited, ["id_token": "a.b.c"])) == nil)
    }

    @Test func tokenTypeMismatch() {
        #expect(code(json(limited, ["token_type": "access_token"])) == .tokenTypeMismatch)
        #expect(code(json(classic, ["token_type": "authentication_token"])) == .tokenTypeMismatch)
    }

    @Test func permissionOutOfScope() {
        #expect(code(json(limited, ["granted_permissions": ["public_profile", "email", "user_likes"]])) == .permissionOutOfScope)
        for permission in limitedLoginPermissions {
            #expect(code(json(limited, ["granted_permissions": ["email", permission]])) == nil)
        }
        // Classic logins may hold any permission; declined ones are never checked.
        #expect(code(json(classic, ["granted_permissions": ["email", "user_friends", "user_likes"]])) == nil)
        #expect(code(json(limited, ["declined_permissions": ["user_likes"]])) == nil)
    }

    @Test func limitedUnsupported() {
        #expect(code(json(limited, ["platform": "tvos"])) == .limitedUnsupported)
        #expect(code(json(limited, ["flow": "device_login"])) == .limitedUnsupported)
        #expect(code(json(classic, ["platform": "tvos", "flow": "device_login"])) == nil)
    }

    @Test func claimWithoutPermission() {
        #expect(code(json(classic, ["granted_permissions": ["public_profile", "user_friends"]])) == .claimWithoutPermission)
        #expect(code(json(classic, ["granted_permissions": ["public_profile", "email"]])) == .claimWithoutPermission)
        // Only checked when granted_permissions is present.
        #expect(code(json(classic, ["granted_permissions": nil])) == nil)
    }

    @Test func canonicalFormIgnoresKeyOrderOffsetsAndNulls() throws {
        let a = try EventValidator.validate(json(classic)).get()
        var reordered = Array(#"{"token_for_business":"tfb","nonce":"n-1","granted_permissions":["public_profile","email","user_friends"],"friend_asids":["99","11"],"email":"Ana@X.com","asid":"11","token_type":"access_token","tracking":"enabled","platform":"ios","device_id":"D","app_id":"1","occurred_at":"2026-11-01T10:00:00+01:00","event_id":"e-1","schema":"login-event/v1","flow":null}"#.utf8)
        let b = try EventValidator.validate(reordered).get()
        #expect(a.canonicalPayload == b.canonicalPayload)
        #expect(b.friendASIDs == ["99"]) // self-reference dropped
        reordered = json(classic, ["device_id": "E"])
        #expect(try EventValidator.validate(reordered).get().canonicalPayload != a.canonicalPayload)
    }

    @Test func canonicalFormAppliesDefaultsAndKeepsUnknownFields() throws {
        let e = try EventValidator.validate(json(limited, ["sdk": ["v": 17]])).get()
        #expect(e.canonicalPayload.contains(#""platform":"ios""#))
        #expect(e.canonicalPayload.contains(#""type":"login""#))
        #expect(e.canonicalPayload.contains(#""sdk":{"v":17}"#))
        #expect(e.canonicalPayload.contains(#""occurred_at":"2026-11-01T08:00:00.000Z""#))
    }
}

/// Every file under schemas/examples is accepted or rejected (with the named code) as
/// its name says, so the JSON Schema's examples and the validator cannot drift apart.
@Suite struct SchemaExampleTests {
    static let examples: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("schemas/examples")

    static var files: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: examples.path)) ?? []).filter { $0.hasSuffix(".json") }.sorted()
    }

    @Test func examplesExistForEveryStatelessCode() {
        let stateless = ReasonCode.allCases.filter { ![.eventIDConflict, .nonceReplay, .tokenInvalid].contains($0) }
        for c in stateless {
            #expect(Self.files.contains { $0.hasPrefix("invalid-\(c.rawValue)-") }, "no example for \(c.rawValue)")
        }
        #expect(Self.files.contains { $0.hasPrefix("valid-") })
    }

    @Test(arguments: files)
    func exampleMatchesItsName(_ file: String) throws {
        let bytes = [UInt8](try Data(contentsOf: Self.examples.appendingPathComponent(file)))
        let result = EventValidator.validate(bytes)
        if file.hasPrefix("valid-") {
            if case let .failure(r) = result { Issue.record("\(file): \(r.code.rawValue) \(r.message)") }
        } else {
            let expected = ReasonCode.allCases.first { file.hasPrefix("invalid-\($0.rawValue)-") }
            #expect(expected != nil, "file name names no reason code: \(file)")
            guard case let .failure(r) = result else { Issue.record("\(file) was accepted"); return }
            #expect(r.code == expected, "\(file): \(r.message)")
        }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") || FileManager.default.isExecutableFile(atPath: "/usr/local/bin/python3")))
    func jsonSchemaAgreesWithExamples() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", Self.examples.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("tools/check-schema.py").path]
        try process.run()
        process.waitUntilExit()
        // 3: jsonschema is not installed there; the Swift-side check above still ran.
        #expect(process.terminationStatus == 0 || process.terminationStatus == 3)
    }
}
