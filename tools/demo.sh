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

say "start an in-process Kafka cluster (librdkafka's mock cluster, 16 partitions)"
"$BIN/idrecon" dev-broker --partitions 16 > "$DIR/broker.txt" 2> "$DIR/broker.log" &
broker_pid=$!
trap 'kill $broker_pid $consumer_pid 2>/dev/null || true' EXIT
consumer_pid=
for _ in $(seq 50); do [ -s "$DIR/broker.txt" ] && break; sleep 0.1; done
BROKERS=$(head -1 "$DIR/broker.txt")
echo "bootstrap: $BROKERS"

say "consume (in the background) while producing: offsets live in SQLite, one transaction per batch"
# The mock coordinator waits out a departed member's session; a short session keeps the demo quick.
"$BIN/idrecon" consume --brokers "$BROKERS" --topic login-events --group demo --db "$DB" \
  --metrics-address 127.0.0.1:0 -X session.timeout.ms=6000 -X heartbeat.interval.ms=500 2> "$DIR/consume.log" &
consumer_pid=$!
"$BIN/idrecon" produce "$DIR/events.jsonl" --brokers "$BROKERS" --topic login-events
lines=$(wc -l < "$DIR/events.jsonl")
offsets() { "$BIN/idrecon" stats --db "$DB" --format csv 2>/dev/null | awk -F, '/^position.kafka:/ {s += $2} END {print s + 0}'; }
for _ in $(seq 600); do [ "$(offsets)" -ge "$lines" ] && break; sleep 0.2; done
metrics=$(grep -o 'http://[0-9.:]*/metrics' "$DIR/consume.log" | head -1)
if [ -n "$metrics" ] && command -v curl >/dev/null; then
  say "the running consumer's Prometheus metrics and readiness"
  printf '$ curl %s\n' "$metrics"
  scrape=$(curl -s "$metrics")
  grep -E '^idrecon_(records_(read|appended|duplicate)_total|commit_duration_seconds_count|seconds_since)' <<<"$scrape"
  grep -m2 '^idrecon_partition_lag_records' <<<"$scrape"
  echo "… ($(grep -c '^idrecon_' <<<"$scrape") samples)"
  printf '$ curl %s\n' "${metrics%/metrics}/readyz"
  curl -s "${metrics%/metrics}/readyz"
fi
echo "all $lines records consumed; stopping the consumer with SIGTERM (commits, leaves the group, exits 0)"
kill -TERM $consumer_pid && wait $consumer_pid
consumer_pid=

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
say "compliance audit: Graph-API calls judged at their own time"
{
  echo "{\"called_at\":\"2026-11-01T00:00:00Z\",\"asid\":\"$a\",\"endpoint\":\"/me\"}"
  echo "{\"called_at\":\"2026-11-02T12:00:00Z\",\"asid\":\"$limited\",\"endpoint\":\"/me/friends\"}"
  echo "{\"called_at\":\"2026-11-02T12:00:00Z\",\"asid\":\"$b\",\"endpoint\":\"/me\"}"
} > "$DIR/calls.jsonl"
cat "$DIR/calls.jsonl"
run audit calls "$DIR/calls.jsonl" --db "$DB" --scope identity --format table || echo "(exit $?: violations found)"

say "replay --verify: projections rebuilt from the log equal the live ones"
run replay --verify --db "$DB" --format table
say "exports (first lines)"
for kind in identities devices friends access; do "$BIN/idrecon" export $kind --db "$DB" | head -2; done
