import GRDB

/// The projection tables of one generation. Writers use the generation's tables; readers
/// use views of the same names without suffix, which `publish` points at the current
/// generation, so `replay` can build a new generation while readers keep working.
struct ProjectionTables: Sendable {
    /// 0 names the reader views.
    let generation: Int

    static let views = ProjectionTables(generation: 0)
    private var suffix: String { generation == 0 ? "" : "_g\(generation)" }

    static let names = [
        "devices", "limited_spans", "asids", "asid_keys", "link_keys", "friend_snapshots", "friend_edges", "friend_mentions",
    ]
    /// The tables a bulk load completes (`ProjectionBuilder.finish` adds `link_keys` and
    /// the `asids`' identities).
    static let loadedNames = names.filter { $0 != "asids" && $0 != "link_keys" }

    var devices: String { "devices" + suffix }
    var spans: String { "limited_spans" + suffix }
    var asids: String { "asids" + suffix }
    var asidKeys: String { "asid_keys" + suffix }
    var linkKeys: String { "link_keys" + suffix }
    var snapshots: String { "friend_snapshots" + suffix }
    var edges: String { "friend_edges" + suffix }
    var mentions: String { "friend_mentions" + suffix }

    /// Records that an ASID was named in a friend list at `(first_at, first_event)`,
    /// keeping the earliest mention: shared by the incremental updater and the bulk load.
    var recordMention: String {
        """
        INSERT INTO \(mentions) (asid, first_at, first_event) VALUES (?, ?, ?)
        ON CONFLICT(asid) DO UPDATE SET first_at = excluded.first_at, first_event = excluded.first_event
        WHERE excluded.first_at < first_at OR (excluded.first_at = first_at AND excluded.first_event < first_event)
        """
    }

    /// Creates the tables with their secondary indexes.
    func create(_ db: Database) throws {
        try createTables(db)
        try createIndexes(db)
    }

    /// Creates the tables only; a bulk load adds the secondary indexes afterwards.
    func createTables(_ db: Database) throws {
        precondition(generation > 0)
        let g = generation
        try db.execute(sql: """
            CREATE TABLE devices_g\(g) (
                app_id      TEXT NOT NULL,
                device_id   TEXT NOT NULL,
                mode        TEXT NOT NULL CHECK (mode IN ('enabled', 'limited', 'logged_out')),
                asid        TEXT,
                first_at    INTEGER NOT NULL,
                first_event TEXT NOT NULL,
                last_at     INTEGER NOT NULL,
                last_event  TEXT NOT NULL,
                logins      INTEGER NOT NULL CHECK (logins >= 0),
                logouts     INTEGER NOT NULL CHECK (logouts >= 0),
                anomalies   INTEGER NOT NULL CHECK (anomalies >= 0),
                last_login_tracking TEXT CHECK (last_login_tracking IN ('enabled', 'limited')),
                logout_since_login  INTEGER NOT NULL CHECK (logout_since_login IN (0, 1)),
                PRIMARY KEY (app_id, device_id),
                CHECK ((mode = 'logged_out') = (asid IS NULL))
            ) STRICT, WITHOUT ROWID;

            CREATE TABLE limited_spans_g\(g) (
                app_id     TEXT NOT NULL,
                device_id  TEXT NOT NULL,
                from_at    INTEGER NOT NULL,
                from_event TEXT NOT NULL,
                to_at      INTEGER,
                to_event   TEXT,
                asid       TEXT NOT NULL,
                PRIMARY KEY (app_id, device_id, from_at, from_event),
                CHECK ((to_at IS NULL) = (to_event IS NULL))
            ) STRICT, WITHOUT ROWID;

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

            CREATE TABLE friend_snapshots_g\(g) (
                asid           TEXT PRIMARY KEY,
                listed_at      INTEGER,
                listed_event   TEXT,
                friends        TEXT NOT NULL,
                declined_at    INTEGER,
                declined_event TEXT
            ) STRICT, WITHOUT ROWID;

            CREATE TABLE friend_edges_g\(g) (
                a    TEXT NOT NULL,
                b    TEXT NOT NULL,
                by_a INTEGER NOT NULL CHECK (by_a IN (0, 1)),
                by_b INTEGER NOT NULL CHECK (by_b IN (0, 1)),
                PRIMARY KEY (a, b),
                CHECK (a < b),
                CHECK (by_a = 1 OR by_b = 1)
            ) STRICT, WITHOUT ROWID;

            CREATE TABLE friend_mentions_g\(g) (
                asid        TEXT PRIMARY KEY,
                first_at    INTEGER NOT NULL,
                first_event TEXT NOT NULL
            ) STRICT, WITHOUT ROWID;
            """)
    }

    func createIndexes(_ db: Database) throws {
        precondition(generation > 0)
        let g = generation
        try db.execute(sql: """
            CREATE INDEX devices_g\(g)_asid ON devices_g\(g)(asid) WHERE asid IS NOT NULL;
            CREATE INDEX limited_spans_g\(g)_asid ON limited_spans_g\(g)(asid, from_at);
            CREATE INDEX asids_g\(g)_user ON asids_g\(g)(user_id);
            CREATE INDEX asid_keys_g\(g)_key ON asid_keys_g\(g)(key, asid);
            CREATE INDEX friend_edges_g\(g)_b ON friend_edges_g\(g)(b);
            """)
    }

    /// Primary-key columns of each table, in order: the order digests read rows in.
    static let primaryKeys = [
        "devices": "app_id, device_id", "limited_spans": "app_id, device_id, from_at, from_event", "asids": "asid",
        "asid_keys": "asid, key", "link_keys": "key", "friend_snapshots": "asid", "friend_edges": "a, b",
        "friend_mentions": "asid",
    ]

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
