import Foundation
import GRDB
import IdreconDomain

/// Append-only, named migrations. Never edit a shipped migration; add a new one. Each is
/// literal SQL that depends on nothing of today's code (reason codes, projection tables,
/// configuration types): a database made by any release upgrades the same way.
package enum Schema {
    /// The migrations that rewrite the whole log (`v12-event-payloads`, `v16-event-id-runs`):
    /// a minute or more at 10M events; the one that rewrites its unique keys
    /// (`v18-key-runs-in-chunks`): about a second per million events; and the one that sorts its
    /// lookup keys into runs (`v20-log-keys-in-runs`). An open that will run one says so first
    /// (`pendingRewrite`).
    private static let logRewrite = "v12-event-payloads"
    private static let eventIDRewrite = "v16-event-id-runs"
    private static let keysRewrite = "v18-key-runs-in-chunks"
    private static let lookupKeysRewrite = "v20-log-keys-in-runs"

    /// What a pending migration rewrites.
    package enum Rewrite: Sendable {
        /// Every event's row (v12, v16).
        case log
        /// The sorted runs of the log's unique keys (v18).
        case uniqueKeys
        /// The log's lookup keys, sorted into runs (v20).
        case lookupKeys
    }

    /// The largest rewrite the pending migrations make, with the log's size; nil when none
    /// is pending or the database has no log yet.
    package static func pendingRewrite(_ db: Database) throws -> (rewrite: Rewrite, events: Int64)? {
        let applied = try migrator.appliedIdentifiers(db)
        guard try db.tableExists("events") else { return nil }
        let rewrite: Rewrite
        if !applied.contains(logRewrite) || !applied.contains(eventIDRewrite) {
            rewrite = .log
        } else if !applied.contains(keysRewrite) {
            rewrite = .uniqueKeys
        } else if !applied.contains(lookupKeysRewrite) {
            rewrite = .lookupKeys
        } else {
            return nil
        }
        return (rewrite, try Int64.fetchOne(db, sql: "SELECT coalesce(max(seq), 0) FROM events") ?? 0)
    }

    package static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-event-log") { db in
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
                    code           TEXT NOT NULL CHECK (code IN ('malformed_json','unsupported_schema','missing_field','invalid_field','token_type_mismatch','permission_out_of_scope','limited_unsupported','claim_without_permission','event_id_conflict','nonce_replay','token_invalid')),
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
            // Generation 1 of the projection tables and the reader views on it.
            try db.execute(sql: """
                CREATE TABLE projection_meta (
                    id          INTEGER PRIMARY KEY CHECK (id = 1),
                    generation  INTEGER NOT NULL,
                    config      TEXT NOT NULL,
                    applied_seq INTEGER NOT NULL
                ) STRICT;
                
                CREATE TABLE devices_g1 (
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
                
                CREATE TABLE limited_spans_g1 (
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
                
                CREATE TABLE asids_g1 (
                    asid              TEXT PRIMARY KEY,
                    first_login_at    INTEGER NOT NULL,
                    first_login_event TEXT NOT NULL,
                    user_id           TEXT NOT NULL CHECK (user_id LIKE 'u:%')
                ) STRICT, WITHOUT ROWID;
                
                CREATE TABLE asid_keys_g1 (
                    asid        TEXT NOT NULL,
                    key         TEXT NOT NULL CHECK (key LIKE 'email:%' OR key LIKE 'tfb:%'),
                    first_at    INTEGER NOT NULL,
                    first_event TEXT NOT NULL,
                    PRIMARY KEY (asid, key)
                ) STRICT, WITHOUT ROWID;
                
                CREATE TABLE link_keys_g1 (
                    key       TEXT PRIMARY KEY,
                    asids     INTEGER NOT NULL CHECK (asids >= 1),
                    ambiguous INTEGER NOT NULL CHECK (ambiguous IN (0, 1, 2))
                ) STRICT, WITHOUT ROWID;
                
                CREATE TABLE friend_snapshots_g1 (
                    asid           TEXT PRIMARY KEY,
                    listed_at      INTEGER,
                    listed_event   TEXT,
                    friends        TEXT NOT NULL,
                    declined_at    INTEGER,
                    declined_event TEXT
                ) STRICT, WITHOUT ROWID;
                
                CREATE TABLE friend_edges_g1 (
                    a    TEXT NOT NULL,
                    b    TEXT NOT NULL,
                    by_a INTEGER NOT NULL CHECK (by_a IN (0, 1)),
                    by_b INTEGER NOT NULL CHECK (by_b IN (0, 1)),
                    PRIMARY KEY (a, b),
                    CHECK (a < b),
                    CHECK (by_a = 1 OR by_b = 1)
                ) STRICT, WITHOUT ROWID;
                
                CREATE TABLE friend_mentions_g1 (
                    asid        TEXT PRIMARY KEY,
                    first_at    INTEGER NOT NULL,
                    first_event TEXT NOT NULL
                ) STRICT, WITHOUT ROWID;
                
                CREATE INDEX devices_g1_asid ON devices_g1(asid) WHERE asid IS NOT NULL;
                
                CREATE INDEX limited_spans_g1_asid ON limited_spans_g1(asid, from_at);
                
                CREATE INDEX asids_g1_user ON asids_g1(user_id);
                
                CREATE INDEX asid_keys_g1_key ON asid_keys_g1(key, asid);
                
                CREATE INDEX friend_edges_g1_b ON friend_edges_g1(b);
                
                CREATE VIEW devices AS SELECT * FROM devices_g1;
                
                CREATE VIEW limited_spans AS SELECT * FROM limited_spans_g1;
                
                CREATE VIEW asids AS SELECT * FROM asids_g1;
                
                CREATE VIEW asid_keys AS SELECT * FROM asid_keys_g1;
                
                CREATE VIEW link_keys AS SELECT * FROM link_keys_g1;
                
                CREATE VIEW friend_snapshots AS SELECT * FROM friend_snapshots_g1;
                
                CREATE VIEW friend_edges AS SELECT * FROM friend_edges_g1;
                
                CREATE VIEW friend_mentions AS SELECT * FROM friend_mentions_g1;

                INSERT INTO projection_meta VALUES (1, 1, '{"blocklist":[],"max_asids_per_key":25}', 0);
                """)
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
        migrator.registerMigration("v4-skipped-ranges") { db in
            // Source positions that were never read because the source no longer had them
            // (a Kafka partition's retention moved its log start past the stored offset).
            try db.execute(sql: """
                CREATE TABLE skipped_ranges (
                    source         TEXT NOT NULL,
                    first_position INTEGER NOT NULL CHECK (first_position >= 0),
                    last_position  INTEGER NOT NULL CHECK (last_position >= first_position),
                    detected_at    INTEGER NOT NULL,
                    PRIMARY KEY (source, first_position)
                ) STRICT;
                """)
        }
        migrator.registerMigration("v5-pending-rebuild") { db in
            // Set in the transaction of a `forget` that scrubs the log, cleared by the replay
            // that swaps in projections folded from the scrubbed log: while set, the live
            // projections still hold what was erased, and the next writer rebuilds them.
            try db.execute(sql: """
                CREATE TABLE pending_rebuild (
                    id    INTEGER PRIMARY KEY CHECK (id = 1),
                    since INTEGER NOT NULL,
                    why   TEXT NOT NULL
                ) STRICT;
                """)
        }
        migrator.registerMigration("v6-kafka-bindings") { db in
            // Which Kafka cluster and consumer group a topic's stored offsets belong to: the
            // first consumer binds the topic; another cluster or group is refused (its offsets
            // would be shared) unless it rebinds.
            try db.execute(sql: """
                CREATE TABLE kafka_bindings (
                    topic      TEXT PRIMARY KEY,
                    cluster_id TEXT NOT NULL,
                    group_id   TEXT NOT NULL,
                    bound_at   INTEGER NOT NULL
                ) STRICT;
                """)
        }
        migrator.registerMigration("v7-tiered-log-keys") { db in
            // The device and ASID keys are hashes, so each appending transaction inserted them
            // all over two indexes as large as the log: pages rewritten per event grew with the
            // log (1,860 B written per row at 1M, 3,897 at 4M). Led by the sequence's tier
            // (2^18 events), new keys land in the newest tier's part of each index only, and a
            // lookup seeks once per tier (schemas/sql.md, "Log keys").
            try db.execute(sql: """
                DROP INDEX events_device;
                DROP INDEX events_asid_login;
                CREATE INDEX events_device ON events(seq >> 18, device_key);
                CREATE INDEX events_asid_login ON events(seq >> 18, asid_key, occurred_at) WHERE type = 'login';
                """)
        }
        migrator.registerMigration("v8-access-history") { db in
            // Each ASID's latest login and the spans during which its latest login is limited,
            // so that access at any time needs no walk of the log's tiers (README, "Graph
            // access"). Created in the live generation and filled from the events it has
            // folded (`applied_seq`); a replay builds them like every projection table. `_gN`
            // stands for the live generation's suffix, the one value not written out here.
            let generation = try Int.fetchOne(db, sql: "SELECT generation FROM projection_meta WHERE id = 1") ?? 1
            try db.execute(sql: """
                CREATE TABLE asid_last_logins_gN (
                    asid       TEXT PRIMARY KEY,
                    last_at    INTEGER NOT NULL,
                    last_event TEXT NOT NULL,
                    tracking   TEXT NOT NULL CHECK (tracking IN ('enabled', 'limited'))
                ) STRICT, WITHOUT ROWID;

                CREATE TABLE asid_limited_spans_gN (
                    asid       TEXT NOT NULL,
                    from_at    INTEGER NOT NULL,
                    from_event TEXT NOT NULL,
                    to_at      INTEGER,
                    to_event   TEXT,
                    app_id     TEXT NOT NULL,
                    device_id  TEXT NOT NULL,
                    PRIMARY KEY (asid, from_at, from_event),
                    CHECK ((to_at IS NULL) = (to_event IS NULL))
                ) STRICT, WITHOUT ROWID;

                CREATE TEMP TABLE v8_logins AS
                SELECT asid, occurred_at, event_id, tracking, app_id, device_id,
                       lead(occurred_at) OVER w AS next_at, lead(event_id) OVER w AS next_event,
                       row_number() OVER (PARTITION BY asid ORDER BY occurred_at DESC, event_id DESC) AS from_last
                FROM events
                WHERE type = 'login' AND seq <= (SELECT applied_seq FROM projection_meta WHERE id = 1)
                WINDOW w AS (PARTITION BY asid ORDER BY occurred_at, event_id);

                INSERT INTO asid_last_logins_gN (asid, last_at, last_event, tracking)
                SELECT asid, occurred_at, event_id, tracking FROM v8_logins WHERE from_last = 1 ORDER BY asid;

                INSERT INTO asid_limited_spans_gN (asid, from_at, from_event, to_at, to_event, app_id, device_id)
                SELECT asid, occurred_at, event_id, next_at, next_event, app_id, device_id FROM v8_logins
                WHERE tracking = 'limited' ORDER BY asid, occurred_at, event_id;

                DROP TABLE v8_logins;

                CREATE VIEW asid_last_logins AS SELECT * FROM asid_last_logins_gN;

                CREATE VIEW asid_limited_spans AS SELECT * FROM asid_limited_spans_gN;
                """.replacingOccurrences(of: "_gN", with: "_g" + String(generation)))
        }
        migrator.registerMigration("v9-change-feed") { db in
            // The change feed (README, "Change feed"): its position moves in the transactions
            // that fold the log, and changes wait in `feed_changes` until Kafka has them.
            try db.execute(sql: """
                CREATE TABLE change_feed (
                    id          INTEGER PRIMARY KEY CHECK (id = 1),
                    topic       TEXT NOT NULL,
                    feed_id     TEXT NOT NULL,
                    decided_seq INTEGER NOT NULL CHECK (decided_seq >= 0),
                    last_change INTEGER NOT NULL CHECK (last_change >= 0),
                    sent_change INTEGER NOT NULL CHECK (sent_change >= 0 AND sent_change <= last_change)
                ) STRICT;

                CREATE TABLE feed_changes (
                    change INTEGER PRIMARY KEY,
                    seq    INTEGER NOT NULL,
                    key    TEXT NOT NULL,
                    body   TEXT NOT NULL CHECK (json_valid(body))
                ) STRICT;
                """)
        }
        migrator.registerMigration("v10-projection-cursors") { db in
            // Each projection's own position in the log, so that a new projection builds
            // itself from the log without rebuilding the others (README, "Projections"); the
            // four of this version are where `projection_meta` says. `tables` names a
            // projection's reader views, for a replay by a writer that does not register it.
            try db.execute(sql: """
                CREATE TABLE projection_cursors (
                    name        TEXT PRIMARY KEY,
                    applied_seq INTEGER NOT NULL CHECK (applied_seq >= 0),
                    tables      TEXT NOT NULL CHECK (tables <> '')
                ) STRICT;

                INSERT INTO projection_cursors (name, applied_seq, tables)
                SELECT column1, (SELECT applied_seq FROM projection_meta WHERE id = 1), column2 FROM (VALUES
                    ('devices', 'devices,limited_spans'),
                    ('identities', 'asids,asid_keys,link_keys'),
                    ('friends', 'friend_snapshots,friend_edges,friend_mentions'),
                    ('access', 'asid_last_logins,asid_limited_spans'));
                """)
        }
        migrator.registerMigration("v11-limited-spans-asid-order") { db in
            // `access` asks for the earliest span an ASID's devices hold at t, ordered by
            // (from_at, from_event); led by (asid, from_at) only, the index left SQLite a
            // temporary B-tree per lookup for the tie-break (schemas/sql.md, "Access history").
            let tables = try String.fetchAll(db, sql: """
                SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'limited_spans_g[0-9]*'
                """)
            for table in tables {
                try db.execute(sql: """
                    DROP INDEX IF EXISTS limited_spans_gN_asid;
                    CREATE INDEX limited_spans_gN_asid ON limited_spans_gN(asid, from_at, from_event);
                    """.replacingOccurrences(of: "_gN", with: String(table.dropFirst("limited_spans".count))))
            }
        }
        migrator.registerMigration(logRewrite) { db in
            // The canonical payload is 60 % of an `events` row (393 of 630 bytes at 1M) and no
            // projection, index build or replay scan reads it: kept in the row, every scan of
            // the log's columns read it too (6 GB at 10M). Only the duplicate check and `forget`
            // read it, by `seq` (schemas/sql.md, "Payloads apart").
            try db.execute(sql: """
                CREATE TABLE event_payloads (
                    seq     INTEGER PRIMARY KEY,
                    payload TEXT NOT NULL
                ) STRICT;
                INSERT INTO event_payloads (seq, payload) SELECT seq, payload FROM events ORDER BY seq;
                ALTER TABLE events DROP COLUMN payload;
                """)
        }
        migrator.registerMigration("v13-limited-spans-covering") { db in
            // The held-span lookup read `to_at` from each span's row: a seek into the table per
            // span of the ASID (5.3 per limited ASID at 1M, more with every year of history).
            // With `to_at` in the index the lookup reads the index alone (schemas/sql.md,
            // "Access history").
            let tables = try String.fetchAll(db, sql: """
                SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'limited_spans_g[0-9]*'
                """)
            for table in tables {
                try db.execute(sql: """
                    DROP INDEX IF EXISTS limited_spans_gN_asid;
                    CREATE INDEX limited_spans_gN_asid ON limited_spans_gN(asid, from_at, from_event, to_at);
                    """.replacingOccurrences(of: "_gN", with: String(table.dropFirst("limited_spans".count))))
            }
        }
        migrator.registerMigration("v14-log-key-tables") { db in
            // The log's two key indexes become tables of the same keys, so that a bulk build can
            // fill them from its own scan, sorted per tier, in key order: `CREATE INDEX` read the
            // log again and sorted all of it (n log n; 1M events: 0.9-1.2 s per index, 10M: 9-10
            // s). The append inserts each new event's keys, as SQLite did the indexes'; while a
            // bulk append leaves them out, `log_keys_suspended` holds the last event with keys
            // (schemas/sql.md, "Log keys").
            try db.execute(sql: """
                CREATE TABLE event_device_keys (
                    tier       INTEGER NOT NULL,
                    device_key INTEGER NOT NULL,
                    seq        INTEGER NOT NULL,
                    PRIMARY KEY (tier, device_key, seq)
                ) STRICT, WITHOUT ROWID;
                CREATE TABLE event_login_keys (
                    tier     INTEGER NOT NULL,
                    asid_key INTEGER NOT NULL,
                    seq      INTEGER NOT NULL,
                    PRIMARY KEY (tier, asid_key, seq)
                ) STRICT, WITHOUT ROWID;
                CREATE TABLE log_keys_suspended (
                    id            INTEGER PRIMARY KEY CHECK (id = 1),
                    keyed_through INTEGER NOT NULL
                ) STRICT;
                INSERT INTO event_device_keys (tier, device_key, seq)
                    SELECT seq >> 18, device_key, seq FROM events ORDER BY 1, 2, 3;
                INSERT INTO event_login_keys (tier, asid_key, seq)
                    SELECT seq >> 18, asid_key, seq FROM events WHERE type = 'login' AND asid_key IS NOT NULL ORDER BY 1, 2, 3;
                DROP INDEX IF EXISTS events_device;
                DROP INDEX IF EXISTS events_asid_login;
                """)
        }
        migrator.registerMigration("v15-nonce-runs") { db in
            // A UNIQUE index of random nonces (the Facebook SDK makes one per Limited Login)
            // takes each new one on a leaf of its own: every transaction rewrote most of the
            // index, and the bytes written per event grew with the log (10M events: 2.55× the
            // 1M figure). The nonces' hashes move to sorted runs with a Bloom filter each, which
            // the append searches, fills and merges (schemas/sql.md, "Unique keys in runs"). The
            // log's nonces become one sealed run, of the tier of runs of its size (2^18 × 8^tier
            // keys); its filter is made by the first append.
            // The key is the 64-bit FNV-1a of the UTF-8 bytes of app_id, 0x1F, nonce, shifted
            // right by one: what `StableHash.key(app_id, nonce)` computes for the append.
            db.add(function: DatabaseFunction("idrecon_v15_nonce_hash", argumentCount: 2, pure: true) { values in
                guard let app = Data.fromDatabaseValue(values[0]), let nonce = Data.fromDatabaseValue(values[1]) else { return nil }
                var hash: UInt64 = 0xCBF2_9CE4_8422_2325
                for byte in app { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
                hash = (hash ^ 0x1F) &* 0x0000_0100_0000_01B3
                for byte in nonce { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
                return Int64(bitPattern: hash >> 1)
            })
            try db.execute(sql: """
                CREATE TABLE key_runs (
                    name       TEXT NOT NULL,
                    run        INTEGER NOT NULL CHECK (run > 0),
                    tier       INTEGER NOT NULL CHECK (tier >= 0),
                    keys       INTEGER NOT NULL CHECK (keys >= 0),
                    sealed     INTEGER NOT NULL CHECK (sealed IN (0, 1)),
                    generation INTEGER NOT NULL,
                    filter     BLOB CHECK (filter IS NULL OR sealed = 1),
                    PRIMARY KEY (name, run)
                ) STRICT, WITHOUT ROWID;
                CREATE UNIQUE INDEX key_runs_one_open ON key_runs(name) WHERE sealed = 0;
                CREATE TABLE nonce_runs (
                    run      INTEGER NOT NULL,
                    key_hash INTEGER NOT NULL,
                    seq      INTEGER NOT NULL,
                    PRIMARY KEY (run, key_hash, seq)
                ) STRICT, WITHOUT ROWID;
                INSERT INTO nonce_runs (run, key_hash, seq)
                    SELECT 1, idrecon_v15_nonce_hash(app_id, nonce), seq FROM events WHERE nonce IS NOT NULL ORDER BY 2, 3;
                INSERT INTO key_runs (name, run, tier, keys, sealed, generation)
                    SELECT 'nonce_runs', 1, CASE
                            WHEN n < 2097152 THEN 0 WHEN n < 16777216 THEN 1 WHEN n < 134217728 THEN 2
                            WHEN n < 1073741824 THEN 3 WHEN n < 8589934592 THEN 4 ELSE 5 END, n, 1, 1
                    FROM (SELECT count(*) AS n FROM nonce_runs) WHERE n > 0;
                DROP INDEX IF EXISTS events_app_nonce;
                """)
        }
        migrator.registerMigration(eventIDRewrite) { db in
            // `event_id`'s UNIQUE index took each random ID (many SDKs make a UUID per event) on
            // a leaf of its own, as the nonces' did (v15): 10M UUID events wrote 3.1× the bytes
            // per event of 1M. The IDs' hashes move to sorted runs like the nonces'; SQLite drops
            // a column's UNIQUE only with the table, so the log is copied once without it.
            // The key is the 64-bit FNV-1a of event_id's UTF-8 bytes shifted right by one: what
            // `StableHash.key(event_id)` computes for the append.
            db.add(function: DatabaseFunction("idrecon_v16_event_id_hash", argumentCount: 1, pure: true) { values in
                guard let id = Data.fromDatabaseValue(values[0]) else { return nil }
                var hash: UInt64 = 0xCBF2_9CE4_8422_2325
                for byte in id { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
                return Int64(bitPattern: hash >> 1)
            })
            try db.execute(sql: """
                CREATE TABLE events_v16 (
                    seq         INTEGER PRIMARY KEY,
                    event_id    TEXT NOT NULL CHECK (length(event_id) BETWEEN 1 AND 128),
                    type        TEXT NOT NULL CHECK (type IN ('login', 'logout')),
                    occurred_at INTEGER NOT NULL,
                    app_id      TEXT NOT NULL,
                    device_id   TEXT NOT NULL,
                    asid        TEXT,
                    tracking    TEXT CHECK (tracking IN ('enabled', 'limited')),
                    nonce       TEXT,
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
                INSERT INTO events_v16 (seq, event_id, type, occurred_at, app_id, device_id, asid, tracking, nonce,
                        device_key, asid_key, link_email, link_tfb, friends, declines_friends, source_id, position)
                    SELECT seq, event_id, type, occurred_at, app_id, device_id, asid, tracking, nonce,
                        device_key, asid_key, link_email, link_tfb, friends, declines_friends, source_id, position
                    FROM events ORDER BY seq;
                DROP TABLE events;
                ALTER TABLE events_v16 RENAME TO events;
                CREATE TABLE event_id_runs (
                    run      INTEGER NOT NULL,
                    key_hash INTEGER NOT NULL,
                    seq      INTEGER NOT NULL,
                    PRIMARY KEY (run, key_hash, seq)
                ) STRICT, WITHOUT ROWID;
                INSERT INTO event_id_runs (run, key_hash, seq)
                    SELECT 1, idrecon_v16_event_id_hash(event_id), seq FROM events ORDER BY 2, 3;
                INSERT INTO key_runs (name, run, tier, keys, sealed, generation)
                    SELECT 'event_id_runs', 1, CASE
                            WHEN n < 2097152 THEN 0 WHEN n < 16777216 THEN 1 WHEN n < 134217728 THEN 2
                            WHEN n < 1073741824 THEN 3 WHEN n < 8589934592 THEN 4 ELSE 5 END, n, 1, 1
                    FROM (SELECT count(*) AS n FROM event_id_runs) WHERE n > 0;
                """)
        }
        migrator.registerMigration("v17-open-key-runs-in-the-log") { db in
            // The open run's keys were rows of the runs' tables, taken in key order by each
            // transaction: every transaction rewrote most of the open run's pages (14 s of a 10M
            // append). The open run's keys are now those of the events from its `first_seq` on,
            // which the log already holds; the writer keeps them in memory and writes them once,
            // sorted, as a sealed run. An open run of the old layout becomes a sealed run as it is
            // (its filter made by the first append), and each table gets an empty open run that
            // starts after the log's last event.
            try db.execute(sql: """
                CREATE TABLE key_runs_v17 (
                    name       TEXT NOT NULL,
                    run        INTEGER NOT NULL CHECK (run > 0),
                    tier       INTEGER NOT NULL CHECK (tier >= 0),
                    keys       INTEGER NOT NULL CHECK (keys >= 0),
                    sealed     INTEGER NOT NULL CHECK (sealed IN (0, 1)),
                    generation INTEGER NOT NULL,
                    filter     BLOB CHECK (filter IS NULL OR sealed = 1),
                    first_seq  INTEGER CHECK ((first_seq IS NULL) = (sealed = 1) AND (first_seq IS NULL OR first_seq > 0)),
                    PRIMARY KEY (name, run)
                ) STRICT, WITHOUT ROWID;
                INSERT INTO key_runs_v17 (name, run, tier, keys, sealed, generation, filter)
                    SELECT name, run, tier, keys, 1, generation, filter FROM key_runs WHERE keys > 0;
                INSERT INTO key_runs_v17 (name, run, tier, keys, sealed, generation, first_seq)
                    SELECT tables.name, coalesce((SELECT max(run) FROM key_runs_v17 AS r WHERE r.name = tables.name), 0) + 1,
                        0, 0, 0, 1, coalesce((SELECT max(seq) FROM events), 0) + 1
                    FROM (SELECT 'event_id_runs' AS name UNION ALL SELECT 'nonce_runs') AS tables;
                DROP TABLE key_runs;
                ALTER TABLE key_runs_v17 RENAME TO key_runs;
                CREATE UNIQUE INDEX key_runs_one_open ON key_runs(name) WHERE sealed = 0;
                """)
        }
        migrator.registerMigration("v18-key-runs-in-chunks") { db in
            // A sealed run was a row per key of a WITHOUT ROWID table: a merge read and wrote
            // each key through SQLite's B-tree (2.4-2.8 s for 2.5M keys). A run is now a sequence
            // of chunks, each one row of a page's worth of its (hash, seq) pairs in key order, 16
            // bytes each, little-endian; `id` is run << 32 | chunk; `key_runs.fences` holds the
            // first hash of each chunk, 8 bytes each, little-endian. Every sealed run is
            // rewritten so (about a second per million keys); its filter is kept.
            let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            let pairsPerChunk = max(16, (pageSize - 128) / 16)
            try db.execute(sql: "ALTER TABLE key_runs ADD COLUMN fences BLOB")
            let tables = [
                (name: "event_id_runs", create: """
                    ALTER TABLE event_id_runs RENAME TO event_id_runs_v17;
                    CREATE TABLE event_id_runs (
                        id   INTEGER PRIMARY KEY,
                        keys BLOB NOT NULL CHECK (length(keys) > 0 AND length(keys) % 16 = 0)
                    ) STRICT;
                    """,
                 read: "SELECT key_hash, seq FROM event_id_runs_v17 WHERE run = ? ORDER BY key_hash, seq",
                 insert: "INSERT INTO event_id_runs (id, keys) VALUES (?, ?)", drop: "DROP TABLE event_id_runs_v17"),
                (name: "nonce_runs", create: """
                    ALTER TABLE nonce_runs RENAME TO nonce_runs_v17;
                    CREATE TABLE nonce_runs (
                        id   INTEGER PRIMARY KEY,
                        keys BLOB NOT NULL CHECK (length(keys) > 0 AND length(keys) % 16 = 0)
                    ) STRICT;
                    """,
                 read: "SELECT key_hash, seq FROM nonce_runs_v17 WHERE run = ? ORDER BY key_hash, seq",
                 insert: "INSERT INTO nonce_runs (id, keys) VALUES (?, ?)", drop: "DROP TABLE nonce_runs_v17"),
            ]
            for table in tables {
                try db.execute(sql: table.create)
                let insert = try db.makeStatement(sql: table.insert)
                let runs = try Int64.fetchAll(db, sql: "SELECT run FROM key_runs WHERE name = ? AND sealed = 1 ORDER BY run",
                                              arguments: [table.name])
                for run in runs {
                    var fences = Data(), chunk = Data()
                    var index: Int64 = 0
                    func flush() throws {
                        try insert.execute(arguments: [run << 32 | index, chunk])
                        index += 1
                        chunk.removeAll(keepingCapacity: true)
                    }
                    let rows = try Row.fetchCursor(db, sql: table.read, arguments: [run])
                    while let row = try rows.next() {
                        let (hash, seq): (Int64, Int64) = (row[0], row[1])
                        if chunk.isEmpty { withUnsafeBytes(of: hash.littleEndian) { fences.append(contentsOf: $0) } }
                        withUnsafeBytes(of: hash.littleEndian) { chunk.append(contentsOf: $0) }
                        withUnsafeBytes(of: seq.littleEndian) { chunk.append(contentsOf: $0) }
                        if chunk.count == pairsPerChunk * 16 { try flush() }
                    }
                    if !chunk.isEmpty { try flush() }
                    try db.execute(sql: "UPDATE key_runs SET fences = ? WHERE name = ? AND run = ?",
                                   arguments: [fences, table.name, run])
                }
                try db.execute(sql: table.drop)
            }
        }
        migrator.registerMigration("v19-key-runs-by-rowid") { db in
            // `key_runs` was WITHOUT ROWID: its rows were its B-tree's keys, and SQLite compares
            // a key whose record overflows its page by reading the whole record. A sealed run's
            // filter overflows (4 MB for 2.5M keys), so every writer transaction's read of a
            // table's runs (`WHERE name = ?`) and update of its open run read every filter: at
            // 8M events ~0.06 pages per appended event, growing with the log. As a rowid table
            // whose key is an index of small entries, a lookup compares those and reads a row's
            // leading columns from its page; the filter and fences, last, only when selected.
            try db.execute(sql: """
                CREATE TABLE key_runs_v19 (
                    id         INTEGER PRIMARY KEY,
                    name       TEXT NOT NULL,
                    run        INTEGER NOT NULL CHECK (run > 0),
                    tier       INTEGER NOT NULL CHECK (tier >= 0),
                    keys       INTEGER NOT NULL CHECK (keys >= 0),
                    sealed     INTEGER NOT NULL CHECK (sealed IN (0, 1)),
                    generation INTEGER NOT NULL,
                    first_seq  INTEGER CHECK ((first_seq IS NULL) = (sealed = 1)
                                              AND (first_seq IS NULL OR first_seq > 0)),
                    filter     BLOB CHECK (filter IS NULL OR sealed = 1),
                    fences     BLOB CHECK (fences IS NULL OR sealed = 1),
                    UNIQUE (name, run)
                ) STRICT;
                INSERT INTO key_runs_v19 (name, run, tier, keys, sealed, generation, first_seq, filter, fences)
                    SELECT name, run, tier, keys, sealed, generation, first_seq, filter, fences
                    FROM key_runs ORDER BY name, run;
                DROP TABLE key_runs;
                ALTER TABLE key_runs_v19 RENAME TO key_runs;
                CREATE UNIQUE INDEX key_runs_one_open ON key_runs(name) WHERE sealed = 0;
                """)
        }
        migrator.registerMigration(lookupKeysRewrite) { db in
            // The log's lookup keys (a device's events, an ASID's logins: what the refold of a late
            // event reads) move from rows `(tier, key, seq)` of v14's tables to sorted runs in
            // chunks, as the unique keys are kept (v15-v19): an append inserted two B-tree rows
            // per event, a bulk build inserted a killed or bulk append's keys beside its scanners
            // (10M events with long friend lists: 18.8M rows, the scan 39-49 s against 26 s), and
            // a lookup sought once per 2^18-event tier of the log. Each kind becomes one sealed
            // run of the log's keys, of the tier of its size (2^18 x 8^tier keys), and an empty
            // open run after the log's last event; its filter is made by the first writer.
            let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            let pairsPerChunk = max(16, (pageSize - 128) / 16)
            let lastSeq = try Int64.fetchOne(db, sql: "SELECT coalesce(max(seq), 0) FROM events") ?? 0
            try db.execute(sql: """
                CREATE TABLE device_key_runs (
                    id   INTEGER PRIMARY KEY,
                    keys BLOB NOT NULL CHECK (length(keys) > 0 AND length(keys) % 16 = 0)
                ) STRICT;
                CREATE TABLE login_key_runs (
                    id   INTEGER PRIMARY KEY,
                    keys BLOB NOT NULL CHECK (length(keys) > 0 AND length(keys) % 16 = 0)
                ) STRICT;
                """)
            let kinds = [
                (name: "device_key_runs", read: "SELECT device_key, seq FROM events ORDER BY device_key, seq",
                 insert: "INSERT INTO device_key_runs (id, keys) VALUES (?, ?)"),
                (name: "login_key_runs",
                 read: "SELECT asid_key, seq FROM events WHERE type = 'login' AND asid_key IS NOT NULL ORDER BY asid_key, seq",
                 insert: "INSERT INTO login_key_runs (id, keys) VALUES (?, ?)"),
            ]
            for kind in kinds {
                let insert = try db.makeStatement(sql: kind.insert)
                let run: Int64 = 1
                var fences = Data(), chunk = Data()
                var index: Int64 = 0, keys: Int64 = 0
                func flush() throws {
                    try insert.execute(arguments: [run << 32 | index, chunk])
                    index += 1
                    chunk.removeAll(keepingCapacity: true)
                }
                let rows = try Row.fetchCursor(db, sql: kind.read)
                while let row = try rows.next() {
                    let (hash, seq): (Int64, Int64) = (row[0], row[1])
                    if chunk.isEmpty { withUnsafeBytes(of: hash.littleEndian) { fences.append(contentsOf: $0) } }
                    withUnsafeBytes(of: hash.littleEndian) { chunk.append(contentsOf: $0) }
                    withUnsafeBytes(of: seq.littleEndian) { chunk.append(contentsOf: $0) }
                    keys += 1
                    if chunk.count == pairsPerChunk * 16 { try flush() }
                }
                if !chunk.isEmpty { try flush() }
                if keys > 0 {
                    var tier = 0, capacity: Int64 = 1 << 21
                    while keys >= capacity, tier < 13 { (tier, capacity) = (tier + 1, capacity * 8) }
                    try db.execute(sql: """
                        INSERT INTO key_runs (name, run, tier, keys, sealed, generation, fences) VALUES (?, ?, ?, ?, 1, 1, ?)
                        """, arguments: [kind.name, run, tier, keys, fences])
                }
                try db.execute(sql: """
                    INSERT INTO key_runs (name, run, tier, keys, sealed, generation, first_seq) VALUES (?, ?, 0, 0, 0, 1, ?)
                    """, arguments: [kind.name, keys > 0 ? run + 1 : run, lastSeq + 1])
            }
            try db.execute(sql: """
                DROP TABLE event_device_keys;
                DROP TABLE event_login_keys;
                DROP TABLE log_keys_suspended;
                """)
        }
        migrator.registerMigration("v21-fold-checkpoints") { db in
            // A late event was folded again with every event of its device, a late login with every
            // login of its ASID: a cost per late event that grew with the entity's history. A
            // checkpoint is the fold's state at one of the entity's events, some behind its
            // latest, and which events of the log it holds (`FoldCheckpoint`); a
            // refold reads only the events after it. The log's tables, not a generation's: a
            // rebuild of the projections leaves them true.
            try db.execute(sql: """
                CREATE TABLE asid_fold_checkpoints (
                    asid        TEXT PRIMARY KEY,
                    last_at     INTEGER NOT NULL,
                    last_event  TEXT NOT NULL,
                    tracking    TEXT NOT NULL CHECK (tracking IN ('enabled', 'limited')),
                    from_seq    INTEGER NOT NULL CHECK (from_seq >= 1),
                    written_seq INTEGER NOT NULL CHECK (written_seq >= from_seq)
                ) STRICT, WITHOUT ROWID;

                CREATE TABLE device_fold_checkpoints (
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
                    from_seq    INTEGER NOT NULL CHECK (from_seq >= 1),
                    written_seq INTEGER NOT NULL CHECK (written_seq >= from_seq),
                    PRIMARY KEY (app_id, device_id),
                    CHECK ((mode = 'logged_out') = (asid IS NULL))
                ) STRICT, WITHOUT ROWID;
                """)
        }
        migrator.registerMigration("v22-fold-checkpoint-levels") { db in
            // One checkpoint per entity bounded a late event's refold only within the entity's
            // last 64 events: an older one read the whole history. Checkpoints at several depths
            // (`FoldCheckpoint.lags`, the `level`'s index) bound it by how late it is. The v21
            // rows are level 0 (64 behind).
            try db.execute(sql: """
                ALTER TABLE asid_fold_checkpoints RENAME TO asid_fold_checkpoints_v21;
                CREATE TABLE asid_fold_checkpoints (
                    asid        TEXT NOT NULL,
                    level       INTEGER NOT NULL CHECK (level BETWEEN 0 AND 15),
                    last_at     INTEGER NOT NULL,
                    last_event  TEXT NOT NULL,
                    tracking    TEXT NOT NULL CHECK (tracking IN ('enabled', 'limited')),
                    from_seq    INTEGER NOT NULL CHECK (from_seq >= 1),
                    written_seq INTEGER NOT NULL CHECK (written_seq >= from_seq),
                    PRIMARY KEY (asid, level)
                ) STRICT, WITHOUT ROWID;
                INSERT INTO asid_fold_checkpoints
                    SELECT asid, 0, last_at, last_event, tracking, from_seq, written_seq FROM asid_fold_checkpoints_v21;
                DROP TABLE asid_fold_checkpoints_v21;

                ALTER TABLE device_fold_checkpoints RENAME TO device_fold_checkpoints_v21;
                CREATE TABLE device_fold_checkpoints (
                    app_id      TEXT NOT NULL,
                    device_id   TEXT NOT NULL,
                    level       INTEGER NOT NULL CHECK (level BETWEEN 0 AND 15),
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
                    from_seq    INTEGER NOT NULL CHECK (from_seq >= 1),
                    written_seq INTEGER NOT NULL CHECK (written_seq >= from_seq),
                    PRIMARY KEY (app_id, device_id, level),
                    CHECK ((mode = 'logged_out') = (asid IS NULL))
                ) STRICT, WITHOUT ROWID;
                INSERT INTO device_fold_checkpoints
                    SELECT app_id, device_id, 0, mode, asid, first_at, first_event, last_at, last_event, logins,
                        logouts, anomalies, last_login_tracking, logout_since_login, from_seq, written_seq
                    FROM device_fold_checkpoints_v21;
                DROP TABLE device_fold_checkpoints_v21;
                """)
        }
        return migrator
    }
}
