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

/// Identity components: ASIDs connected through linking keys (keys that are not
/// ambiguous). The one place they are computed: `component(of:)` searches from one ASID
/// over keys read on demand (the live fold, the change feed, `audit calls`, `explain`);
/// `Components` joins ASIDs key by key (replay's bulk build, a merge history).
public enum IdentityRules {
    /// The connected component of `start` over linking keys, searched breadth-first: keys in
    /// the order `keysOf` gives them, the ASIDs holding each in the order `asidsOf` does, so
    /// each ASID is first reached over a shortest path. `reached(asid, from, key)` is told of
    /// each ASID as it is first reached (`from` holds `key` too) and returns false to stop.
    public static func component(
        of start: String, keysOf: (String) throws -> [String], asidsOf: (String) throws -> [String],
        reached: (_ asid: String, _ from: String, _ key: String) throws -> Bool = { _, _, _ in true }
    ) rethrows -> Set<String> {
        var seen: Set<String> = [start]
        var seenKeys: Set<String> = []
        var queue = [start], next = 0
        while next < queue.count {
            let asid = queue[next]
            next += 1
            for key in try keysOf(asid) where seenKeys.insert(key).inserted {
                for other in try asidsOf(key) where seen.insert(other).inserted {
                    queue.append(other)
                    guard try reached(other, asid, key) else { return seen }
                }
            }
        }
        return seen
    }

    /// Components built by joining ASIDs (union-find with path halving over dense numbers).
    public struct Components {
        private var parent: [Int32] = []

        public init() {}

        /// A new ASID of its own component; its number.
        public mutating func add() -> Int32 {
            let id = Int32(parent.count)
            parent.append(id)
            return id
        }

        /// The representative of `id`'s component: its smallest number.
        public mutating func root(_ id: Int32) -> Int32 {
            var i = id
            while parent[Int(i)] != i {
                parent[Int(i)] = parent[Int(parent[Int(i)])]
                i = parent[Int(i)]
            }
            return i
        }

        /// Joins the components of `a` and `b`; false when they were one already.
        @discardableResult
        public mutating func join(_ a: Int32, _ b: Int32) -> Bool {
            let (x, y) = (root(a), root(b))
            guard x != y else { return false }
            parent[Int(max(x, y))] = min(x, y)
            return true
        }

        /// Every component of more than one ASID, as members' numbers, by representative.
        public mutating func groups() -> [Int32: [Int32]] {
            var groups: [Int32: [Int32]] = [:]
            for i in parent.indices { groups[root(Int32(i)), default: []].append(Int32(i)) }
            return groups.filter { $0.value.count > 1 }
        }
    }

    /// `u:` + the member whose earliest login is smallest.
    public static func userID(members: [(asid: String, firstLogin: EventKey)]) -> String {
        "u:" + members.min { $0.firstLogin != $1.firstLogin ? $0.firstLogin < $1.firstLogin : $0.asid < $1.asid }!.asid
    }
}
