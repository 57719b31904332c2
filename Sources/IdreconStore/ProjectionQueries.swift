import Foundation
import GRDB
import IdreconDomain
import IdreconProjections

/// One device as the devices projection holds it.
public struct DeviceRecord: Sendable, Equatable, Codable {
    public var appID: String
    public var deviceID: String
    public var mode: DeviceMode
    public var asid: String?
    public var firstAt: Int64
    public var lastAt: Int64
    public var lastEventID: String
    public var logins: Int
    public var logouts: Int
    public var anomalies: Int

    init(row: Row) {
        appID = row["app_id"]
        deviceID = row["device_id"]
        mode = DeviceMode(rawValue: row["mode"]) ?? .loggedOut
        asid = row["asid"]
        firstAt = row["first_at"]
        lastAt = row["last_at"]
        lastEventID = row["last_event"]
        logins = row["logins"]
        logouts = row["logouts"]
        anomalies = row["anomalies"]
    }
}

/// The access state of an ASID at a time, with the evidence that decided it.
public struct AccessAnswer: Sendable, Equatable {
    public var asid: String
    public var state: AccessState
    /// For `forbidden_limited`: the event that made it limited, and the device.
    public var evidenceEvent: String?
    public var evidenceDevice: String?
}

extension AccessAnswer {
    /// The fields of an access answer in every output (`access`, `GET /v1/access`), in order.
    public static let fieldNames = ["asid", "state", "as_of", "evidence_event", "evidence_device"]

    /// The values of `fieldNames`; `asOf` nil: "now".
    public func fields(asOf: Int64?) -> [JSONValue] { fields(asOf: Self.asOf(asOf)) }

    /// The values of `fieldNames` with `as_of` given (`asOf(_:)`: a batch formats its time once).
    public func fields(asOf: JSONValue) -> [JSONValue] {
        [.string(asid), .string(state.rawValue), asOf, evidenceEvent.map(JSONValue.string) ?? .null,
         evidenceDevice.map(JSONValue.string) ?? .null]
    }

    /// The `as_of` field of answers at `asOf` (nil: "now").
    public static func asOf(_ asOf: Int64?) -> JSONValue { .string(asOf.map(Timestamp.format) ?? "now") }
}

extension DeviceRecord {
    /// The fields of a device in every output (`device`, `GET /v1/devices`), in order.
    public static let fieldNames = [
        "app_id", "device_id", "mode", "asid", "anomalies", "logins", "logouts", "first_at", "last_at", "last_event_id",
    ]

    /// The values of `fieldNames`.
    public var fields: [JSONValue] {
        [.string(appID), .string(deviceID), .string(mode.rawValue), asid.map(JSONValue.string) ?? .null,
         .number(String(anomalies)), .number(String(logins)), .number(String(logouts)),
         .string(Timestamp.format(firstAt)), .string(Timestamp.format(lastAt)), .string(lastEventID)]
    }
}

/// A link between two ASIDs through one key, for `explain`.
public struct LinkHop: Sendable, Equatable {
    public var from: String
    public var to: String
    public var key: String
    public var fromEvent: String
    public var toEvent: String
}

/// An identity: its members and keys.
public struct IdentityRecord: Sendable, Equatable {
    public var userID: String
    public var members: [(asid: String, firstLoginAt: Int64, firstLoginEvent: String)]
    public var keys: [(key: String, asids: Int, ambiguity: KeyAmbiguity?)]

    public static func == (a: IdentityRecord, b: IdentityRecord) -> Bool {
        a.userID == b.userID && a.members.map(\.asid) == b.members.map(\.asid) && a.keys.map(\.key) == b.keys.map(\.key)
    }
}

