import GRDB
import IdreconDomain
import IdreconLog

/// One change of the feed (`schemas/changes.schema.json`): what the event at `seq` changed
/// in an ASID's access state now (at the latest event time) or in the identities.
package struct FeedChange: Sendable, Equatable {
    package enum Kind: Sendable, Equatable {
        case access(asid: String, state: AccessState, previous: AccessState)
        /// Identities that became one: `userID` is the merged identity's.
        case merged(userID: String, from: [String])
        /// An identity whose members now belong to several (a key became ambiguous).
        case split(userID: String, into: [String])
        /// The same members under another `user_id` (an earlier first login, logged late).
        case renamed(userID: String, previous: String)
    }

    package var seq: Int64
    package var event: EventKey
    package var kind: Kind

    /// The record's Kafka key: the ASID of an access change, the user_id of an identity change.
    package var key: String {
        switch kind {
        case let .access(asid, _, _): asid
        case let .merged(userID, _), let .split(userID, _), let .renamed(userID, _): userID
        }
    }

    /// The record's value: one JSON object, its members in a fixed order.
    package func json(change: Int64, feed: String) -> String {
        var members: [(key: String, value: JSONValue)] = [
            ("feed", .string(feed)), ("change", .number(String(change))), ("seq", .number(String(seq))),
            ("event_id", .string(event.eventID)), ("occurred_at", .string(Timestamp.format(event.at))),
        ]
        switch kind {
        case let .access(asid, state, previous):
            members += [("kind", .string("access")), ("asid", .string(asid)), ("state", .string(state.rawValue)),
                        ("previous_state", .string(previous.rawValue))]
        case let .merged(userID, from):
            members += [("kind", .string("identity_merged")), ("user_id", .string(userID)),
                        ("merged_user_ids", .array(from.map { .string($0) }))]
        case let .split(userID, into):
            members += [("kind", .string("identity_split")), ("user_id", .string(userID)),
                        ("split_into", .array(into.map { .string($0) }))]
        case let .renamed(userID, previous):
            members += [("kind", .string("identity_renamed")), ("user_id", .string(userID)),
                        ("previous_user_id", .string(previous))]
        }
        return String(decoding: JSONValue.object(members).serialized(), as: UTF8.self)
    }
}

/// What the detector reads of the projections as they were before the events it is given.
protocol ChangeSource {
    func device(_ app: String, _ device: String) throws -> ChangeDetector.DeviceNow?
    func lastLogin(_ asid: String) throws -> (key: EventKey, limited: Bool)?
    func limitedDevices(_ asid: String) throws -> Int
    func mentioned(_ asid: String) throws -> Bool
    func firstLogin(_ asid: String) throws -> EventKey?
    func keys(_ asid: String) throws -> [String]
    func holders(_ key: String) throws -> [String]
    func holderCount(_ key: String) throws -> Int
}

/// No projections yet: the detector then holds all the state itself (a whole log folded
/// from its start, for tests and checks; memory grows with the entities).
struct EmptyChangeSource: ChangeSource {
    func device(_ app: String, _ device: String) -> ChangeDetector.DeviceNow? { nil }
    func lastLogin(_ asid: String) -> (key: EventKey, limited: Bool)? { nil }
    func limitedDevices(_ asid: String) -> Int { 0 }
    func mentioned(_ asid: String) -> Bool { false }
    func firstLogin(_ asid: String) -> EventKey? { nil }
    func keys(_ asid: String) -> [String] { [] }
    func holders(_ key: String) -> [String] { [] }
    func holderCount(_ key: String) -> Int { 0 }
}

/// Decides the change feed: folds events one at a time, in log order, over what the
/// projections held before them, and reports every change of an ASID's access state now
/// and every identity merge, split or rename, each with the event that caused it. Event by
/// event, so the feed is a function of the log alone, not of how the log was cut into
/// catch-up chunks. Only the entities the events touch are loaded (once per chunk).
struct ChangeDetector {
    /// A device's latest event as far as access goes.
    struct DeviceNow {
        var last: EventKey
        var asid: String?
        var limited: Bool
    }

    private let source: any ChangeSource
    private let config: IdentityConfig
    private let blocked: Set<String>

    private var devices: [ByteTextPair: DeviceNow?] = [:]
    private var lastLogins: [String: (key: EventKey, limited: Bool)?] = [:]
    private var limitedCounts: [String: Int] = [:]
    private var mentions: [String: Bool] = [:]
    private var firstLogins: [String: EventKey?] = [:]
    private var keysOf: [String: [String]] = [:]
    private var storedHolders: [ByteText: [String]] = [:]
    /// ASIDs that gained a key in the events folded so far (not in `source`).
    private var addedHolders: [ByteText: [String]] = [:]
    private var counts: [ByteText: Int] = [:]

