import GRDB

/// The projection tables of one generation. Writers use the generation's tables; readers
/// use views of the same names without suffix, which `publish` points at the current
/// generation, so `replay` can build a new generation while readers keep working.
struct ProjectionTables: Sendable {
    /// 0 names the reader views.
    let generation: Int

    static let views = ProjectionTables(generation: 0)
    private var suffix: String { generation == 0 ? "" : "_g\(generation)" }

    static let names = ProjectionEngine.tableNames
    /// The tables a bulk load completes (`IdentitiesProjection.finishBulk` adds `link_keys`
    /// and the `asids`' identities).
    static let loadedNames = names.filter { $0 != "asids" && $0 != "link_keys" }

    var devices: String { "devices" + suffix }
    var spans: String { "limited_spans" + suffix }
    var asids: String { "asids" + suffix }
    var asidKeys: String { "asid_keys" + suffix }
    var linkKeys: String { "link_keys" + suffix }
    var snapshots: String { "friend_snapshots" + suffix }
    var edges: String { "friend_edges" + suffix }
    var mentions: String { "friend_mentions" + suffix }

    /// Creates the tables with their secondary indexes.
    func create(_ db: Database) throws {
        try createTables(db)
        try createIndexes(db)
    }

    /// Creates the tables only; a bulk load adds the secondary indexes afterwards.
    func createTables(_ db: Database) throws {
        precondition(generation > 0)
        for projection in ProjectionEngine.projections { try db.execute(sql: projection.createTables(generation: generation)) }
    }

    func createIndexes(_ db: Database) throws {
        precondition(generation > 0)
        for projection in ProjectionEngine.projections { try db.execute(sql: projection.createIndexes(generation: generation)) }
    }

    /// Primary-key columns of each table, in order: the order digests read rows in.
    static let primaryKeys = ProjectionEngine.primaryKeys

    /// Points the reader views at this generation.
    func publish(_ db: Database) throws {
        for name in Self.names {
            try db.execute(sql: "DROP VIEW IF EXISTS \(name)")
            try db.execute(sql: "CREATE VIEW \(name) AS SELECT * FROM \(name)_g\(generation)")
        }
    }

    /// Drops this generation's tables. Their pages are zeroed only when `erasing` (they
    /// hold data a forget erased): Debian's SQLite zeroes every freed page by default
    /// (`secure_delete`), which wrote a whole generation again just to drop it.
    func drop(_ db: Database, erasing: Bool = false) throws {
        let previous = try Int.fetchOne(db, sql: "PRAGMA secure_delete") ?? 0
        try db.execute(sql: "PRAGMA secure_delete = \(erasing ? "ON" : "FAST")")
        defer { try? db.execute(sql: "PRAGMA secure_delete = \(previous)") }
        for name in Self.names { try db.execute(sql: "DROP TABLE IF EXISTS \(name)_g\(generation)") }
    }
}

/// How a friend list is stored (in `events.friends` and `friend_snapshots.friends`): the
/// ASIDs joined by ','; the empty string is the empty list.
enum StoredFriendList {
    /// The ASIDs of a stored list (split on the bytes: lists are long and many).
    static func split(_ stored: String) -> [String] {
        var stored = stored
        return stored.withUTF8 { bytes in
            var list: [String] = []
            var start = 0
            for i in 0...bytes.count where i == bytes.count || bytes[i] == UInt8(ascii: ",") {
                if i > start { list.append(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)) }
                start = i + 1
            }
            return list
        }
    }
}
