#!/usr/bin/env python3
"""The DuckDB contender of `make bench`: what a data team would write for a nightly batch.

Usage: duckdb_contender.py ACCEPTED.jsonl OUTDIR
Reads the accepted events (the log's canonical payloads, one JSON object per line) with
read_ndjson and computes SPEC section 5's four exports with window functions, arg_max and a
recursive CTE for the identity components, on 2 threads; writes OUTDIR/{devices,identities,
friends,access}.jsonl (one JSON object per line, in the export's order) and prints
{"events": N, "seconds": S}. The rules are those of the identity configuration the bench
database uses (the default: a key shared by more than 25 ASIDs links nothing, no blocklist)."""
import json, os, sys, time

import duckdb

MAX_ASIDS_PER_KEY = 25

SQL = r"""
CREATE TEMP TABLE ev AS
SELECT event_id, type, epoch_ms(occurred_at::TIMESTAMPTZ) AS ts, app_id, device_id, asid,
       coalesce(tracking, 'enabled') AS tracking, email, token_for_business AS tfb, friend_asids,
       coalesce(list_contains(declined_permissions, 'user_friends'), false) AS declines
FROM read_ndjson($path, columns = {event_id: 'VARCHAR', type: 'VARCHAR', occurred_at: 'VARCHAR', app_id: 'VARCHAR',
    device_id: 'VARCHAR', asid: 'VARCHAR', tracking: 'VARCHAR', email: 'VARCHAR', token_for_business: 'VARCHAR',
    friend_asids: 'VARCHAR[]', declined_permissions: 'VARCHAR[]'});

-- Devices: the latest event decides the mode; an anomaly is a login whose tracking differs from
-- the previous login's with no logout in between.
CREATE TEMP TABLE devices AS
WITH o AS (
    SELECT *, sum(CASE WHEN type = 'logout' THEN 1 ELSE 0 END) OVER (
               PARTITION BY app_id, device_id ORDER BY ts, event_id ROWS UNBOUNDED PRECEDING) AS logouts_upto,
           row_number() OVER (PARTITION BY app_id, device_id ORDER BY ts DESC, event_id DESC) AS from_end
    FROM ev),
l AS (
    SELECT app_id, device_id, tracking, logouts_upto,
           lag(tracking) OVER w AS prev_tracking, lag(logouts_upto) OVER w AS prev_logouts
    FROM o WHERE type = 'login'
    WINDOW w AS (PARTITION BY app_id, device_id ORDER BY ts, event_id)),
a AS (
    SELECT app_id, device_id,
           count(*) FILTER (WHERE prev_tracking IS NOT NULL AND prev_tracking <> tracking AND prev_logouts = logouts_upto) AS anomalies
    FROM l GROUP BY ALL)
SELECT o.app_id, o.device_id,
       CASE WHEN o.type = 'logout' THEN 'logged_out' WHEN o.tracking = 'limited' THEN 'limited' ELSE 'enabled' END AS mode,
       CASE WHEN o.type = 'logout' THEN NULL ELSE o.asid END AS asid,
       coalesce(a.anomalies, 0) AS anomalies
FROM o LEFT JOIN a USING (app_id, device_id) WHERE o.from_end = 1;

-- Identities: ASIDs linked by an e-mail (normalized, SHA-256) or token-for-business shared by at
-- most MAX ASIDs; user_id is u: + the member with the earliest login.
CREATE TEMP TABLE logins AS SELECT * FROM ev WHERE type = 'login' AND asid IS NOT NULL;
CREATE TEMP TABLE members AS SELECT asid, min((ts, event_id)) AS first FROM logins GROUP BY asid;
CREATE TEMP TABLE keys AS
SELECT DISTINCT asid, key FROM (
    SELECT asid, 'email:' || sha256(lower(trim(email, e' \t\n\r'))) AS key FROM logins WHERE email IS NOT NULL
    UNION ALL SELECT asid, 'tfb:' || tfb FROM logins WHERE tfb IS NOT NULL);
CREATE TEMP TABLE pairs AS
WITH linking AS (SELECT key FROM keys GROUP BY key HAVING count(*) <= $max)
SELECT a.asid AS x, b.asid AS y FROM keys a JOIN keys b USING (key) WHERE key IN (SELECT key FROM linking) AND a.asid <> b.asid;
CREATE TEMP TABLE components AS
WITH RECURSIVE cc(asid, root) AS (
    SELECT asid, asid FROM members
    UNION SELECT p.y, cc.root FROM cc JOIN pairs p ON p.x = cc.asid)
SELECT asid, min(root) AS root FROM cc GROUP BY asid;
CREATE TEMP TABLE identities AS
WITH users AS (
    SELECT c.root, 'u:' || arg_min(m.asid, (m.first, m.asid)) AS user_id
    FROM components c JOIN members m USING (asid) GROUP BY c.root),
ids AS (SELECT c.asid, u.user_id FROM components c JOIN users u USING (root)),
emails AS (
    SELECT i.user_id, list(DISTINCT substr(k.key, 7) ORDER BY substr(k.key, 7)) AS hashes
    FROM ids i JOIN keys k USING (asid) WHERE k.key LIKE 'email:%' GROUP BY i.user_id)
SELECT i.user_id, list(i.asid ORDER BY i.asid) AS asids, coalesce(any_value(e.hashes), []) AS email_sha256
FROM ids i LEFT JOIN emails e USING (user_id) GROUP BY i.user_id;

-- Friends: each ASID's latest friend list, unless a later login declined user_friends; an edge
-- while either side names the other.
CREATE TEMP TABLE friends AS
WITH snaps AS (
    SELECT asid, arg_max(friend_asids, (ts, event_id)) FILTER (WHERE friend_asids IS NOT NULL) AS list,
           max((ts, event_id)) FILTER (WHERE friend_asids IS NOT NULL) AS listed,
           max((ts, event_id)) FILTER (WHERE declines) AS declined
    FROM logins GROUP BY asid)
SELECT DISTINCT least(asid, f) AS a, greatest(asid, f) AS b
FROM snaps, unnest(list) AS t(f)
WHERE listed IS NOT NULL AND (declined IS NULL OR NOT listed < declined) AND f <> asid;

-- Access now: limited while a device holds the ASID in limited mode or its latest login was
-- limited; allowed after any other login; forbidden_unknown when only named in friend lists.
CREATE TEMP TABLE access AS
WITH latest AS (SELECT asid, arg_max(tracking, (ts, event_id)) AS tracking FROM logins GROUP BY asid),
held AS (SELECT DISTINCT asid FROM devices WHERE mode = 'limited'),
mentioned AS (SELECT DISTINCT unnest(friend_asids) AS asid FROM logins WHERE friend_asids IS NOT NULL),
everyone AS (SELECT asid FROM latest UNION SELECT asid FROM mentioned)
SELECT e.asid,
       CASE WHEN h.asid IS NOT NULL OR l.tracking = 'limited' THEN 'forbidden_limited'
            WHEN l.asid IS NOT NULL THEN 'allowed' ELSE 'forbidden_unknown' END AS state
FROM everyone e LEFT JOIN latest l USING (asid) LEFT JOIN held h USING (asid);
"""

ORDERS = {
    "devices": "app_id, device_id",
    "identities": "user_id",
    "friends": "a, b",
    "access": "asid",
}


def main():
    path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    start = time.monotonic()
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET preserve_insertion_order = false")
    for statement in SQL.replace("$max", str(MAX_ASIDS_PER_KEY)).split(";\n"):
        if statement.strip():
            con.execute(statement.replace("$path", "?"), [path] if "$path" in statement else [])
    for name, order in ORDERS.items():
        target = os.path.join(out, name + ".jsonl")
        con.execute(f"COPY (SELECT * FROM {name} ORDER BY {order}) TO '{target}' (FORMAT json)")
    seconds = time.monotonic() - start
    events = con.execute("SELECT count(*) FROM ev").fetchone()[0]
    print(json.dumps({"events": events, "seconds": seconds}))


if __name__ == "__main__":
    main()
