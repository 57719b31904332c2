import GRDB
import IdreconLog
import IdreconDomain
import Crypto

/// The projection tables of one generation. Writers use the generation's tables; readers
/// use views of the same names without suffix, which `publish` points at the current
/// generation, so `replay` can build a new generation while readers keep working.
package struct ProjectionTables: Sendable {
    /// 0 names the reader views.
    package let generation: Int

    package init(generation: Int) { self.generation = generation }

    package static let views = ProjectionTables(generation: 0)
    private var suffix: String { generation == 0 ? "" : "_g\(generation)" }

    package static let names = ProjectionEngine.tableNames
    /// The tables a bulk load completes (`IdentitiesProjection.finishBulk` adds `link_keys`
    /// and the `asids`' identities).
    package static let loadedNames = names.filter { $0 != "asids" && $0 != "link_keys" }

    package var devices: String { "devices" + suffix }
    package var spans: String { "limited_spans" + suffix }
    package var asids: String { "asids" + suffix }
    package var asidKeys: String { "asid_keys" + suffix }
    package var linkKeys: String { "link_keys" + suffix }
    package var snapshots: String { "friend_snapshots" + suffix }
    package var edges: String { "friend_edges" + suffix }
    package var mentions: String { "friend_mentions" + suffix }
    package var lastLogins: String { "asid_last_logins" + suffix }
    package var asidSpans: String { "asid_limited_spans" + suffix }

    /// Creates the tables only; a bulk load adds the secondary indexes afterwards.
    package func createTables(_ db: Database) throws {
        precondition(generation > 0)
        for projection in ProjectionEngine.projections { try db.execute(sql: projection.createTables(generation: generation)) }
    }

    package func createIndexes(_ db: Database) throws {
        precondition(generation > 0)
        for projection in ProjectionEngine.projections { try db.execute(sql: projection.createIndexes(generation: generation)) }
    }

    /// Primary-key columns of each table, in order: the order digests read rows in.
    package static let primaryKeys = ProjectionEngine.primaryKeys

    /// Points the reader views at this generation.
    package func publish(_ db: Database) throws {
        for name in Self.names {
            try db.execute(sql: "DROP VIEW IF EXISTS \(name)")
            try db.execute(sql: "CREATE VIEW \(name) AS SELECT * FROM \(name)_g\(generation)")
        }
    }

    /// Drops this generation's tables. Their pages are zeroed only when `erasing` (they
    /// hold data a forget erased): Debian's SQLite zeroes every freed page by default
    /// (`secure_delete`), which wrote a whole generation again just to drop it.
    package func drop(_ db: Database, erasing: Bool = false) throws {
        let previous = try Int.fetchOne(db, sql: "PRAGMA secure_delete") ?? 0
        try db.execute(sql: "PRAGMA secure_delete = \(erasing ? "ON" : "FAST")")
        defer { try? db.execute(sql: "PRAGMA secure_delete = \(previous)") }
        for name in Self.names { try db.execute(sql: "DROP TABLE IF EXISTS \(name)_g\(generation)") }
    }
}

extension ProjectionTables {
    /// SHA-256 of each projection table's (of `names`) full contents, in key order.
    package static func digests(_ db: Database, tables: ProjectionTables, names: [String] = ProjectionTables.names) throws -> [String: String] {
        var result: [String: String] = [:]
        for name in names {
            let table = tables.generation == 0 ? name : "\(name)_g\(tables.generation)"
            let order = ProjectionTables.primaryKeys[name]!
            var hasher = SHA256()
            var line: [UInt8] = []
            try BulkStatement(db, "SELECT * FROM \(table) ORDER BY \(order)").each { r in
                line.removeAll(keepingCapacity: true)
                for column in 0..<r.columnCount {
                    r.appendCanonical(column, to: &line)
                    line.append(0x09)
                }
                line.append(0x0A)
                hasher.update(data: line)
            }
            result[name] = LinkKey.hex(hasher.finalize())
        }
        return result
    }
}

/// How a friend list is stored (in `events.friends` and `friend_snapshots.friends`): the
/// ASIDs joined by ','; the empty string is the empty list.
package enum StoredFriendList {
    /// The ASIDs of a stored list (split on the bytes: lists are long and many).
    package static func split(_ stored: String) -> [String] {
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
