#!/usr/bin/env python3
"""Probe for the log's uniqueness checks: what random keys (UUID event IDs, an SDK's nonces) cost
per appended event as the log grows, kept in one UNIQUE B-tree (today's `events.event_id`) or in
levels of sorted runs (a log-structured merge in one SQLite table).

Usage: unique_keys_probe.py DIR --keys N [--mode btree|levels] [--batch 64000]
Appends N random UUID keys, a transaction per batch, in a new database in DIR (16 KiB pages, WAL,
a 32 MB page cache, a checkpoint each 256 MB of WAL: idrecon's settings) and prints, for each
million keys, the seconds and the bytes this process wrote (/proc/self/io), as JSON lines.

- btree: `CREATE TABLE ev(seq INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE)`, `INSERT OR IGNORE`.
- levels: `ev` without UNIQUE and `ids(level, key, seq)` keyed by (level, key): a new key is looked
  up in every level and inserted into level 0; a level over its capacity (2^18 keys at level 0,
  8 times the level before above it) is merged into the next one in key order, in the batch's
  transaction. Only level 0 takes random inserts, and it stays small."""
import argparse, json, os, random, sqlite3, time

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--keys", type=int, required=True)
ap.add_argument("--mode", choices=["btree", "levels"], default="btree")
ap.add_argument("--batch", type=int, default=64_000)
a = ap.parse_args()

LEVEL0, FANOUT = 1 << 18, 8
path = os.path.join(a.dir, f"probe-{a.mode}.sqlite")
for suffix in ("", "-wal", "-shm"):
    if os.path.exists(path + suffix):
        os.remove(path + suffix)
db = sqlite3.connect(path, isolation_level=None)
for pragma in ("page_size = 16384", "journal_mode = WAL", "synchronous = NORMAL", "cache_size = -32768",
               "wal_autocheckpoint = 16384"):
    db.execute("PRAGMA " + pragma)
if a.mode == "btree":
    db.execute("CREATE TABLE ev(seq INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE)")
else:
    db.execute("CREATE TABLE ev(seq INTEGER PRIMARY KEY, key TEXT NOT NULL)")
    db.execute("CREATE TABLE ids(level INTEGER NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, "
               "PRIMARY KEY (level, key)) WITHOUT ROWID")
sizes = [0] * 8  # keys per level


def written():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("write_bytes"))


def merge(level):
    """Merges `level` into the next one, in key order, then the next one if it is over capacity."""
    db.execute("INSERT INTO ids (level, key, seq) SELECT ?, key, seq FROM ids WHERE level = ? ORDER BY key",
               (level + 1, level))
    db.execute("DELETE FROM ids WHERE level = ?", (level,))
    sizes[level + 1] += sizes[level]
    sizes[level] = 0
    if sizes[level + 1] > LEVEL0 * FANOUT ** (level + 1):
        merge(level + 1)


rng = random.Random(1)
seq, start, bytes0, mark, printed = 0, time.monotonic(), written(), time.monotonic(), 0
while seq < a.keys:
    n = min(a.batch, a.keys - seq)
    keys = ["%08x-%04x-4%03x-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
                                             rng.getrandbits(16), rng.getrandbits(48)) for _ in range(n)]
    db.execute("BEGIN")
    if a.mode == "btree":
        db.executemany("INSERT OR IGNORE INTO ev (key) VALUES (?)", ((k,) for k in keys))
    else:
        levels = [i for i, size in enumerate(sizes) if size > 0]
        probe = "SELECT 1 FROM ids WHERE level IN (%s) AND key = ?" % ",".join(map(str, levels)) if levels else None
        fresh = []
        for k in keys:
            if probe is None or db.execute(probe, (k,)).fetchone() is None:
                fresh.append(k)
        first = seq + 1
        db.executemany("INSERT INTO ev (key) VALUES (?)", ((k,) for k in fresh))
        db.executemany("INSERT INTO ids (level, key, seq) VALUES (0, ?, ?)",
                       ((k, first + i) for i, k in enumerate(fresh)))
        sizes[0] += len(fresh)
        if sizes[0] >= LEVEL0:
            merge(0)
    db.execute("COMMIT")
    before = seq
    seq += n
    if seq // 1_000_000 > before // 1_000_000 or seq == a.keys:
        now, w = time.monotonic(), written()
        print(json.dumps({"mode": a.mode, "keys": seq, "seconds": round(now - mark, 2),
                          "bytes_per_key": round((w - bytes0) / (seq - printed)),
                          "keys_per_level": {i: size for i, size in enumerate(sizes) if size}}),
              flush=True)
        mark, bytes0, printed = now, w, seq
db.close()
print(json.dumps({"mode": a.mode, "keys": a.keys, "total_seconds": round(time.monotonic() - start, 1),
                  "file_bytes": os.path.getsize(path)}), flush=True)
