import Foundation
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
                    -- Projection inputs, so replay never re-parses payloads:
                    device_key  INTEGER NOT NULL,        -- StableHash(app_id, device_id)
                    asid_key    INTEGER,                 -- StableHash(asid)
                    link_email  TEXT,                    -- 'email:' + SHA-256 of the normalized e-mail
                    link_tfb    TEXT,                    -- 'tfb:' + token_for_business
                    friends     TEXT,                    -- friend_asids joined by ',' (NULL: absent)
                    declines_friends INTEGER NOT NULL DEFAULT 0 CHECK (declines_friends IN (0, 1)),
                    source_id   INTEGER NOT NULL REFERENCES sources(id),
                    position    INTEGER NOT NULL,
                    CHECK ((type = 'login') = (tracking IS NOT NULL AND asid IS NOT NULL) OR type = 'logout')
                ) STRICT;
                CREATE UNIQUE INDEX events_app_nonce ON events(app_id, nonce) WHERE nonce IS NOT NULL;
                CREATE INDEX events_device ON events(device_key);
                CREATE INDEX events_asid_login ON events(asid_key, occurred_at) WHERE type = 'login';

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
        migrator.registerMigration("v2-projections") { db in
            try db.execute(sql: """
                CREATE TABLE projection_meta (
                    id          INTEGER PRIMARY KEY CHECK (id = 1),
                    generation  INTEGER NOT NULL,
                    config      TEXT NOT NULL,
                    applied_seq INTEGER NOT NULL
                ) STRICT;
                """)
            let config = String(decoding: try JSONEncoder().encode(IdentityConfig()), as: UTF8.self)
            try db.execute(sql: "INSERT INTO projection_meta VALUES (1, 1, ?, 0)", arguments: [config])
            try ProjectionTables(generation: 1).create(db)
            try ProjectionTables(generation: 1).publish(db)
        }
        migrator.registerMigration("v3-forget-tombstones") { db in
            try db.execute(sql: """
                CREATE TABLE forgotten (
                    asid         TEXT PRIMARY KEY,
                    forgotten_at INTEGER NOT NULL,
                    events       INTEGER NOT NULL CHECK (events >= 0),
                    quarantined  INTEGER NOT NULL CHECK (quarantined >= 0)
                ) STRICT;
                """)
        }
        return migrator
    }
}