extension EventStore {
    public func device(app: String, device: String) throws(IdreconError) -> DeviceRecord? {
        try read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM devices WHERE app_id = ? AND device_id = ?", arguments: [app, device]).map(DeviceRecord.init)
        }
    }

    public func devices(holding asid: String) throws(IdreconError) -> [DeviceRecord] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM devices WHERE asid = ? ORDER BY app_id, device_id", arguments: [asid]).map(DeviceRecord.init)
        }
    }

    /// Access state of `asid` at `asOf` (UTC ms; nil: now), by indexed lookups.
    public func access(_ asid: String, asOf: Int64? = nil) throws(IdreconError) -> AccessAnswer {
        try read { db in try Self.access(db, asid, asOf: asOf) }
    }

    /// Access of several ASIDs at `asOf` (nil: now) and how far the log and the projections
    /// were, all from one read transaction: the position is the one the answers were read at.
    /// A batch of `SplitReader.minimumBatch` or more read while no other is, is read on two cores
    /// (`SplitReader`), except by a one-shot reader, whose reads may be of one state (`readOneState`).
    public func access(
        _ asids: [String], asOf: Int64?
    ) throws(IdreconError) -> (answers: [AccessAnswer], lastSeq: Int64, appliedSeq: Int64) {
        let onOneConnection = { () throws(IdreconError) in
            try self.read { db in try Self.access(db, asids, asOf: asOf) }
        }
        guard !isOneShot else { return try onOneConnection() }
        return try splitReaders.lend(path, batch: asids.count) { reader throws(IdreconError) in
            if let reader { return try reader.access(asids, asOf: asOf) }
            return try onOneConnection()
        }
    }

    static func access(
        _ db: Database, _ asids: [String], asOf: Int64?
    ) throws -> (answers: [AccessAnswer], lastSeq: Int64, appliedSeq: Int64) {
        let (last, applied) = try sequences(db)
        var answers = [AccessAnswer](repeating: AccessAnswer(asid: "", state: .unseen), count: asids.count)
        let lookup = try AccessLookup(db)
        for i in keyOrder(asids) { answers[i] = try lookup.answer(asids[i], asOf: asOf) }
        return (answers, last, applied)
    }

    /// The indices of `asids` in key order. Asked in key order, neighbours share B-tree pages (a
    /// batch of 1,000 random ASIDs: 10.1 ms against 12.6 ms in request order); answered in request
    /// order. Ordered by the first 16 bytes as two words, by all the bytes only where those tie.
    static func keyOrder(_ asids: [String]) -> [Int] {
        var order = asids.indices.map { i in
            (high: asids[i].bytesWord(at: 0), low: asids[i].bytesWord(at: 8), index: i)
        }
        order.sort { a, b in
            guard a.high == b.high else { return a.high < b.high }
            guard a.low == b.low else { return a.low < b.low }
            return asids[a.index].bytesPrecede(asids[b.index])
        }
        return order.map(\.index)
    }

    static func access(_ db: Database, _ asid: String, asOf: Int64?, tables: ProjectionTables = .views) throws -> AccessAnswer {
        try AccessLookup(db, tables: tables).answer(asid, asOf: asOf)
    }

    /// `access`'s statements, prepared once for many ASIDs (a batch of the read API, an audit,
    /// an export): looking a statement up in the connection's cache hashes its SQL. Driven
    /// through SQLite's C API: the read API and `audit calls` ask this for every ASID, and
    /// GRDB's row boxing cost more than the seeks.
    struct AccessLookup {
        private let loggedIn, mentions, heldSpan, latestLimited: BulkStatement

        init(_ db: Database, tables: ProjectionTables = .views) throws {
            loggedIn = try BulkStatement(cached: db, "SELECT 1 FROM \(tables.asids) WHERE asid = ? AND first_login_at <= ?")
            mentions = try BulkStatement(cached: db, "SELECT 1 FROM \(tables.mentions) WHERE asid = ? AND first_at <= ?")
            heldSpan = try BulkStatement(cached: db, """
                SELECT from_event, app_id, device_id FROM \(tables.spans)
                WHERE asid = ? AND from_at <= ? AND (to_at IS NULL OR to_at > ?) ORDER BY from_at, from_event LIMIT 1
                """)
            latestLimited = try BulkStatement(cached: db, """
                SELECT from_event, app_id, device_id, to_at FROM \(tables.asidSpans)
                WHERE asid = ? AND from_at <= ? ORDER BY from_at DESC, from_event DESC LIMIT 1
                """)
        }

        func answer(_ asid: String, asOf: Int64?) throws -> AccessAnswer {
            let t = asOf ?? .max
            let evidence = { (row: BulkStatement.Reader) in (event: row.string(0), device: "\(row.string(1))/\(row.string(2))") }
            // The ASID's latest limited login by t (nil: none), with its evidence while its span
            // lasts (the span ends at the ASID's next login). A device's limited span starts at
            // a limited login of the ASID, so with none by t no device holds it, and with one
            // the ASID has logged in by t: two seeks per logged-in ASID.
            let latest = try latestLimited.first({ $0.add(asid); $0.add(t) }, { row in
                row.isNull(3) || row.int(3) > t ? evidence(row) : nil
            })
            if latest != nil, let span = try heldSpan.first({ $0.add(asid); $0.add(t); $0.add(t) }, evidence) {
                return AccessAnswer(asid: asid, state: .forbiddenLimited, evidenceEvent: span.event, evidenceDevice: span.device)
            }
            if let login = latest ?? nil {
                return AccessAnswer(asid: asid, state: .forbiddenLimited, evidenceEvent: login.event, evidenceDevice: login.device)
            }
            // No limited login holds it: logged in by t (an ended limited span says so) is allowed.
            let loggedInByT = { try latest != nil || loggedIn.first({ $0.add(asid); $0.add(t) }, { _ in true }) != nil }
            return AccessAnswer(asid: asid, state: try AccessState.decide(
                latestLoginLimited: { try loggedInByT() ? false : nil }, heldLimited: { false },
                mentioned: { try mentions.first({ $0.add(asid); $0.add(t) }, { _ in true }) != nil }))
        }
    }

    /// The user ID of an ASID, of an e-mail (any member that logged in with it) or a user ID.
    public func userID(asid: String? = nil, email: String? = nil, userID: String? = nil) throws(IdreconError) -> String? {
        try read { db in
            if let asid { return try String.fetchOne(db, sql: "SELECT user_id FROM asids WHERE asid = ?", arguments: [asid]) }
            if let email {
                return try String.fetchOne(db, sql: """
                    SELECT a.user_id FROM asid_keys k JOIN asids a ON a.asid = k.asid WHERE k.key = ? ORDER BY a.user_id LIMIT 1
                    """, arguments: [LinkKey.email(email)])
            }
            if let userID { return try String.fetchOne(db, sql: "SELECT user_id FROM asids WHERE user_id = ? LIMIT 1", arguments: [userID]) }
            return nil
        }
    }

    /// Every identity an e-mail belongs to (an ambiguous e-mail can name several).
    public func userIDs(email: String) throws(IdreconError) -> [String] {
        try read { db in
            try String.fetchAll(db, sql: """
                SELECT DISTINCT a.user_id FROM asid_keys k JOIN asids a ON a.asid = k.asid WHERE k.key = ? ORDER BY a.user_id
                """, arguments: [LinkKey.email(email)])
        }
    }

    public func identity(_ userID: String) throws(IdreconError) -> IdentityRecord? {
        try read { db in
            let members = try Row.fetchAll(db, sql: """
                SELECT asid, first_login_at, first_login_event FROM asids WHERE user_id = ? ORDER BY asid
                """, arguments: [userID]).map { (asid: $0["asid"] as String, firstLoginAt: $0["first_login_at"] as Int64, firstLoginEvent: $0["first_login_event"] as String) }
            guard !members.isEmpty else { return nil }
            let keys = try Row.fetchAll(db, sql: """
                SELECT DISTINCT l.key, l.asids, l.ambiguous FROM asids a JOIN asid_keys k ON k.asid = a.asid JOIN link_keys l ON l.key = k.key
                WHERE a.user_id = ? ORDER BY l.key
                """, arguments: [userID]).map { (key: $0["key"] as String, asids: $0["asids"] as Int, ambiguity: KeyAmbiguity(rawValue: $0["ambiguous"])) }
            return IdentityRecord(userID: userID, members: members, keys: keys)
        }
    }

    /// The shortest chain of linking keys from `a` to `b`, or nil when they are not one identity.
    public func explain(_ a: String, _ b: String) throws(IdreconError) -> [LinkHop]? {
        try read { db in
            guard try Int.fetchOne(db, sql: "SELECT 1 FROM asids WHERE asid = ?", arguments: [a]) != nil else { return nil }
            if a.sameBytes(as: b) { return [] }
            let keysOf = try db.cachedStatement(sql: """
                SELECT k.key, k.first_event FROM asid_keys k JOIN link_keys l ON l.key = k.key WHERE k.asid = ? AND l.ambiguous = 0 ORDER BY k.key
                """)
            let asidsOf = try db.cachedStatement(sql: "SELECT asid, first_event FROM asid_keys WHERE key = ? ORDER BY asid")
            // The event that first linked each (ASID, key) the search reads: the hops' evidence.
            var linkedBy: [String: [String: String]] = [:]
            var previous: [String: LinkHop] = [:]
            _ = try IdentityRules.component(
                of: a,
                keysOf: { asid in
                    try Row.fetchAll(keysOf, arguments: [asid]).map { row in
                        linkedBy[row["key"], default: [:]][asid] = row["first_event"]
                        return row["key"]
                    }
                },
                asidsOf: { key in
                    try Row.fetchAll(asidsOf, arguments: [key]).map { row in
                        linkedBy[key, default: [:]][row["asid"]] = row["first_event"]
                        return row["asid"]
                    }
                },
                reached: { asid, from, key in
                    previous[asid] = LinkHop(from: from, to: asid, key: key, fromEvent: linkedBy[key]?[from] ?? "",
                                             toEvent: linkedBy[key]?[asid] ?? "")
                    return !asid.sameBytes(as: b)
                })
            guard previous[b] != nil else { return nil }
            var chain: [LinkHop] = []
            var cursor = b
            while !cursor.sameBytes(as: a), let hop = previous[cursor] {
                chain.append(hop)
                cursor = hop.from
            }
            return chain.reversed()
        }
    }

    /// Friends of `asid` (edges of the friend graph) with who names whom.
    public func friends(of asid: String) throws(IdreconError) -> [(friend: String, listedByMe: Bool, listedByThem: Bool)] {
        try read { db in
            try Row.fetchAll(db, sql: """
                SELECT b AS friend, by_a AS mine, by_b AS theirs FROM friend_edges WHERE a = ?1
                UNION ALL SELECT a, by_b, by_a FROM friend_edges WHERE b = ?1 ORDER BY 1
                """, arguments: [asid]).map { ($0["friend"], $0["mine"] == 1, $0["theirs"] == 1) }
        }
    }

    /// Whether the ASID was seen at all (logged in or in a friend list).
    public func seen(_ asid: String) throws(IdreconError) -> Bool {
        try read { db in
            try Int.fetchOne(db, sql: "SELECT 1 FROM asids WHERE asid = ?1 UNION SELECT 1 FROM friend_mentions WHERE asid = ?1", arguments: [asid]) != nil
        }
    }
}

