import GRDB
import IdreconDomain
import IdreconLog

/// Identities (SPEC section 4): every ASID's earliest login and `user_id` (`asids`), the
/// link keys each ASID logged in with (`asid_keys`), and how many ASIDs share each key and
/// whether it is ambiguous (`link_keys`). `user_id` is `u:` + the earliest-login member of
/// the ASID's connected component over unambiguous keys. The per-ASID parts are minimums
/// and counts, so facts fold in any order; components are recomputed for the ASIDs whose
/// links, keys' ambiguity or first login changed.
enum IdentitiesProjection: Projection {
    static let name = "identities"
    static let bulk = BulkBuild.scan
    static let tables = [
        (name: "asids", primaryKey: "asid"),
        (name: "asid_keys", primaryKey: "asid, key"),
        (name: "link_keys", primaryKey: "key"),
    ]

    static func createTables(generation g: Int) -> String {
        """
        CREATE TABLE asids_g\(g) (
            asid              TEXT PRIMARY KEY,
            first_login_at    INTEGER NOT NULL,
            first_login_event TEXT NOT NULL,
            user_id           TEXT NOT NULL CHECK (user_id LIKE 'u:%')
        ) STRICT, WITHOUT ROWID;

        CREATE TABLE asid_keys_g\(g) (
            asid        TEXT NOT NULL,
            key         TEXT NOT NULL CHECK (key LIKE 'email:%' OR key LIKE 'tfb:%'),
            first_at    INTEGER NOT NULL,
            first_event TEXT NOT NULL,
            PRIMARY KEY (asid, key)
        ) STRICT, WITHOUT ROWID;

        CREATE TABLE link_keys_g\(g) (
            key       TEXT PRIMARY KEY,
            asids     INTEGER NOT NULL CHECK (asids >= 1),
            ambiguous INTEGER NOT NULL CHECK (ambiguous IN (0, 1, 2))
        ) STRICT, WITHOUT ROWID;
        """
    }

    static func createIndexes(generation g: Int) -> String {
        """
        CREATE INDEX asids_g\(g)_user ON asids_g\(g)(user_id);
        \(createKeysIndex(generation: g))
        """
    }

    /// The ASIDs of each key, in key order: `judgeBulk` reads it, before the other indexes exist.
    static func createKeysIndex(generation g: Int) -> String {
        "CREATE INDEX IF NOT EXISTS asid_keys_g\(g)_key ON asid_keys_g\(g)(key, asid);"
    }

    // MARK: The fold

    /// What the projection keeps of one ASID's logins: the earliest, and the earliest login
    /// with each key. Minimums, so logins can be added in any order.
    struct Fold {
        var firstLogin: EventKey
        var keys: [(key: String, first: EventKey)] = []

        init(firstLogin: EventKey) { self.firstLogin = firstLogin }

        mutating func add(login key: EventKey, email: String?, tfb: String?) {
            if key < firstLogin { firstLogin = key }
            if let email { addKey(email, at: key) }
            if let tfb { addKey(tfb, at: key) }
        }

        mutating func addKey(_ key: String, at login: EventKey) {
            if let i = keys.firstIndex(where: { $0.key.sameBytes(as: key) }) {
                if login < keys[i].first { keys[i].first = login }
            } else {
                keys.append((key, login))
            }
        }
    }

    // MARK: Live

    static func apply(_ facts: [ProjectionFact], in context: ProjectionContext) throws {
        var folds: [String: Fold] = [:]
        for fact in facts where fact.type == .login {
            guard let asid = fact.asid else { continue }
            folds[asid, default: Fold(firstLogin: fact.key)].add(login: fact.key, email: fact.linkEmail, tfb: fact.linkTFB)
        }
        guard !folds.isEmpty else { return }
        let rows = try Rows(context.db, context.tables)
        var dirty: Set<String> = []
        var newLinks: [ByteText: [String]] = [:] // key → ASIDs that gained it
        for (asid, fold) in folds.sorted(by: { $0.key < $1.key }) {
            if let stored = try rows.firstLogin(asid) {
                if fold.firstLogin < stored {
                    try rows.moveFirstLogin(asid, to: fold.firstLogin)
                    dirty.insert(asid)
                }
            } else {
                try rows.insertASID(asid, firstLogin: fold.firstLogin)
                dirty.insert(asid)
            }
            for (key, first) in fold.keys.sorted(by: { ByteText($0.key) < ByteText($1.key) }) {
                if let stored = try rows.linkFirst(asid, key) {
                    if first < stored { try rows.moveLink(asid, key, to: first) }
                } else {
                    try rows.insertLink(asid, key, first: first)
                    newLinks[ByteText(key), default: []].append(asid)
                }
            }
        }
        // Each key's count and ambiguity once, in key order. Ambiguity only grows with the
        // count, so comparing before and after the transaction sees every change.
        for (key, asids) in newLinks.sorted(by: { $0.key < $1.key }) {
            let key = key.text
            let stored = try rows.linkKey(key)
            let count = (stored?.asids ?? 0) + asids.count
            let before = stored?.ambiguity
            let after = context.config.ambiguity(key: key, asids: count, blocked: context.blocked)
            try rows.saveLinkKey(key, asids: count, ambiguity: after)
            if before != after {
                try rows.asids(of: key) { dirty.insert($0) }
            } else if after == nil {
                dirty.formUnion(asids)
            }
        }
        try recomputeComponents(dirty, rows)
    }

