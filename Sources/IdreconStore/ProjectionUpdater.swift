import GRDB
import IdreconDomain

/// What the projections need of one logged event; read from the event or from the
/// `events` columns (replay never re-parses payloads).
struct ProjectionFact: Sendable {
    var seq: Int64
    var key: EventKey
    var appID: String
    var deviceID: String
    var type: EventType
    var tracking: Tracking?
    var asid: String?
    var linkEmail: String?
    var linkTFB: String?
    var friends: [String]?
    var declinesFriends: Bool

    init(seq: Int64, event e: LoginEvent, columns c: EventColumns) {
        self.seq = seq
        key = EventKey(at: e.occurredAt, eventID: e.eventID)
        appID = e.appID
        deviceID = e.deviceID
        type = e.type
        tracking = e.type == .login ? e.tracking : nil
        asid = e.asid
        linkEmail = c.linkEmail
        linkTFB = c.linkTFB
        friends = e.type == .login ? e.friendASIDs : nil
        declinesFriends = c.declinesFriends
    }

    init(row: Row) {
        seq = row["seq"]
        key = EventKey(at: row["occurred_at"], eventID: row["event_id"])
        appID = row["app_id"]
        deviceID = row["device_id"]
        type = EventType(rawValue: row["type"]) ?? .login
        tracking = (row["tracking"] as String?).flatMap(Tracking.init)
        asid = row["asid"]
        linkEmail = row["link_email"]
        linkTFB = row["link_tfb"]
        friends = (row["friends"] as String?).map { $0.isEmpty ? [] : $0.split(separator: ",").map(String.init) }
        declinesFriends = row["declines_friends"] == 1
    }

    static let selectColumns = "seq, event_id, occurred_at, app_id, device_id, type, tracking, asid, link_email, link_tfb, friends, declines_friends"

    var deviceFact: DeviceFact { DeviceFact(key: key, type: type, tracking: tracking, asid: asid) }
}

/// The derived columns of `events` for one event.
struct EventColumns {
    var deviceKey: Int64
    var asidKey: Int64?
    var linkEmail: String?
    var linkTFB: String?
    var friends: String?
    var declinesFriends: Bool

    init(_ e: LoginEvent) {
        deviceKey = StableHash.key(e.appID, e.deviceID)
        asidKey = e.asid.map { StableHash.key($0) }
        let login = e.type == .login
        linkEmail = login ? e.email.map(LinkKey.email) : nil
        linkTFB = login ? e.tokenForBusiness.map(LinkKey.tokenForBusiness) : nil
        friends = login ? e.friendASIDs?.joined(separator: ",") : nil
        declinesFriends = login && (e.declinedPermissions?.contains("user_friends") ?? false)
    }
}

/// Applies appended events to one generation of projection tables, inside the caller's
/// transaction. Only what the events touch is recomputed: a device is folded again only
/// when an event arrives older than its latest; an identity component only when a link,
/// a key's ambiguity or a member's first login changes.
struct ProjectionUpdater {
    let db: Database
    let tables: ProjectionTables
    let config: IdentityConfig
    let blocked: Set<String>
    /// Device rebuilds read logged events up to this sequence number (replay progress).
    let visibleSeq: Int64

    func apply(_ facts: [ProjectionFact]) throws {
        guard !facts.isEmpty else { return }
        try updateDevices(facts)
        try updateIdentities(facts)
        try updateFriends(facts)
    }

    // MARK: Devices and limited spans

    private struct DeviceID: Hashable, Comparable {
        var app: String
        var device: String
        static func < (a: DeviceID, b: DeviceID) -> Bool { (a.app, a.device) < (b.app, b.device) }
    }

