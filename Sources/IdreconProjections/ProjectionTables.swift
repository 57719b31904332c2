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
    /// The projections whose tables these are.
    package let registry: ProjectionRegistry

    package init(generation: Int, registry: ProjectionRegistry) {
        (self.generation, self.registry) = (generation, registry)
    }

    /// The reader views of the built-in projections, which queries and exports read.
    package static let views = ProjectionTables(generation: 0, registry: .standard)

    private var suffix: String { generation == 0 ? "" : "_g\(generation)" }

    /// The reader-view names of every registered projection's tables.
    package var names: [String] { registry.tableNames }
    /// The tables replay's scan loads (`IdentitiesProjection.finishBulk` adds `link_keys`
    /// and the `asids`' identities afterwards).
    package var loadedNames: [String] {
        registry.projections.filter { $0.bulk == .scan }.flatMap { $0.tables.map(\.name) }
            .filter { $0 != "asids" && $0 != "link_keys" }
    }

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

    /// The name of `table` (a reader-view name) in this generation.
    package func name(_ table: String) -> String { table + suffix }

    /// Creates the tables of `projections` (every registered one by default). The
    /// secondary indexes of those replay's scan loads come after loading (`createIndexes`)
    /// unless `indexed`; the others' are created with their tables, since they are folded row
    /// by row.
    package func createTables(_ db: Database, of projections: [any Projection.Type]? = nil, indexed: Bool = false) throws {
        precondition(generation > 0)
        for projection in projections ?? registry.projections {
            try db.execute(sql: projection.createTables(generation: generation))
            if indexed || projection.bulk == .refold { try db.execute(sql: projection.createIndexes(generation: generation)) }
        }
    }

    /// The secondary indexes of the projections replay's scan loads (those `including` takes).
    package func createIndexes(_ db: Database, including: (any Projection.Type) -> Bool = { _ in true }) throws {
        precondition(generation > 0)
        for projection in registry.projections where projection.bulk == .scan && including(projection) {
            try db.execute(sql: projection.createIndexes(generation: generation))
        }
    }

    /// Points the reader views of `projections` (every registered one by default) at this
    /// generation.
    package func publish(_ db: Database, of projections: [any Projection.Type]? = nil) throws {
        for name in (projections ?? registry.projections).flatMap({ $0.tables.map(\.name) }) {
            try db.execute(sql: "DROP VIEW IF EXISTS \(name)")
            try db.execute(sql: "CREATE VIEW \(name) AS SELECT * FROM \(name)_g\(generation)")
        }
    }

    /// Drops this generation's tables (`names`: the registered ones by default; their reader
    /// views stay). Their pages are zeroed only when `erasing` (they hold data a forget
    /// erased): Debian's SQLite zeroes every freed page by default (`secure_delete`), which
    /// wrote a whole generation again just to drop it.
    package func drop(_ db: Database, names: [String]? = nil, erasing: Bool = false) throws {
        let previous = try Int.fetchOne(db, sql: "PRAGMA secure_delete") ?? 0
        try db.execute(sql: "PRAGMA secure_delete = \(erasing ? "ON" : "FAST")")
        defer { try? db.execute(sql: "PRAGMA secure_delete = \(previous)") }
        for name in names ?? self.names { try db.execute(sql: "DROP TABLE IF EXISTS \(name)_g\(generation)") }
    }
}

extension ProjectionTables {
    /// SHA-256 of each projection table's (of `names`, every registered one by default) full
    /// contents, in key order.
    package static func digests(_ db: Database, tables: ProjectionTables, names: [String]? = nil) throws -> [String: String] {
        var result: [String: String] = [:]
        for name in names ?? tables.names {
            let table = tables.name(name)
            guard let order = tables.registry.primaryKey(of: name) else { preconditionFailure("\(name) is not registered") }
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
            forEach(in: bytes) { list.append(String(decoding: $0, as: UTF8.self)) }
            return list
        }
    }

    /// Adds `friends` to a row as one stored list.
    static func add<S: RowSink>(_ friends: [String], to sink: inout S) {
        sink.add(joining: friends, separator: LoggedEvent.friendSeparator)
    }

    /// Calls `body` with the bytes of each ASID of a stored list, in order.
    package static func forEach(
        in stored: UnsafeBufferPointer<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) throws -> Void
    ) rethrows {
        let separator = LoggedEvent.friendSeparator // read once: a global's accessor on every byte was 2 % of a scan
        var start = 0
        for i in 0...stored.count where i == stored.count || stored[i] == separator {
            if i > start { try body(UnsafeBufferPointer(rebasing: stored[start..<i])) }
            start = i + 1
        }
    }
}
