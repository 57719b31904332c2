import Foundation
import GRDB
import IdreconStore
import Testing

/// Which pages of the file at `path` the kernel's page cache holds, by `mincore` over a map of it. A
/// database's only with every connection to it closed: closing this descriptor drops the process's
/// POSIX locks on the file.
func residentPages(_ path: String) throws -> [Bool] {
    let descriptor = open(path, O_RDONLY)
    try #require(descriptor >= 0)
    defer { close(descriptor) }
    var info = stat()
    try #require(fstat(descriptor, &info) == 0)
    let size = Int(info.st_size), page = Int(sysconf(Int32(_SC_PAGESIZE)))
    let map = try #require(mmap(nil, size, PROT_READ, MAP_SHARED, descriptor, 0))
    defer { munmap(map, size) }
    var pages = [UInt8](repeating: 0, count: (size + page - 1) / page)
    try #require(mincore(map, size, &pages) == 0)
    return pages.map { $0 & 1 == 1 }
}

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

/// Whether the log's lookup keys find exactly the events of each device and the logins of
/// each ASID, and `key_runs` counts every one of them.
func logKeysKept(_ db: Database) throws -> Bool {
    var cache = LogKeyRuns.Cache()
    let keys = LogKeys(try LogKeyRuns(db, cache: &cache))
    var devices: [Int64: [Int64]] = [:], logins: [Int64: [Int64]] = [:]
    for row in try Row.fetchAll(db, sql: "SELECT seq, device_key, type, asid_key FROM events ORDER BY seq") {
        devices[row[1], default: []].append(row[0])
        if row[2] as String == "login", let asid = row[3] as Int64? { logins[asid, default: []].append(row[0]) }
    }
    for (key, seqs) in devices { guard try keys.deviceEvents(key, through: .max) == seqs else { return false } }
    for (key, seqs) in logins { guard try keys.logins(key, through: .max) == seqs else { return false } }
    return try Bool.fetchOne(db, sql: """
        SELECT (SELECT coalesce(sum(keys), 0) FROM key_runs WHERE name = 'device_key_runs') = (SELECT count(*) FROM events)
            AND (SELECT coalesce(sum(keys), 0) FROM key_runs WHERE name = 'login_key_runs')
                = (SELECT count(*) FROM events WHERE type = 'login' AND asid_key IS NOT NULL)
        """) == true
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