    /// Recomputes `user_id` for the components containing `asids`.
    static func recomputeComponents(_ asids: Set<String>, _ rows: Rows) throws {
        var done: Set<String> = []
        for start in asids.sorted() where !done.contains(start) {
            let component = try IdentityRules.component(of: start, keysOf: rows.linkingKeys(of:), asidsOf: rows.asids(of:))
            done.formUnion(component)
            var members: [(asid: String, firstLogin: EventKey, userID: String)] = []
            for asid in component.sorted() {
                guard let m = try rows.member(asid) else { continue }
                members.append((asid, m.firstLogin, m.userID))
            }
            guard !members.isEmpty else { continue }
            let userID = IdentityRules.userID(members: members.map { ($0.asid, $0.firstLogin) })
            for m in members where !m.userID.sameBytes(as: userID) { try rows.setUser(m.asid, userID) }
        }
    }

    // MARK: Bulk

    /// A partition's ASIDs and their keys as a bulk build loads them, in key order, packed
    /// (`Rows.member`, `Rows.link`).
    struct BulkRows {
        var members = PackedRows()
        var links = PackedRows()
    }

    /// Adds the rows of an ASID that comes after those added (replay prepares them off the
    /// writer); `logins` are all its logins, in event time: the first is its earliest, and a
    /// key's first login its earliest with it (a `String` is made of each key once).
    static func addBulk(_ asid: String, _ logins: [BulkLogin], to rows: inout BulkRows) {
        var fold = Fold(firstLogin: logins[0].key)
        func add(_ key: UnsafeBufferPointer<UInt8>?, at login: BulkLogin) {
            guard let key, !fold.keys.contains(where: { known in
                var known = known.key
                return known.withUTF8 { String.sameBytes($0, key) }
            }) else { return }
            fold.addKey(String(decoding: key, as: UTF8.self), at: login.key)
        }
        for login in logins {
            add(login.email, at: login)
            add(login.tfb, at: login)
        }
        Rows.member(asid, fold.firstLogin, &rows.members)
        for key in fold.keys.sorted(by: { $0.key.bytesPrecede($1.key) }) {
            Rows.link(asid, key.key, key.first, &rows.links)
        }
    }

    /// Writes a partition's ASIDs and their keys (replay), each with the provisional identity
    /// `u:` + itself; `finishBulk` counts the keys and assigns the components' identities.
    static func writeBulk(_ rows: BulkRows, _ db: Database, _ t: ProjectionTables) throws {
        try Rows(db, t).insert(rows)
    }

    /// Link keys, their ASIDs and their ambiguity (`KeyAmbiguity`'s raw value, 0 when none),
    /// in one buffer.
    struct PackedKeys {
        fileprivate private(set) var bytes: [UInt8] = []
        /// Where each key's bytes end.
        fileprivate private(set) var ends: [Int] = []
        fileprivate private(set) var asids: [Int32] = []
        fileprivate private(set) var ambiguity: [UInt8] = []

        var count: Int { ends.count }

        mutating func append(_ key: String, asids count: Int, ambiguity judged: KeyAmbiguity?) {
            bytes += key.utf8
            ends.append(bytes.count)
            asids.append(Int32(clamping: count))
            ambiguity.append(UInt8(judged?.rawValue ?? 0))
        }
    }

    /// A bulk load's link keys counted and judged, and its ASIDs' identities (`judgeBulk`).
    struct BulkJudgement {
        /// The link keys in key order, packed (held while the writer builds indexes: as a
        /// `String` and a tuple each, a 10M replay's 0.8M keys took 80 MB).
        fileprivate var keys = PackedKeys()
        /// The ASIDs that take another's user ID, in key order.
        fileprivate var moves: [(asid: String, userID: String)] = []
    }