    private func updateDevices(_ facts: [ProjectionFact]) throws {
        let t = tables
        let load = try db.cachedStatement(sql: "SELECT * FROM \(t.devices) WHERE app_id = ? AND device_id = ?")
        let closeSpan = try db.cachedStatement(sql: """
            UPDATE \(t.spans) SET to_at = ?, to_event = ? WHERE app_id = ? AND device_id = ? AND from_at = ? AND from_event = ?
            """)
        let openSpan = try db.cachedStatement(sql: """
            INSERT INTO \(t.spans) (app_id, device_id, from_at, from_event, to_at, to_event, asid) VALUES (?, ?, ?, ?, ?, ?, ?)
            """)
        for (device, list) in Dictionary(grouping: facts, by: { DeviceID(app: $0.appID, device: $0.deviceID) }) {
            let sorted = list.sorted { $0.key < $1.key }
            var state = try Row.fetchOne(load, arguments: [device.app, device.device]).map(Self.deviceState) ?? DeviceState()
            if let last = state.last, sorted[0].key < last {
                // A late event: fold the device again from the log.
                let rows = try Row.fetchAll(db.cachedStatement(sql: """
                    SELECT \(ProjectionFact.selectColumns) FROM events
                    WHERE device_key = ? AND app_id = ? AND device_id = ? AND seq <= ?
                    """), arguments: [StableHash.key(device.app, device.device), device.app, device.device, visibleSeq])
                let (folded, spans) = DeviceState.fold(rows.map { ProjectionFact(row: $0).deviceFact })
                state = folded
                try db.cachedStatement(sql: "DELETE FROM \(t.spans) WHERE app_id = ? AND device_id = ?").execute(arguments: [device.app, device.device])
                for span in spans {
                    try openSpan.execute(arguments: [device.app, device.device, span.from.at, span.from.eventID, span.to?.at, span.to?.eventID, span.asid])
                }
            } else {
                for fact in sorted {
                    let (closed, opened) = state.apply(fact.deviceFact)
                    if let closed, let to = closed.to {
                        try closeSpan.execute(arguments: [to.at, to.eventID, device.app, device.device, closed.from.at, closed.from.eventID])
                    }
                    if let opened {
                        try openSpan.execute(arguments: [device.app, device.device, opened.from.at, opened.from.eventID, nil, nil, opened.asid])
                    }
                }
            }
            try db.cachedStatement(sql: """
                INSERT OR REPLACE INTO \(t.devices) (app_id, device_id, mode, asid, first_at, first_event, last_at, last_event,
                    logins, logouts, anomalies, last_login_tracking, logout_since_login)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [
                    device.app, device.device, state.mode.rawValue, state.asid, state.first!.at, state.first!.eventID,
                    state.last!.at, state.last!.eventID, state.logins, state.logouts, state.anomalies,
                    state.lastLoginTracking?.rawValue, state.logoutSinceLastLogin ? 1 : 0,
                ])
        }
    }

    static func deviceState(_ row: Row) -> DeviceState {
        var s = DeviceState()
        s.mode = DeviceMode(rawValue: row["mode"]) ?? .loggedOut
        s.asid = row["asid"]
        s.first = EventKey(at: row["first_at"], eventID: row["first_event"])
        s.last = EventKey(at: row["last_at"], eventID: row["last_event"])
        s.logins = row["logins"]
        s.logouts = row["logouts"]
        s.anomalies = row["anomalies"]
        s.lastLoginTracking = (row["last_login_tracking"] as String?).flatMap(Tracking.init)
        s.logoutSinceLastLogin = row["logout_since_login"] == 1
        return s
    }

    // MARK: Identities

    private func updateIdentities(_ facts: [ProjectionFact]) throws {
        let t = tables
        let loadMember = try db.cachedStatement(sql: "SELECT first_login_at, first_login_event FROM \(t.asids) WHERE asid = ?")
        let insertMember = try db.cachedStatement(sql: "INSERT INTO \(t.asids) (asid, first_login_at, first_login_event, user_id) VALUES (?, ?, ?, ?)")
        let moveFirstLogin = try db.cachedStatement(sql: "UPDATE \(t.asids) SET first_login_at = ?, first_login_event = ? WHERE asid = ?")
        let loadLink = try db.cachedStatement(sql: "SELECT first_at, first_event FROM \(t.asidKeys) WHERE asid = ? AND key = ?")
        let insertLink = try db.cachedStatement(sql: "INSERT INTO \(t.asidKeys) (asid, key, first_at, first_event) VALUES (?, ?, ?, ?)")
        let moveLink = try db.cachedStatement(sql: "UPDATE \(t.asidKeys) SET first_at = ?, first_event = ? WHERE asid = ? AND key = ?")
        let loadKey = try db.cachedStatement(sql: "SELECT asids, ambiguous FROM \(t.linkKeys) WHERE key = ?")
        let saveKey = try db.cachedStatement(sql: "INSERT OR REPLACE INTO \(t.linkKeys) (key, asids, ambiguous) VALUES (?, ?, ?)")

        // Batch-level folding first: one read and at most one write per ASID and per link.
        var firstLogins: [String: EventKey] = [:]
        var links: [String: [String: EventKey]] = [:]
        for fact in facts where fact.type == .login {
            guard let asid = fact.asid else { continue }
            if firstLogins[asid].map({ fact.key < $0 }) ?? true { firstLogins[asid] = fact.key }
            for key in [fact.linkEmail, fact.linkTFB].compactMap({ $0 }) where links[asid, default: [:]][key].map({ fact.key < $0 }) ?? true {
                links[asid, default: [:]][key] = fact.key
            }
        }
        var dirty: Set<String> = []
        for (asid, first) in firstLogins.sorted(by: { $0.key < $1.key }) {
            if let row = try Row.fetchOne(loadMember, arguments: [asid]) {
                if first < EventKey(at: row[0], eventID: row[1]) {
                    try moveFirstLogin.execute(arguments: [first.at, first.eventID, asid])
                    dirty.insert(asid)
                }
            } else {
                try insertMember.execute(arguments: [asid, first.at, first.eventID, "u:" + asid])
                dirty.insert(asid)
            }
        }
        for (asid, keys) in links.sorted(by: { $0.key < $1.key }) {
            for (key, first) in keys.sorted(by: { $0.key < $1.key }) {
                if let row = try Row.fetchOne(loadLink, arguments: [asid, key]) {
                    if first < EventKey(at: row[0], eventID: row[1]) {
                        try moveLink.execute(arguments: [first.at, first.eventID, asid, key])
                    }
                    continue
                }
                try insertLink.execute(arguments: [asid, key, first.at, first.eventID])
                let stored = try Row.fetchOne(loadKey, arguments: [key])
                let count = (stored?["asids"] as Int? ?? 0) + 1
                let before = stored.flatMap { KeyAmbiguity(rawValue: $0["ambiguous"]) }
                let after = config.ambiguity(key: key, asids: count, blocked: blocked)
                try saveKey.execute(arguments: [key, count, after?.rawValue ?? 0])
                if before != after {
                    dirty.formUnion(try String.fetchAll(db.cachedStatement(sql: "SELECT asid FROM \(t.asidKeys) WHERE key = ?"), arguments: [key]))
                } else if after == nil {
                    dirty.insert(asid)
                }
            }
        }
        try recomputeComponents(dirty)
    }

    /// Recomputes `user_id` for the components containing `asids`.
    func recomputeComponents(_ asids: Set<String>) throws {
        let t = tables
        let keysOf = try db.cachedStatement(sql: """
            SELECT k.key FROM \(t.asidKeys) k JOIN \(t.linkKeys) l ON l.key = k.key WHERE k.asid = ? AND l.ambiguous = 0
            """)
        let asidsOf = try db.cachedStatement(sql: "SELECT asid FROM \(t.asidKeys) WHERE key = ?")
        let member = try db.cachedStatement(sql: "SELECT first_login_at, first_login_event, user_id FROM \(t.asids) WHERE asid = ?")
        let setUser = try db.cachedStatement(sql: "UPDATE \(t.asids) SET user_id = ? WHERE asid = ?")
        var done: Set<String> = []
        for start in asids.sorted() where !done.contains(start) {
            let component = try IdentityRules.component(
                of: start,
                keysOf: { try String.fetchAll(keysOf, arguments: [$0]) },
                asidsOf: { try String.fetchAll(asidsOf, arguments: [$0]) })
            done.formUnion(component)
            var members: [(asid: String, firstLogin: EventKey, userID: String)] = []
            for asid in component {
                guard let row = try Row.fetchOne(member, arguments: [asid]) else { continue }
                members.append((asid, EventKey(at: row[0], eventID: row[1]), row[2]))
            }
            guard !members.isEmpty else { continue }
            let userID = IdentityRules.userID(members: members.map { ($0.asid, $0.firstLogin) })
            for m in members where m.userID != userID { try setUser.execute(arguments: [userID, m.asid]) }
        }
    }

    // MARK: Friend graph

    private func updateFriends(_ facts: [ProjectionFact]) throws {
        let t = tables
        let load = try db.cachedStatement(sql: "SELECT * FROM \(t.snapshots) WHERE asid = ?")
        let save = try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO \(t.snapshots) (asid, listed_at, listed_event, friends, declined_at, declined_event) VALUES (?, ?, ?, ?, ?, ?)
            """)
        let mention = try db.cachedStatement(sql: """
            INSERT INTO \(t.mentions) (asid, first_at, first_event) VALUES (?, ?, ?)
            ON CONFLICT(asid) DO UPDATE SET first_at = excluded.first_at, first_event = excluded.first_event
            WHERE excluded.first_at < first_at OR (excluded.first_at = first_at AND excluded.first_event < first_event)
            """)
        var mentions: [String: EventKey] = [:]
        var byASID: [String: [ProjectionFact]] = [:]
        for fact in facts where fact.type == .login {
            guard let asid = fact.asid, fact.friends != nil || fact.declinesFriends else { continue }
            byASID[asid, default: []].append(fact)
            for friend in fact.friends ?? [] where mentions[friend].map({ fact.key < $0 }) ?? true { mentions[friend] = fact.key }
        }
        for (friend, first) in mentions.sorted(by: { $0.key < $1.key }) {
            try mention.execute(arguments: [friend, first.at, first.eventID])
        }
        for (asid, list) in byASID.sorted(by: { $0.key < $1.key }) {
            var snapshot = FriendSnapshot()
            if let row = try Row.fetchOne(load, arguments: [asid]) {
                snapshot = FriendSnapshot(
                    listedAt: (row["listed_at"] as Int64?).map { EventKey(at: $0, eventID: row["listed_event"]) },
                    friends: (row["friends"] as String).split(separator: ",").map(String.init),
                    declinedAt: (row["declined_at"] as Int64?).map { EventKey(at: $0, eventID: row["declined_event"]) })
            }
            let before = snapshot.effective
            var changed = false
            for fact in list {
                changed = snapshot.apply(key: fact.key, friends: fact.friends, declinesFriends: fact.declinesFriends) || changed
            }
            guard changed else { continue }
            try save.execute(arguments: [
                asid, snapshot.listedAt?.at, snapshot.listedAt?.eventID, snapshot.friends.joined(separator: ","),
                snapshot.declinedAt?.at, snapshot.declinedAt?.eventID,
            ])
            let after = snapshot.effective
            for friend in before.subtracting(after).sorted() { try setEdge(from: asid, to: friend, on: false) }
            for friend in after.subtracting(before).sorted() { try setEdge(from: asid, to: friend, on: true) }
        }
    }

    /// Sets whether `from`'s snapshot names `to`; the edge {from, to} exists while either names the other.
    private func setEdge(from: String, to: String, on: Bool) throws {
        let t = tables
        let (a, b) = from < to ? (from, to) : (to, from)
        let mine = from == a ? "by_a" : "by_b", theirs = from == a ? "by_b" : "by_a"
        if on {
            try db.cachedStatement(sql: """
                INSERT INTO \(t.edges) (a, b, by_a, by_b) VALUES (?, ?, ?, ?) ON CONFLICT(a, b) DO UPDATE SET \(mine) = 1
                """).execute(arguments: [a, b, from == a ? 1 : 0, from == a ? 0 : 1])
        } else if try Int.fetchOne(db.cachedStatement(sql: "SELECT \(theirs) FROM \(t.edges) WHERE a = ? AND b = ?"), arguments: [a, b]) == 1 {
            try db.cachedStatement(sql: "UPDATE \(t.edges) SET \(mine) = 0 WHERE a = ? AND b = ?").execute(arguments: [a, b])
        } else {
            try db.cachedStatement(sql: "DELETE FROM \(t.edges) WHERE a = ? AND b = ?").execute(arguments: [a, b])
        }
    }
}
