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
        friends = (row["friends"] as String?).map(StoredFriendList.split)
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
        let load = try BulkStatement(cached: db, """
            SELECT mode, asid, first_at, first_event, last_at, last_event, logins, logouts, anomalies,
                last_login_tracking, logout_since_login
            FROM \(t.devices) WHERE app_id = ? AND device_id = ?
            """)
        let closeSpan = try BulkStatement(cached: db, """
            UPDATE \(t.spans) SET to_at = ?, to_event = ? WHERE app_id = ? AND device_id = ? AND from_at = ? AND from_event = ?
            """)
        let openSpan = try BulkStatement(cached: db, """
            INSERT INTO \(t.spans) (app_id, device_id, from_at, from_event, to_at, to_event, asid) VALUES (?, ?, ?, ?, ?, ?, ?)
            """)
        let insert = try BulkStatement(cached: db, """
            INSERT INTO \(t.devices) (mode, asid, first_at, first_event, last_at, last_event,
                logins, logouts, anomalies, last_login_tracking, logout_since_login, app_id, device_id)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        let update = try BulkStatement(cached: db, """
            UPDATE \(t.devices) SET mode = ?, asid = ?, first_at = ?, first_event = ?, last_at = ?, last_event = ?,
                logins = ?, logouts = ?, anomalies = ?, last_login_tracking = ?, logout_since_login = ?
            WHERE app_id = ? AND device_id = ?
            """)
        for (device, list) in Dictionary(grouping: facts, by: { DeviceID(app: $0.appID, device: $0.deviceID) }) {
            let sorted = list.sorted { $0.key < $1.key }
            let stored = try load.first({ $0.add(device.app); $0.add(device.device) }, Self.deviceState)
            var state = stored ?? DeviceState()
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
                    try openSpan.run {
                        $0.add(device.app); $0.add(device.device); $0.add(span.from.at); $0.add(span.from.eventID)
                        $0.add(span.to?.at); $0.add(span.to?.eventID); $0.add(span.asid)
                    }
                }
            } else {
                for fact in sorted {
                    let (closed, opened) = state.apply(fact.deviceFact)
                    if let closed, let to = closed.to {
                        try closeSpan.run {
                            $0.add(to.at); $0.add(to.eventID); $0.add(device.app); $0.add(device.device)
                            $0.add(closed.from.at); $0.add(closed.from.eventID)
                        }
                    }
                    if let opened {
                        try openSpan.run {
                            $0.add(device.app); $0.add(device.device); $0.add(opened.from.at); $0.add(opened.from.eventID)
                            $0.add(nil as Int64?); $0.add(nil as String?); $0.add(opened.asid)
                        }
                    }
                }
            }
            try (stored == nil ? insert : update).run {
                $0.add(state.mode.rawValue); $0.add(state.asid)
                $0.add(state.first!.at); $0.add(state.first!.eventID); $0.add(state.last!.at); $0.add(state.last!.eventID)
                $0.add(state.logins); $0.add(state.logouts); $0.add(state.anomalies)
                $0.add(state.lastLoginTracking?.rawValue); $0.add(state.logoutSinceLastLogin)
                $0.add(device.app); $0.add(device.device)
            }
        }
    }

    static func deviceState(_ row: BulkStatement.Reader) -> DeviceState {
        var s = DeviceState()
        s.mode = DeviceMode(rawValue: row.string(0)) ?? .loggedOut
        s.asid = row.optionalString(1)
        s.first = EventKey(at: row.int(2), eventID: row.string(3))
        s.last = EventKey(at: row.int(4), eventID: row.string(5))
        s.logins = Int(row.int(6))
        s.logouts = Int(row.int(7))
        s.anomalies = Int(row.int(8))
        s.lastLoginTracking = row.optionalString(9).flatMap(Tracking.init)
        s.logoutSinceLastLogin = row.int(10) == 1
        return s
    }

    // MARK: Identities

    private func updateIdentities(_ facts: [ProjectionFact]) throws {
        let t = tables
        let loadMember = try BulkStatement(cached: db, "SELECT first_login_at, first_login_event FROM \(t.asids) WHERE asid = ?")
        let insertMember = try BulkStatement(cached: db, "INSERT INTO \(t.asids) (asid, first_login_at, first_login_event, user_id) VALUES (?, ?, ?, ?)")
        let moveFirstLogin = try BulkStatement(cached: db, "UPDATE \(t.asids) SET first_login_at = ?, first_login_event = ? WHERE asid = ?")
        let loadLink = try BulkStatement(cached: db, "SELECT first_at, first_event FROM \(t.asidKeys) WHERE asid = ? AND key = ?")
        let insertLink = try BulkStatement(cached: db, "INSERT INTO \(t.asidKeys) (asid, key, first_at, first_event) VALUES (?, ?, ?, ?)")
        let moveLink = try BulkStatement(cached: db, "UPDATE \(t.asidKeys) SET first_at = ?, first_event = ? WHERE asid = ? AND key = ?")
        let loadKey = try BulkStatement(cached: db, "SELECT asids, ambiguous FROM \(t.linkKeys) WHERE key = ?")
        let saveKey = try BulkStatement(cached: db, "INSERT OR REPLACE INTO \(t.linkKeys) (key, asids, ambiguous) VALUES (?, ?, ?)")
        let asidsOfKey = try BulkStatement(cached: db, "SELECT asid FROM \(t.asidKeys) WHERE key = ?")
        func eventKey(_ row: BulkStatement.Reader) -> EventKey { EventKey(at: row.int(0), eventID: row.string(1)) }

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
            if let stored = try loadMember.first({ $0.add(asid) }, eventKey) {
                if first < stored {
                    try moveFirstLogin.run { $0.add(first.at); $0.add(first.eventID); $0.add(asid) }
                    dirty.insert(asid)
                }
            } else {
                try insertMember.run { $0.add(asid); $0.add(first.at); $0.add(first.eventID); $0.add("u:" + asid) }
                dirty.insert(asid)
            }
        }
        for (asid, keys) in links.sorted(by: { $0.key < $1.key }) {
            for (key, first) in keys.sorted(by: { $0.key < $1.key }) {
                if let stored = try loadLink.first({ $0.add(asid); $0.add(key) }, eventKey) {
                    if first < stored {
                        try moveLink.run { $0.add(first.at); $0.add(first.eventID); $0.add(asid); $0.add(key) }
                    }
                    continue
                }
                try insertLink.run { $0.add(asid); $0.add(key); $0.add(first.at); $0.add(first.eventID) }
                let stored = try loadKey.first({ $0.add(key) }) { (asids: Int($0.int(0)), ambiguous: Int($0.int(1))) }
                let count = (stored?.asids ?? 0) + 1
                let before = stored.flatMap { KeyAmbiguity(rawValue: $0.ambiguous) }
                let after = config.ambiguity(key: key, asids: count, blocked: blocked)
                try saveKey.run { $0.add(key); $0.add(count); $0.add(after?.rawValue ?? 0) }
                if before != after {
                    try asidsOfKey.each({ $0.add(key) }) { dirty.insert($0.string(0)) }
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
        let keysOf = try BulkStatement(cached: db, """
            SELECT k.key FROM \(t.asidKeys) k JOIN \(t.linkKeys) l ON l.key = k.key WHERE k.asid = ? AND l.ambiguous = 0
            """)
        let asidsOf = try BulkStatement(cached: db, "SELECT asid FROM \(t.asidKeys) WHERE key = ?")
        let member = try BulkStatement(cached: db, "SELECT first_login_at, first_login_event, user_id FROM \(t.asids) WHERE asid = ?")
        let setUser = try BulkStatement(cached: db, "UPDATE \(t.asids) SET user_id = ? WHERE asid = ?")
        func strings(_ statement: BulkStatement, _ value: String) throws -> [String] {
            var result: [String] = []
            try statement.each({ $0.add(value) }) { result.append($0.string(0)) }
            return result
        }
        var done: Set<String> = []
        for start in asids.sorted() where !done.contains(start) {
            let component = try IdentityRules.component(
                of: start, keysOf: { try strings(keysOf, $0) }, asidsOf: { try strings(asidsOf, $0) })
            done.formUnion(component)
            var members: [(asid: String, firstLogin: EventKey, userID: String)] = []
            for asid in component {
                guard let m = try member.first({ $0.add(asid) }, { (EventKey(at: $0.int(0), eventID: $0.string(1)), $0.string(2)) }) else { continue }
                members.append((asid, m.0, m.1))
            }
            guard !members.isEmpty else { continue }
            let userID = IdentityRules.userID(members: members.map { ($0.asid, $0.firstLogin) })
            for m in members where m.userID != userID { try setUser.run { $0.add(userID); $0.add(m.asid) } }
        }
    }

    // MARK: Friend graph

    private func updateFriends(_ facts: [ProjectionFact]) throws {
        let t = tables
        let load = try BulkStatement(cached: db, "SELECT listed_at, listed_event, friends, declined_at, declined_event FROM \(t.snapshots) WHERE asid = ?")
        let insert = try BulkStatement(cached: db, """
            INSERT INTO \(t.snapshots) (listed_at, listed_event, friends, declined_at, declined_event, asid) VALUES (?, ?, ?, ?, ?, ?)
            """)
        let update = try BulkStatement(cached: db, """
            UPDATE \(t.snapshots) SET listed_at = ?, listed_event = ?, friends = ?, declined_at = ?, declined_event = ? WHERE asid = ?
            """)
        let mention = try BulkStatement(cached: db, t.recordMention)
        var mentions: [String: EventKey] = [:]
        var byASID: [String: [ProjectionFact]] = [:]
        for fact in facts where fact.type == .login {
            guard let asid = fact.asid, fact.friends != nil || fact.declinesFriends else { continue }
            byASID[asid, default: []].append(fact)
            for friend in fact.friends ?? [] where mentions[friend].map({ fact.key < $0 }) ?? true { mentions[friend] = fact.key }
        }
        for (friend, first) in mentions.sorted(by: { $0.key < $1.key }) {
            try mention.run { $0.add(friend); $0.add(first.at); $0.add(first.eventID) }
        }
        for (asid, list) in byASID.sorted(by: { $0.key < $1.key }) {
            let stored = try load.first({ $0.add(asid) }) { row in
                FriendSnapshot(
                    listedAt: row.isNull(0) ? nil : EventKey(at: row.int(0), eventID: row.string(1)),
                    friends: StoredFriendList.split(row.string(2)),
                    declinedAt: row.isNull(3) ? nil : EventKey(at: row.int(3), eventID: row.string(4)))
            }
            var snapshot = stored ?? FriendSnapshot()
            let before = snapshot.effective
            var changed = false
            for fact in list {
                changed = snapshot.apply(key: fact.key, friends: fact.friends, declinesFriends: fact.declinesFriends) || changed
            }
            guard changed else { continue }
            try (stored == nil ? insert : update).run {
                $0.add(snapshot.listedAt?.at); $0.add(snapshot.listedAt?.eventID); $0.add(snapshot.friends.joined(separator: ","))
                $0.add(snapshot.declinedAt?.at); $0.add(snapshot.declinedAt?.eventID); $0.add(asid)
            }
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
            try BulkStatement(cached: db, """
                INSERT INTO \(t.edges) (a, b, by_a, by_b) VALUES (?, ?, ?, ?) ON CONFLICT(a, b) DO UPDATE SET \(mine) = 1
                """).run { $0.add(a); $0.add(b); $0.add(from == a); $0.add(from != a) }
        } else if try BulkStatement(cached: db, "SELECT \(theirs) FROM \(t.edges) WHERE a = ? AND b = ?").first({ $0.add(a); $0.add(b) }, { $0.int(0) }) == 1 {
            try BulkStatement(cached: db, "UPDATE \(t.edges) SET \(mine) = 0 WHERE a = ? AND b = ?").run { $0.add(a); $0.add(b) }
        } else {
            try BulkStatement(cached: db, "DELETE FROM \(t.edges) WHERE a = ? AND b = ?").run { $0.add(a); $0.add(b) }
        }
    }
}