    init(source: any ChangeSource, config: IdentityConfig) {
        self.source = source
        self.config = config
        blocked = Set(config.blockedKeys)
    }

    /// The changes `facts` (in log order) make, in log order.
    mutating func changes(_ facts: [ProjectionFact]) throws -> [FeedChange] {
        try prefetch(facts)
        var changes: [FeedChange] = []
        for fact in facts { try add(fact, to: &changes) }
        return changes
    }

    /// Loads what the facts will ask for in the tables' key order, as the projections read
    /// their rows: each page of a table is then read once per chunk, not once per entity.
    private mutating func prefetch(_ facts: [ProjectionFact]) throws {
        var devices: Set<ByteTextPair> = [], asids: Set<String> = [], friends: Set<String> = []
        for fact in facts {
            devices.insert(ByteTextPair(fact.appID, fact.deviceID))
            guard fact.type == .login, let asid = fact.asid else { continue }
            asids.insert(asid)
            if let list = fact.friends { friends.formUnion(StoredFriendList.split(list)) }
        }
        for key in devices.sorted() { _ = try device(key) }
        let logins = asids.sorted()
        for asid in logins { _ = try lastLogin(asid) }
        for asid in logins { _ = try limitedDevices(asid) }
        for asid in logins { _ = try firstLogin(asid) }
        for asid in logins { _ = try keys(asid) }
        for friend in friends.subtracting(asids).sorted() { _ = try mentioned(friend) }
    }

    mutating func add(_ fact: ProjectionFact, to changes: inout [FeedChange]) throws {
        if fact.type == .login && (fact.asid == nil || fact.tracking == nil) { return }
        try addAccess(fact, to: &changes)
        if fact.type == .login, let asid = fact.asid { try addIdentity(fact, asid: asid, to: &changes) }
    }

    // MARK: Access

    private mutating func addAccess(_ fact: ProjectionFact, to changes: inout [FeedChange]) throws {
        let deviceKey = ByteTextPair(fact.appID, fact.deviceID)
        let old = try device(deviceKey)
        let newer = old.map { $0.last < fact.key } ?? true
        var asked: [String] = []
        if newer, let holder = old?.asid { asked.append(holder) }
        var friends: [String] = []
        if fact.type == .login, let asid = fact.asid {
            asked.append(asid)
            for friend in fact.friends.map(StoredFriendList.split) ?? [] where !(try mentioned(friend)) {
                friends.append(friend)
            }
            asked += friends
        }
        asked = Array(Set(asked)).sorted()
        var before: [AccessState] = []
        for asid in asked { before.append(try state(asid)) }

        if newer {
            if let old, old.limited, let holder = old.asid { limitedCounts[holder] = try limitedDevices(holder) - 1 }
            let now = fact.type == .login
                ? DeviceNow(last: fact.key, asid: fact.asid, limited: fact.tracking == .limited)
                : DeviceNow(last: fact.key, asid: nil, limited: false)
            if now.limited, let asid = now.asid { limitedCounts[asid] = try limitedDevices(asid) + 1 }
            devices[deviceKey] = now
        }
        if fact.type == .login, let asid = fact.asid {
            if try lastLogin(asid).map({ $0.key < fact.key }) ?? true {
                lastLogins[asid] = (fact.key, fact.tracking == .limited)
            }
            for friend in friends { mentions[friend] = true }
        }

        for (asid, previous) in zip(asked, before) {
            let now = try state(asid)
            if now != previous { changes.append(FeedChange(seq: fact.seq, event: fact.key, kind: .access(asid: asid, state: now, previous: previous))) }
        }
    }

    private mutating func state(_ asid: String) throws -> AccessState {
        try AccessState.decide(latestLoginLimited: { try lastLogin(asid)?.limited }, heldLimited: { try limitedDevices(asid) > 0 },
                               mentioned: { try mentioned(asid) })
    }

    private mutating func device(_ key: ByteTextPair) throws -> DeviceNow? {
        if let known = devices[key] { return known }
        let loaded = try source.device(key.first.text, key.second.text)
        devices[key] = .some(loaded)
        return loaded
    }

    private mutating func lastLogin(_ asid: String) throws -> (key: EventKey, limited: Bool)? {
        if let known = lastLogins[asid] { return known }
        let loaded = try source.lastLogin(asid)
        lastLogins[asid] = .some(loaded)
        return loaded
    }

    private mutating func limitedDevices(_ asid: String) throws -> Int {
        if let known = limitedCounts[asid] { return known }
        let loaded = try source.limitedDevices(asid)
        limitedCounts[asid] = loaded
        return loaded
    }

    private mutating func mentioned(_ asid: String) throws -> Bool {
        if let known = mentions[asid] { return known }
        let loaded = try source.mentioned(asid)
        mentions[asid] = loaded
        return loaded
    }

    // MARK: Identities