extension EventStore {
    /// The link-key edges of these ASIDs, with the event that first made each link.
    public func keyLinks(of asids: [String]) throws(IdreconError) -> [(asid: String, key: String, event: String)] {
        try read { db in
            try asids.sorted().flatMap { asid in
                try Row.fetchAll(db, sql: "SELECT key, first_event FROM asid_keys WHERE asid = ? ORDER BY key", arguments: [asid])
                    .map { (asid, $0["key"] as String, $0["first_event"] as String) }
            }
        }
    }
}

/// One step of an identity's history: at `event`, a link through `key` joined the group
/// that had `absorbed` as user ID into the one with `into`.
public struct MergeStep: Sendable, Equatable {
    public var at: Int64
    public var event: String
    public var key: String
    public var absorbed: String
    public var into: String
}

extension EventStore {
    /// How an identity came together, in event time: derived from the log's links (so it is
    /// the same whatever the arrival order), replaying the current linking keys in order.
    public func mergeHistory(_ userID: String) throws(IdreconError) -> [MergeStep] {
        try read { db in
            let members = try Row.fetchAll(db, sql: "SELECT asid, first_login_at, first_login_event FROM asids WHERE user_id = ?", arguments: [userID])
            var first: [String: EventKey] = [:]
            for m in members { first[m["asid"]] = EventKey(at: m["first_login_at"], eventID: m["first_login_event"]) }
            var links: [(key: EventKey, asid: String, linkKey: String)] = []
            for asid in first.keys {
                for r in try Row.fetchAll(db, sql: """
                    SELECT k.key, k.first_at, k.first_event FROM asid_keys k JOIN link_keys l ON l.key = k.key
                    WHERE k.asid = ? AND l.ambiguous = 0
                    """, arguments: [asid]) {
                    links.append((EventKey(at: r["first_at"], eventID: r["first_event"]), asid, r["key"]))
                }
            }
            links.sort { $0.key != $1.key ? $0.key < $1.key : ($0.asid, $0.linkKey) < ($1.asid, $1.linkKey) }
            // A group's user ID is its member with the earliest first login.
            var components = IdentityRules.Components()
            var number: [String: Int32] = [:]
            for asid in first.keys.sorted() { number[asid] = components.add() }
            func userOf(_ root: Int32) -> String {
                let group = first.keys.filter { components.root(number[$0]!) == root }
                return IdentityRules.userID(members: group.map { ($0, first[$0]!) })
            }
            var keyOwner: [String: String] = [:]
            var steps: [MergeStep] = []
            for link in links {
                guard let other = keyOwner[link.linkKey] else { keyOwner[link.linkKey] = link.asid; continue }
                let (a, b) = (components.root(number[link.asid]!), components.root(number[other]!))
                guard a != b else { continue }
                let (ua, ub) = (userOf(a), userOf(b))
                let (into, absorbed) = first[String(ua.dropFirst(2))]! < first[String(ub.dropFirst(2))]! ? (ua, ub) : (ub, ua)
                components.join(a, b)
                steps.append(MergeStep(at: link.key.at, event: link.key.eventID, key: link.linkKey, absorbed: absorbed, into: into))
            }
            return steps
        }
    }
}