    /// After a bulk load, on a reader while the writer builds the secondary indexes: counts
    /// the link keys and assigns every ASID the identity of its connected component
    /// (union-find over the ASIDs sharing an unambiguous key). One pass over the keys in key
    /// order counts each key's ASIDs and joins them once the key is judged (a count, then a
    /// join of the keys with the link keys, read it twice: 2.1 s of a 10M finish).
    static func judgeBulk(_ db: Database, _ t: ProjectionTables, config: IdentityConfig) throws -> BulkJudgement {
        let blocked = Set(config.blockedKeys)
        var judgement = BulkJudgement()
        var index: [String: Int32] = [:]
        var names: [String] = []
        var components = IdentityRules.Components()
        var key: String?, members: [String] = []
        func judge() {
            guard let key else { return }
            let ambiguity = config.ambiguity(key: key, asids: members.count, blocked: blocked)
            judgement.keys.append(key, asids: members.count, ambiguity: ambiguity)
            if ambiguity == nil {
                var previous: Int32 = -1
                for asid in members {
                    let i: Int32
                    if let known = index[asid] {
                        i = known
                    } else {
                        i = components.add()
                        index[asid] = i
                        names.append(asid)
                    }
                    if previous >= 0 { components.join(previous, i) }
                    previous = i
                }
            }
            members.removeAll(keepingCapacity: true)
        }
        try BulkStatement(db, "SELECT key, asid FROM \(t.asidKeys) ORDER BY key, asid").each { row in
            let next = row.string(0)
            if !key.sameBytes(as: next) {
                judge()
                key = next
            }
            members.append(row.string(1))
        }
        judge()
        // Only the members of groups (two ASIDs or more) take another's user ID. Their first
        // logins are read in one pass in key order and the new user IDs written in key order:
        // a seek per member in group order, and an update each, were random reads and writes
        // all over a table that grows with the log (9 of the 19 s of `finish` at 10M events).
        let groups = components.groups().values
        var firsts = [EventKey?](repeating: nil, count: names.count)
        var grouped = [Bool](repeating: false, count: names.count)
        for group in groups { for i in group { grouped[Int(i)] = true } }
        try BulkStatement(db, "SELECT asid, first_login_at, first_login_event FROM \(t.asids)").each { row in
            if let i = index[row.string(0)], grouped[Int(i)] { firsts[Int(i)] = EventKey(at: row.int(1), eventID: row.string(2)) }
        }
        for group in groups {
            let members = group.compactMap { i in firsts[Int(i)].map { (asid: names[Int(i)], firstLogin: $0) } }
            guard !members.isEmpty else { continue }
            let userID = IdentityRules.userID(members: members)
            for member in members where !("u:" + member.asid).sameBytes(as: userID) {
                judgement.moves.append((member.asid, userID))
            }
        }
        judgement.moves.sort { $0.asid.bytesPrecede($1.asid) }
        return judgement
    }

    /// Writes what `judgeBulk` found: the link keys and the user IDs of the ASIDs that take
    /// another's.
    static func finishBulk(_ judgement: BulkJudgement, _ db: Database, _ t: ProjectionTables) throws {
        let rows = try Rows(db, t)
        try rows.insertLinkKeys(judgement.keys)
        for move in judgement.moves { try rows.setUser(move.asid, move.userID) }
    }

    // MARK: Rows

    /// Binding and decoding of `asids`, `asid_keys` and `link_keys` rows.
    struct Rows {
        private let loadMember, moveFirst, loadLink, moveLink_, loadKey, saveKey, asidsOfKey,
            keysOfASID, allKeysOfASID, loadIdentity, setUser_: BulkStatement
        private let insertMember, insertLink_, insertKey: BulkInsert

        init(_ db: Database, _ t: ProjectionTables) throws {
            loadMember = try BulkStatement(cached: db, "SELECT first_login_at, first_login_event FROM \(t.asids) WHERE asid = ?")
            insertMember = try BulkInsert(cached: db, into: t.asids, "asid, first_login_at, first_login_event, user_id")
            moveFirst = try BulkStatement(cached: db, "UPDATE \(t.asids) SET first_login_at = ?, first_login_event = ? WHERE asid = ?")
            loadLink = try BulkStatement(cached: db, "SELECT first_at, first_event FROM \(t.asidKeys) WHERE asid = ? AND key = ?")
            insertLink_ = try BulkInsert(cached: db, into: t.asidKeys, "asid, key, first_at, first_event")
            insertKey = try BulkInsert(cached: db, into: t.linkKeys, "key, asids, ambiguous")
            moveLink_ = try BulkStatement(cached: db, "UPDATE \(t.asidKeys) SET first_at = ?, first_event = ? WHERE asid = ? AND key = ?")
            loadKey = try BulkStatement(cached: db, "SELECT asids, ambiguous FROM \(t.linkKeys) WHERE key = ?")
            saveKey = try BulkStatement(cached: db, "INSERT OR REPLACE INTO \(t.linkKeys) (key, asids, ambiguous) VALUES (?, ?, ?)")
            asidsOfKey = try BulkStatement(cached: db, "SELECT asid FROM \(t.asidKeys) WHERE key = ?")
            keysOfASID = try BulkStatement(cached: db, """
                SELECT k.key FROM \(t.asidKeys) k JOIN \(t.linkKeys) l ON l.key = k.key WHERE k.asid = ? AND l.ambiguous = 0
                """)
            loadIdentity = try BulkStatement(cached: db, "SELECT first_login_at, first_login_event, user_id FROM \(t.asids) WHERE asid = ?")
            allKeysOfASID = try BulkStatement(cached: db, "SELECT key FROM \(t.asidKeys) WHERE asid = ?")
            setUser_ = try BulkStatement(cached: db, "UPDATE \(t.asids) SET user_id = ? WHERE asid = ?")
        }

