#!/usr/bin/env python3
"""Benchmark baseline: what a team would write by hand. Parses JSON lines with Python's
json and inserts them into SQLite in batched transactions; no validation, no projections.
Usage: baseline_ingest.py EVENTS.jsonl DB.sqlite [BATCH]"""
import json
import sqlite3
import sys

path, db_path = sys.argv[1], sys.argv[2]
batch_size = int(sys.argv[3]) if len(sys.argv) > 3 else 4000
db = sqlite3.connect(db_path)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=NORMAL")
db.execute("""CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY, event_id TEXT UNIQUE, occurred_at TEXT, app_id TEXT,
    device_id TEXT, asid TEXT, tracking TEXT, payload TEXT)""")
rows, bad = [], 0
sql = "INSERT OR IGNORE INTO events (event_id, occurred_at, app_id, device_id, asid, tracking, payload) VALUES (?,?,?,?,?,?,?)"
with open(path, "rb") as f:
    for line in f:
        try:
            e = json.loads(line)
            rows.append((e["event_id"], e["occurred_at"], e["app_id"], e["device_id"], e.get("asid"), e.get("tracking"), line))
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        if len(rows) >= batch_size:
            with db:
                db.executemany(sql, rows)
            rows.clear()
with db:
    db.executemany(sql, rows)
print(json.dumps({"bad": bad}))