    private mutating func addIdentity(_ fact: ProjectionFact, asid: String, to changes: inout [FeedChange]) throws {
        let first = try firstLogin(asid)
        let known = try keys(asid)
        let newKeys = [fact.linkEmail, fact.linkTFB].compactMap { $0 }
            .filter { key in !known.contains { $0.sameBytes(as: key) } }
        let earlier = first.map { fact.key < $0 } ?? false
        // Identities change only through an earlier first login of a known ASID (a rename)
        // or a key another ASID holds (a merge, or a split when it becomes ambiguous).
        var shared = false
        for key in newKeys where try holderCount(key) > 0 { shared = true }
        guard earlier || shared else {
            firstLogins[asid] = .some(min(first ?? fact.key, fact.key))
            keysOf[asid] = known + newKeys
            for key in newKeys {
                counts[ByteText(key)] = 1
                addedHolders[ByteText(key), default: []].append(asid)
            }
            return
        }

        // The ASIDs whose identity this login can change: its own component, and those of
        // every holder of a key it adds that links now or will.
        var roots: [String] = first == nil ? [] : [asid]
        for key in newKeys {
            let count = try holderCount(key)
            if linking(key, holders: count) || linking(key, holders: count + 1) { roots += try holders(key) }
        }
        let before = try components(of: roots)

        firstLogins[asid] = .some(min(first ?? fact.key, fact.key))
        keysOf[asid] = known + newKeys
        for key in newKeys {
            let text = ByteText(key)
            counts[text] = try holderCount(key) + 1
            addedHolders[text, default: []].append(asid)
        }
        let after = try components(of: roots + [asid])

        // Old members' identities before and after (a new ASID had none).
        var afterOf: [String: String] = [:]
        for component in after { for member in component.members { afterOf[member] = component.userID } }
        var report: [FeedChange.Kind] = []
        var mergedInto: [String: Set<String>] = [:] // after → before identities of its old members
        for component in before {
            let into = Set(component.members.compactMap { afterOf[$0] })
            if into.count > 1 { report.append(.split(userID: component.userID, into: into.sorted())) }
            for userID in into { mergedInto[userID, default: []].insert(component.userID) }
        }
        for (userID, from) in mergedInto.sorted(by: { $0.key < $1.key }) {
            if from.count > 1 {
                report.append(.merged(userID: userID, from: from.sorted()))
            } else if let previous = from.first, previous != userID,
                      let old = before.first(where: { $0.userID == previous }),
                      Set(old.members.compactMap { afterOf[$0] }).count == 1 {
                report.append(.renamed(userID: userID, previous: previous))
            }
        }
        for kind in report { changes.append(FeedChange(seq: fact.seq, event: fact.key, kind: kind)) }
    }

    /// The distinct components containing `asids`, with their identities.
    private mutating func components(of asids: [String]) throws -> [(userID: String, members: Set<String>)] {
        var seen: Set<String> = []
        var found: [(userID: String, members: Set<String>)] = []
        for start in Set(asids).sorted() where !seen.contains(start) {
            guard try firstLogin(start) != nil else { continue }
            let members = try IdentityRules.component(of: start, keysOf: { try self.linkingKeys($0) },
                                                      asidsOf: { try self.holders($0) })
            seen.formUnion(members)
            var firsts: [(asid: String, firstLogin: EventKey)] = []
            for member in members { if let first = try firstLogin(member) { firsts.append((member, first)) } }
            found.append((IdentityRules.userID(members: firsts), members))
        }
        return found
    }

    private func linking(_ key: String, holders: Int) -> Bool {
        config.ambiguity(key: key, asids: holders, blocked: blocked) == nil
    }

    private mutating func linkingKeys(_ asid: String) throws -> [String] {
        var linked: [String] = []
        for key in try keys(asid) {
            // The count first: a mutating call inside a call on `self` would copy `self`.
            let count = try holderCount(key)
            if linking(key, holders: count) { linked.append(key) }
        }
        return linked
    }

    private mutating func firstLogin(_ asid: String) throws -> EventKey? {
        if let known = firstLogins[asid] { return known }
        let loaded = try source.firstLogin(asid)
        firstLogins[asid] = .some(loaded)
        return loaded
    }

    private mutating func keys(_ asid: String) throws -> [String] {
        if let known = keysOf[asid] { return known }
        let loaded = try source.keys(asid)
        keysOf[asid] = loaded
        return loaded
    }

    private mutating func holders(_ key: String) throws -> [String] {
        let text = ByteText(key)
        let stored: [String]
        if let known = storedHolders[text] {
            stored = known
        } else {
            stored = try source.holders(key)
            storedHolders[text] = stored
        }
        return stored + (addedHolders[text] ?? [])
    }

    private mutating func holderCount(_ key: String) throws -> Int {
        let text = ByteText(key)
        if let known = counts[text] { return known }
        let loaded = try source.holderCount(key)
        counts[text] = loaded
        return loaded
    }
}
