import Foundation
import GRDB
import IdreconDomain
import Testing

/// The subset of JSON Schema (2020-12) that `schemas/output` uses: type (one or a list),
/// properties, required, additionalProperties (false or a schema), items, enum, pattern, minimum.
struct MiniSchema {
    let schema: JSONValue

    func errors(_ value: JSONValue, at path: String = "$") -> [String] {
        errors(value, schema, path)
    }

    private func errors(_ value: JSONValue, _ schema: JSONValue, _ path: String) -> [String] {
        var found: [String] = []
        if let type = schema["type"] {
            let allowed: [String]
            switch type {
            case let .string(t): allowed = [t]
            case let .array(ts): allowed = ts.compactMap { if case let .string(t) = $0 { t } else { nil } }
            default: allowed = []
            }
            if !allowed.contains(where: { Self.matches(value, $0) }) { return ["\(path): not \(allowed)"] }
        }
        if case let .array(options)? = schema["enum"], !options.contains(value) { found.append("\(path): not one of the enum") }
        if case let .string(pattern)? = schema["pattern"], case let .string(text) = value,
           text.range(of: pattern, options: .regularExpression) == nil {
            found.append("\(path): \(text) does not match \(pattern)")
        }
        if case let .number(minimum)? = schema["minimum"], case let .number(n) = value, let a = Double(n), let b = Double(minimum), a < b {
            found.append("\(path): below \(minimum)")
        }
        if case let .object(members) = value {
            if case let .array(required)? = schema["required"] {
                for case let .string(name) in required where value[name] == nil { found.append("\(path): missing \(name)") }
            }
            let properties = schema["properties"]
            for (name, member) in members {
                if let sub = properties?[name] {
                    found += errors(member, sub, "\(path).\(name)")
                } else if case .bool(false)? = schema["additionalProperties"] {
                    found.append("\(path): unexpected \(name)")
                } else if case .object? = schema["additionalProperties"], let sub = schema["additionalProperties"] {
                    found += errors(member, sub, "\(path).\(name)")
                }
            }
        }
        if case let .array(items) = value, let sub = schema["items"] {
            for (i, item) in items.enumerated() { found += errors(item, sub, "\(path)[\(i)]") }
        }
        return found
    }

    static func matches(_ value: JSONValue, _ type: String) -> Bool {
        switch (type, value) {
        case ("null", .null), ("boolean", .bool), ("string", .string), ("array", .array), ("object", .object): return true
        case let ("integer", .number(n)): return Int64(n) != nil
        case ("number", .number): return true
        default: return false
        }
    }
}

/// Every query command's JSON output validates against its schema in `schemas/output`,
/// and neither JSON nor CSV output abbreviates anything.
@Suite struct OutputSchemaTests {
    static let schemas = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("schemas/output")

    @Test func jsonOutputValidatesAndNothingIsAbbreviated() throws {
        let s = Scratch()
        let (file, _) = try generatedStream(s, events: 4000, seed: 5, badFraction: 0.05)
        let db = s.path("db.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", file, "--db", db, "--format", "json"]).status == 0)
        let (asid, other, app, device, friendOf) = try DatabaseQueue(path: db).read { db in
            let pair = try Row.fetchOne(db, sql: """
                SELECT a.asid, b.asid FROM asids a JOIN asids b ON a.user_id = b.user_id AND a.asid < b.asid LIMIT 1
                """)!
            let d = try Row.fetchOne(db, sql: "SELECT app_id, device_id FROM devices LIMIT 1")!
            let f = try String.fetchOne(db, sql: "SELECT a FROM friend_edges LIMIT 1")!
            return (pair[0] as String, pair[1] as String, d[0] as String, d[1] as String, f)
        }
        let commands: [(String, [String])] = [
            ("user", ["user", asid]), ("user-history", ["user", asid, "--history"]), ("device", ["device", app, device]),
            ("friends", ["friends", friendOf]), ("access", ["access", asid, other, "--as-of", "2026-11-02T00:00:00Z"]),
            ("explain", ["explain", asid, other]), ("stats", ["stats"]), ("quarantine-list", ["quarantine", "list", "--limit", "0"]),
        ]
        for (name, arguments) in commands {
            let schemaBytes = [UInt8](try Data(contentsOf: Self.schemas.appendingPathComponent("\(name).schema.json")))
            let schema = MiniSchema(schema: try JSONParser.parse(schemaBytes))
            let json = try run(Binaries.idrecon, arguments + ["--db", db, "--format", "json"])
            #expect(json.status == 0, "\(name): \(json.stderr)")
            let lines = json.stdout.split(separator: "\n")
            #expect(!lines.isEmpty, "\(name): no output")
            for line in lines {
                let value = try JSONParser.parse(Array(line.utf8))
                let problems = schema.errors(value)
                #expect(problems.isEmpty, "\(name): \(problems) in \(line)")
            }
            #expect(!json.stdout.contains("…"), "\(name): JSON abbreviates")
            let csv = try run(Binaries.idrecon, arguments + ["--db", db, "--format", "csv"])
            #expect(csv.status == 0 && !csv.stdout.contains("…"), "\(name): CSV abbreviates")
        }
    }

    /// The checker itself: the output that the issue found is rejected.
    @Test func stringlyTypedOutputIsRejected() throws {
        let schemaBytes = [UInt8](try Data(contentsOf: Self.schemas.appendingPathComponent("user.schema.json")))
        let schema = MiniSchema(schema: try JSONParser.parse(schemaBytes))
        let old = #"{"user_id":"u:1","asid":"1","first_login_at":"2026-11-01T00:00:10.000Z","access":"allowed","#
            + #""devices":"1/d:enabled","keys":"email:47aea2e70a0c…","ambiguous_keys":"","any_limited":"false"}"#
        let problems = schema.errors(try JSONParser.parse(Array(old.utf8)))
        #expect(problems.count == 4, "\(problems)")
    }
}