        private static func eventKey(_ row: BulkStatement.Reader) -> EventKey { EventKey(at: row.int(0), eventID: row.string(1)) }

        func firstLogin(_ asid: String) throws -> EventKey? { try loadMember.first({ $0.add(asid) }, Self.eventKey) }

        func member(_ asid: String) throws -> (firstLogin: EventKey, userID: String)? {
            try loadIdentity.first({ $0.add(asid) }) { (Self.eventKey($0), $0.string(2)) }
        }

        /// An ASID's row, its own identity until linked: `insertMember`'s columns.
        static func member<S: RowSink>(_ asid: String, _ firstLogin: EventKey, _ sink: inout S) {
            sink.add(asid); sink.add(firstLogin.at); sink.add(firstLogin.eventID); sink.add("u:", asid)
        }

        /// Inserts a new ASID.
        func insertASID(_ asid: String, firstLogin: EventKey) throws {
            try insertMember.insert { Self.member(asid, firstLogin, &$0) }
        }

        /// Inserts a bulk build's ASIDs and keys (`BulkRows`).
        func insert(_ rows: BulkRows) throws {
            try insertMember.insert(rows.members)
            try insertLink_.insert(rows.links)
        }

        func moveFirstLogin(_ asid: String, to first: EventKey) throws {
            try moveFirst.run { $0.add(first.at); $0.add(first.eventID); $0.add(asid) }
        }

        func setUser(_ asid: String, _ userID: String) throws { try setUser_.run { $0.add(userID); $0.add(asid) } }

        func linkFirst(_ asid: String, _ key: String) throws -> EventKey? {
            try loadLink.first({ $0.add(asid); $0.add(key) }, Self.eventKey)
        }

        /// An ASID's link key and its first login with it: `insertLink_`'s columns.
        static func link<S: RowSink>(_ asid: String, _ key: String, _ first: EventKey, _ sink: inout S) {
            sink.add(asid); sink.add(key); sink.add(first.at); sink.add(first.eventID)
        }

        func insertLink(_ asid: String, _ key: String, first: EventKey) throws {
            try insertLink_.insert { Self.link(asid, key, first, &$0) }
        }

        /// Inserts a bulk build's link keys, in key order, into an empty table.
        func insertLinkKeys(_ keys: PackedKeys) throws {
            try keys.bytes.withUnsafeBytes { bytes in
                try insertKey.insert(count: keys.count) { i, binder in
                    let start = i == 0 ? 0 : Int(keys.ends[i - 1])
                    binder.add(copying: UnsafeRawBufferPointer(rebasing: bytes[start..<Int(keys.ends[i])]))
                    binder.add(Int(keys.asids[i])); binder.add(Int(keys.ambiguity[i]))
                }
            }
        }

        func moveLink(_ asid: String, _ key: String, to first: EventKey) throws {
            try moveLink_.run { $0.add(first.at); $0.add(first.eventID); $0.add(asid); $0.add(key) }
        }

        func linkKey(_ key: String) throws -> (asids: Int, ambiguity: KeyAmbiguity?)? {
            try loadKey.first({ $0.add(key) }) { (Int($0.int(0)), KeyAmbiguity(rawValue: Int($0.int(1)))) }
        }

        func saveLinkKey(_ key: String, asids: Int, ambiguity: KeyAmbiguity?) throws {
            try saveKey.run { $0.add(key); $0.add(asids); $0.add(ambiguity?.rawValue ?? 0) }
        }

        func asids(of key: String, _ each: (String) -> Void) throws {
            try asidsOfKey.each({ $0.add(key) }) { each($0.string(0)) }
        }

        func asids(of key: String) throws -> [String] {
            var result: [String] = []
            try asids(of: key) { result.append($0) }
            return result
        }

        /// Every key `asid` logged in with, ambiguous or not.
        func keys(of asid: String) throws -> [String] {
            var result: [String] = []
            try allKeysOfASID.each({ $0.add(asid) }) { result.append($0.string(0)) }
            return result
        }

        /// The keys of `asid` that link (are not ambiguous).
        func linkingKeys(of asid: String) throws -> [String] {
            var result: [String] = []
            try keysOfASID.each({ $0.add(asid) }) { result.append($0.string(0)) }
            return result
        }
    }
}
