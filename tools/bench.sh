#!/usr/bin/env bash
# Benchmarks on one machine in one run: the hand-written Python baseline vs idrecon ingest.
# EVENTS=N (default 1000000); --quick for a 100k smoke run. Writes .bench/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${EVENTS:-1000000}
[ "${1:-}" = "--quick" ] && EVENTS=100000
BIN=.build/release
OUT=.bench
mkdir -p "$OUT"
command -v /usr/bin/time >/dev/null || { echo "installing time"; ${SUDO:-$([ "$(id -u)" = 0 ] || echo sudo)} apt-get install -y -qq time; }

events="$OUT/events-$EVENTS.jsonl"
if [ ! -s "$events" ]; then
  echo "generating $EVENTS events into $events (cached)"
  "$BIN/idrecon-gen" --events "$EVENTS" --seed 1 --output "$events" --manifest "$OUT/manifest-$EVENTS.json"
fi
lines=$(wc -l < "$events")

measure() { # name, command...: prints "seconds peak_kb"
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$OUT/$name.time" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err" || { cat "$OUT/$name.err"; exit 1; }
  cat "$OUT/$name.time" | tail -1
}

rm -f "$OUT"/baseline.sqlite* "$OUT"/ingest.sqlite*
read -r base_s base_kb < <(measure baseline python3 tools/baseline_ingest.py "$events" "$OUT/baseline.sqlite")
read -r ing_s ing_kb < <(measure ingest "$BIN/idrecon" ingest "$events" --db "$OUT/ingest.sqlite" --format json)
db_bytes=$(stat -c %s "$OUT/ingest.sqlite")

python3 - "$lines" "$base_s" "$base_kb" "$ing_s" "$ing_kb" "$db_bytes" "$OUT/results.json" <<'PY'
import json, sys, platform, os
lines, bs, bk, is_, ik, dbb, out = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
r = {
    "lines": lines,
    "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    "baseline_events_per_s": round(lines / bs), "baseline_peak_rss_mb": round(bk / 1024, 1),
    "ingest_events_per_s": round(lines / is_), "ingest_peak_rss_mb": round(ik / 1024, 1),
    "ingest_over_baseline": round(bs / is_, 2), "db_bytes_per_event": round(dbb / lines, 1),
}
json.dump(r, open(out, "w"), indent=2)
print(f"{'measure':<28}{'value':>14}")
for k, v in r.items():
    print(f"{k:<28}{v!s:>14}")
PY
