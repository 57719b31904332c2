#!/usr/bin/env bash
# make bench: see tools/bench.py. EVENTS=N or --events N; --quick for 100k.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v /usr/bin/time >/dev/null || { echo "installing time"; $([ "$(id -u)" = 0 ] || echo sudo) apt-get install -y -qq time; }
command -v wrk >/dev/null || { echo "installing wrk (the read API's load)"; $([ "$(id -u)" = 0 ] || echo sudo) apt-get install -y -qq wrk; }
mkdir -p .bench && cc -O2 -o .bench/paced tools/wrk/paced.c  # the read API's load at a fixed rate
cc -O2 -pthread -o .bench/floor tools/wrk/floor.c  # a server that does no work: the machine's floor
python3 -c "import duckdb" 2>/dev/null || { echo "installing duckdb (PyPI) for the DuckDB contender"; python3 -m pip install --quiet duckdb; }
args=("$@")
[ -n "${EVENTS:-}" ] && args+=(--events "$EVENTS")
exec python3 tools/bench.py "${args[@]}"
