import Foundation
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
        FileManager.default.createFile(atPath: p, contents: Data(lines.map { $0 + "\n" }.joined().utf8))
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
