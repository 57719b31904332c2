import GRDB
import IdreconDomain

/// Append-only, named migrations. Never edit a shipped migration; add a new one.
enum Schema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-event-log") { db in
            let codes = ReasonCode.allCases.map { "'\($0.rawValue)'" }.joined(separator: ",")
            try db.execute(sql: """
                CREATE TABLE sources (
                    id   INTEGER PRIMARY KEY,
                    name TEXT NOT NULL UNIQUE
                ) STRICT;

                CREATE TABLE events (
                    seq         INTEGER PRIMARY KEY,
                    event_id    TEXT NOT NULL UNIQUE CHECK (length(event_id) BETWEEN 1 AND 128),
                    type        TEXT NOT NULL CHECK (type IN ('login', 'logout')),
                    occurred_at INTEGER NOT NULL,
                    app_id      TEXT NOT NULL,
                    device_id   TEXT NOT NULL,
                    asid        TEXT,
                    tracking    TEXT CHECK (tracking IN ('enabled', 'limited')),
                    nonce       TEXT,
                    payload     TEXT NOT NULL,
                    source_id   INTEGER NOT NULL REFERENCES sources(id),
                    position    INTEGER NOT NULL,
                    CHECK ((type = 'login') = (tracking IS NOT NULL AND asid IS NOT NULL) OR type = 'logout')
                ) STRICT;
                CREATE UNIQUE INDEX events_app_nonce ON events(app_id, nonce) WHERE nonce IS NOT NULL;

                CREATE TABLE quarantine (
                    id             INTEGER PRIMARY KEY,
                    source         TEXT NOT NULL,
                    position       INTEGER NOT NULL,
                    partition      INTEGER,
                    record_key     BLOB,
                    raw            BLOB NOT NULL,
                    code           TEXT NOT NULL CHECK (code IN (\(codes))),
                    message        TEXT NOT NULL,
                    event_id       TEXT,
                    quarantined_at INTEGER NOT NULL
                ) STRICT;
                CREATE INDEX quarantine_code ON quarantine(code);

                CREATE TABLE consumed_positions (
                    source     TEXT PRIMARY KEY,
                    position   INTEGER NOT NULL CHECK (position >= 0),
                    records    INTEGER NOT NULL CHECK (records >= 0),
                    updated_at INTEGER NOT NULL
                ) STRICT;

                CREATE TABLE counters (
                    name  TEXT PRIMARY KEY,
                    value INTEGER NOT NULL
                ) STRICT;
                """)
        }
        return migrator
    }
}
