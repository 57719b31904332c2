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

say "consume (in the background) while producing: offsets live in SQLite, one transaction per batch;"
echo "access changes and identity merges go to the change feed topic idrecon-changes, each once"
# The mock coordinator waits out a departed member's session; a short session keeps the demo quick.
"$BIN/idrecon" consume --brokers "$BROKERS" --topic login-events --group demo --db "$DB" \
  --changes-topic idrecon-changes \
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
  # The counters follow the commits: wait until every record read is counted as appended,
  # duplicate or quarantined.
  for _ in $(seq 100); do
    scrape=$(curl -s "$metrics")
    counted=$(awk '/^idrecon_records_(appended|duplicate|quarantined)_total[ {]/ {s += $NF} END {print int(s)}' <<<"$scrape")
    [ "${counted:-0}" -ge "$lines" ] && break; sleep 0.2
  done
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
printf '$ idrecon stats --db %s --format table\n' "$DB"
# Sixteen partitions' positions would fill the screen: the first two and a count.
"$BIN/idrecon" stats --db "$DB" --format table | awk '/^position\./ { if (++p > 2) next } { print } END { if (p > 2) print "… (" p - 2 " more partitions)" }'
echo "(The manifest counts the file in order. Kafka spreads it over 16 partitions by device, so of two"
echo " records that conflict — a duplicate and its original, two uses of a nonce — either may arrive"
echo " first: duplicates and some quarantine counts can differ from the manifest's by a few.)"
say "quarantine (the first 5; 'quarantine list --code CODE' lists one kind)"
run quarantine list --db "$DB" --limit 5 --format table

# An identity with several members, and two of its ASIDs.
line=$("$BIN/idrecon" export identities --db "$DB" | grep -m1 -E '"asids":\["[0-9]+","[0-9]+","[0-9]+"' || true)
a=$(sed -E 's/.*"asids":\["([0-9]+)".*/\1/' <<<"$line")
b=$(sed -E 's/.*"asids":\["[0-9]+","([0-9]+)".*/\1/' <<<"$line")
say "user: who is ASID $a"
run user "$a" --db "$DB" --format table
say "explain: why $a and $b are one person"
run explain "$a" "$b" --db "$DB" --format table
say "friends of $a, with their Graph-API access (first 8)"
run friends "$a" --db "$DB" --format table | head -9

# ASIDs in each access state after the whole stream, and one allowed ASID whose identity
# has a limited member (what `audit --scope identity` flags).
"$BIN/idrecon" export access --db "$DB" --format csv > "$DIR/access.csv"
limited=$(awk -F, '$2 == "forbidden_limited" {print $1; exit}' "$DIR/access.csv")
unknown=$(awk -F, '$2 == "forbidden_unknown" {print $1; exit}' "$DIR/access.csv")
member=$(sqlite3 :memory: -cmd ".mode csv" -cmd ".import $DIR/access.csv access" "ATTACH '$DB' AS d;
  SELECT m.asid FROM d.asids m JOIN d.asids o ON o.user_id = m.user_id AND o.asid <> m.asid
  JOIN access am ON am.asid = m.asid AND am.state = 'allowed' JOIN access ao ON ao.asid = o.asid AND ao.state = 'forbidden_limited'
  LIMIT 1;")
start=$("$BIN/idrecon" stats --db "$DB" --format csv | awk -F, '$1 == "first_event_at" {print $2}')
say "access: now, and at the stream's first event ($start)"
run access $(printf '%s\n' "$a" "$b" "$limited" "$unknown" | awk '!seen[$0]++') --db "$DB" --format table
run access "$limited" --as-of "$start" --db "$DB" --format table || echo "(exit 1: not seen yet at that time)"
say "compliance audit: Graph-API calls judged at their own time (--strict --scope identity)"
after=2027-01-01T00:00:00Z
{
  echo "{\"called_at\":\"$after\",\"asid\":\"$limited\",\"endpoint\":\"/me/friends\"}"
  echo "{\"called_at\":\"$after\",\"asid\":\"$unknown\",\"endpoint\":\"/me\"}"
  echo "{\"called_at\":\"$after\",\"asid\":\"$member\",\"endpoint\":\"/me/friends\"}"
  echo "{\"called_at\":\"$start\",\"asid\":\"$limited\",\"endpoint\":\"/me\"}"
} > "$DIR/calls.jsonl"
cat "$DIR/calls.jsonl"
run audit calls "$DIR/calls.jsonl" --db "$DB" --strict --scope identity --format table || echo "(exit $?: violations found)"

say "replay --verify: projections rebuilt from the log equal the live ones"
run replay --verify --db "$DB" --format table
say "exports (first lines)"
for kind in identities devices friends access; do "$BIN/idrecon" export $kind --db "$DB" | head -2; done
