/// Identity reconciliation rules (SPEC section 4): ASIDs linked by shared keys, with
/// over-merge guards.
public struct IdentityConfig: Sendable, Equatable, Codable {
    /// A key shared by more than this many ASIDs links nothing (reported as ambiguous).
    public var maxASIDsPerKey: Int
    /// Keys that never link: e-mail addresses (normalized and hashed on load), `email:<sha256>`
    /// or `tfb:<token>`.
    public var blocklist: [String]

    public init(maxASIDsPerKey: Int = 25, blocklist: [String] = []) {
        self.maxASIDsPerKey = maxASIDsPerKey
        self.blocklist = blocklist
    }

    enum CodingKeys: String, CodingKey {
        case maxASIDsPerKey = "max_asids_per_key"
        case blocklist
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        maxASIDsPerKey = try c.decodeIfPresent(Int.self, forKey: .maxASIDsPerKey) ?? 25
        blocklist = try c.decodeIfPresent([String].self, forKey: .blocklist) ?? []
    }

    /// Blocklist entries as stored link keys, sorted.
    public var blockedKeys: [String] {
        blocklist.map { entry in
            if entry.hasPrefix("email:") || entry.hasPrefix("tfb:") { return entry }
            return LinkKey.email(entry)
        }.sorted()
    }

    /// Why a key links nothing, or nil when it links.
    public func ambiguity(key: String, asids: Int, blocked: Set<String>) -> KeyAmbiguity? {
        if blocked.contains(key) { return .blocklisted }
        if asids > maxASIDsPerKey { return .tooManyASIDs }
        return nil
    }
}

/// Why a link key is not used for merging.
public enum KeyAmbiguity: Int, Sendable, Codable {
    case tooManyASIDs = 1
    case blocklisted = 2

    public var label: String { self == .blocklisted ? "blocklisted" : "shared by too many ASIDs" }
}

public enum IdentityRules {
    /// The connected component of `start` over linking keys.
    public static func component(
        of start: String, keysOf: (String) throws -> [String], asidsOf: (String) throws -> [String]
    ) rethrows -> Set<String> {
        var seen: Set<String> = [start]
        var seenKeys: Set<String> = []
        var queue = [start]
        while let asid = queue.popLast() {
            for key in try keysOf(asid) where seenKeys.insert(key).inserted {
                for other in try asidsOf(key) where seen.insert(other).inserted { queue.append(other) }
            }
        }
        return seen
    }

    /// `u:` + the member whose earliest login is smallest.
    public static func userID(members: [(asid: String, firstLogin: EventKey)]) -> String {
        "u:" + members.min { $0.firstLogin != $1.firstLogin ? $0.firstLogin < $1.firstLogin : $0.asid < $1.asid }!.asid
    }
}
