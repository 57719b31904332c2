#!/usr/bin/env bash
# make demo: generate a realistic stream, ingest it, then show what idrecon answers.
set -eu  # no pipefail: `export | head` ends the exporter with SIGPIPE by design
cd "$(dirname "$0")/.."
BIN=.build/release
DIR=.demo
EVENTS=${DEMO_EVENTS:-100000}
DB=$DIR/idrecon.sqlite
mkdir -p "$DIR" && rm -f "$DB" "$DB"-*
say() { printf '\n\033[1m== %s ==\033[0m\n' "$*"; }
run() { printf '$ idrecon %s\n' "$*"; "$BIN/idrecon" "$@"; }

say "generate $EVENTS events (seeded, with duplicates, out-of-order arrival and bad records)"
"$BIN/idrecon-gen" --events "$EVENTS" --output "$DIR/events.jsonl" --manifest "$DIR/manifest.json"
cat "$DIR/manifest.json"

say "ingest: every line appended or quarantined, projections updated in the same transaction"
run ingest "$DIR/events.jsonl" --db "$DB" --format table
say "ingest again: nothing new"
run ingest "$DIR/events.jsonl" --db "$DB" --format table

say "stats"
run stats --db "$DB" --format table
say "quarantine (first 10 of each kind is in 'quarantine list --code CODE')"
run quarantine list --db "$DB" --limit 10 --format table

# An identity with several members, and two of its ASIDs.
line=$("$BIN/idrecon" export identities --db "$DB" | grep -m1 -E '"asids":\["[0-9]+","[0-9]+","[0-9]+"' || true)
a=$(sed -E 's/.*"asids":\["([0-9]+)".*/\1/' <<<"$line")
b=$(sed -E 's/.*"asids":\["[0-9]+","([0-9]+)".*/\1/' <<<"$line")
say "user: who is ASID $a"
run user "$a" --db "$DB" --format table
say "explain: why $a and $b are one person"
run explain "$a" "$b" --db "$DB" --format table
say "friends of $a, with their Graph-API access"
run friends "$a" --db "$DB" --format table
limited=$("$BIN/idrecon" export access --db "$DB" | grep -m1 forbidden_limited | sed -E 's/.*"asid":"([0-9]+)".*/\1/')
say "access: now and at the start of the stream"
run access "$a" "$b" "$limited" --db "$DB" --format table
run access "$limited" --as-of 2026-11-01T06:00:00Z --db "$DB" --format table || true
say "replay --verify: projections rebuilt from the log equal the live ones"
run replay --verify --db "$DB" --format table
say "exports (first lines)"
for kind in identities devices friends access; do "$BIN/idrecon" export $kind --db "$DB" | head -2; done
