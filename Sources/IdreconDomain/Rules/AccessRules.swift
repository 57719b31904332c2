/// Graph-API access of one ASID at a time t (SPEC section 4).
public enum AccessState: String, Sendable, Codable, CaseIterable {
    case forbiddenLimited = "forbidden_limited"
    case forbiddenUnknown = "forbidden_unknown"
    case allowed
    /// Not seen by t, neither logging in nor in a friend list.
    case unseen

    /// Decides the state from the facts that hold at t.
    /// - Parameters:
    ///   - heldLimited: some device's state at t has the ASID in limited mode.
    ///   - latestLoginLimited: the ASID's latest login at t was limited (nil: no login by t).
    ///   - mentioned: the ASID appeared in a friend list by t.
    public static func decide(heldLimited: Bool, latestLoginLimited: Bool?, mentioned: Bool) -> AccessState {
        decide(latestLoginLimited: { latestLoginLimited }, heldLimited: { heldLimited }, mentioned: { mentioned })
    }

    /// The same, asking each fact only when the ones before it do not decide (a caller
    /// whose facts cost a lookup each).
    public static func decide(
        latestLoginLimited: () throws -> Bool?, heldLimited: () throws -> Bool, mentioned: () throws -> Bool
    ) rethrows -> AccessState {
        let latest = try latestLoginLimited()
        if try latest == true || heldLimited() { return .forbiddenLimited }
        if latest != nil { return .allowed }
        return try mentioned() ? .forbiddenUnknown : .unseen
    }
}

/// Friend snapshot of an ASID: the `friend_asids` of its latest login carrying them,
/// or empty when a later login declined `user_friends`.
public struct FriendSnapshot: Sendable, Equatable {
    public var listedAt: EventKey?
    public var friends: [String]
    public var declinedAt: EventKey?

    public init(listedAt: EventKey? = nil, friends: [String] = [], declinedAt: EventKey? = nil) {
        self.listedAt = listedAt
        self.friends = friends
        self.declinedAt = declinedAt
    }

    /// The ASIDs this snapshot names now.
    public var effective: Set<String> {
        guard let listedAt else { return [] }
        if let declinedAt, listedAt < declinedAt { return [] }
        return Set(friends)
    }

    /// Folds in one login (any order). Returns whether anything changed.
    @discardableResult
    public mutating func apply(key: EventKey, friends list: [String]?, declinesFriends: Bool) -> Bool {
        var changed = false
        if let list, listedAt.map({ $0 < key }) ?? true {
            listedAt = key
            friends = list
            changed = true
        }
        if declinesFriends, declinedAt.map({ $0 < key }) ?? true {
            declinedAt = key
            changed = true
        }
        return changed
    }
}
