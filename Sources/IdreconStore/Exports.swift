import Crypto
import Foundation
import GRDB
import IdreconDomain
import IdreconProjections

/// What `export` can write; field sets and sort orders are SPEC section 5's.
public enum ExportKind: String, CaseIterable, Sendable {
    case identities, devices, friends, access
    /// Source positions never read (Kafka retention gaps); not a projection.
    case skipped

    public var columns: [String] {
        switch self {
        case .skipped: return ["source", "first_position", "last_position", "records", "detected_at"]
        case .identities: return ["user_id", "asids", "email_sha256"]
        case .devices: return ["app_id", "device_id", "mode", "asid", "anomalies"]
        case .friends: return ["a", "b"]
        case .access: return ["asid", "state"]
        }
    }
}

extension EventStore {
    /// Streams the export rows, in order, from one read transaction (bounded memory).
    public func export(_ kind: ExportKind, asOf: Int64? = nil, row: ([JSONValue]) throws -> Void) throws(IdreconError) {
        try read { db in try Self.export(db, kind, asOf: asOf, tables: .views, row: row) }
    }

    static func export(_ db: Database, _ kind: ExportKind, asOf: Int64?, tables t: ProjectionTables, row: ([JSONValue]) throws -> Void) throws {
        switch kind {
        case .skipped:
            for r in try SkippedRange.order(Column("source"), Column("first_position")).fetchAll(db) {
                try row([.string(r.source), .number(String(r.firstPosition)), .number(String(r.lastPosition)),
                         .number(String(r.records)), .string(Timestamp.format(r.detectedAt))])
            }
        case .devices:
            let cursor = try Row.fetchCursor(db, sql: "SELECT app_id, device_id, mode, asid, anomalies FROM \(t.devices) ORDER BY app_id, device_id")
            while let r = try cursor.next() {
                try row([.string(r[0]), .string(r[1]), .string(r[2]), (r[3] as String?).map(JSONValue.string) ?? .null, .number(String(r[4] as Int64))])
            }
        case .friends:
            let cursor = try Row.fetchCursor(db, sql: "SELECT a, b FROM \(t.edges) ORDER BY a, b")
            while let r = try cursor.next() { try row([.string(r[0]), .string(r[1])]) }
        case .identities:
            let emails = try db.makeStatement(sql: """
                SELECT DISTINCT substr(k.key, 7) FROM \(t.asids) a JOIN \(t.asidKeys) k ON k.asid = a.asid
                WHERE a.user_id = ? AND k.key LIKE 'email:%' ORDER BY 1
                """)
            let cursor = try Row.fetchCursor(db, sql: "SELECT user_id, asid FROM \(t.asids) ORDER BY user_id, asid")
            var current: String?
            var members: [String] = []
            func flush() throws {
                guard let user = current else { return }
                let hashes = try String.fetchAll(emails, arguments: [user])
                try row([.string(user), .array(members.map(JSONValue.string)), .array(hashes.map(JSONValue.string))])
            }
            while let r = try cursor.next() {
                let user: String = r[0]
                if user != current {
                    try flush()
                    current = user
                    members = []
                }
                members.append(r[1])
            }
            try flush()
        case .access:
            let until = asOf ?? .max
            let cursor = try String.fetchCursor(db, sql: """
                SELECT asid FROM \(t.asids) WHERE first_login_at <= ?1 UNION SELECT asid FROM \(t.mentions) WHERE first_at <= ?1 ORDER BY 1
                """, arguments: [until])
            let lookup = try AccessLookup(db, tables: t)
            while let asid = try cursor.next() {
                try row([.string(asid), .string(try lookup.answer(asid, asOf: asOf).state.rawValue)])
            }
        }
    }

    /// Digests of the live projections.
    public func projectionDigests() throws(IdreconError) -> [String: String] {
        try read { db in try ProjectionTables.digests(db, tables: ProjectionTables(generation: 0, registry: projections)) }
    }
}
