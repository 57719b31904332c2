import Foundation
import GRDB
import IdreconStore

/// A fresh temporary directory per test, removed at deinit.
final class TempDir {
    let url: URL
    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("idrecon-test-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(at: url) }

    func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    @discardableResult
    func write(_ name: String, _ lines: [String]) -> String {
        let p = path(name)
        _ = FileManager.default.createFile(atPath: p, contents: Data(lines.map { $0 + "\n" }.joined().utf8))
        return p
    }
}

/// A valid classic login line with the given fields overriding the defaults.
func eventLine(_ id: String, _ overrides: [String: String] = [:], time: String = "2026-11-01T09:00:00Z") -> String {
    var fields: [String: String] = [
        "schema": "login-event/v1", "event_id": id, "occurred_at": time, "app_id": "1", "device_id": "D-\(id)",
        "tracking": "enabled", "token_type": "access_token", "asid": "11",
    ]
    for (k, v) in overrides { fields[k] = v }
    let data = try! JSONSerialization.data(withJSONObject: fields.filter { !$0.value.isEmpty }, options: [.sortedKeys])
    return String(decoding: data, as: UTF8.self)
}

/// Whether the log's keys are kept (not suspended) and are exactly the log's events' keys.
func logKeysKept(_ db: Database) throws -> Bool {
    let mismatches = try Int.fetchOne(db, sql: """
        SELECT (SELECT count(*) FROM log_keys_suspended)
            + (SELECT count(*) FROM (
                SELECT tier, device_key, seq FROM event_device_keys EXCEPT SELECT seq >> 18, device_key, seq FROM events))
            + (SELECT count(*) FROM (
                SELECT seq >> 18, device_key, seq FROM events EXCEPT SELECT tier, device_key, seq FROM event_device_keys))
            + (SELECT count(*) FROM (
                SELECT tier, asid_key, seq FROM event_login_keys
                EXCEPT SELECT seq >> 18, asid_key, seq FROM events WHERE type = 'login'))
            + (SELECT count(*) FROM (
                SELECT seq >> 18, asid_key, seq FROM events WHERE type = 'login'
                EXCEPT SELECT tier, asid_key, seq FROM event_login_keys))
        """)
    return mismatches == 0
}

/// SplitMix64: the same sequence on every run.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
