#!/usr/bin/env python3
"""Writes N Graph-API calls as JSON lines for audit benchmarks: ASIDs drawn from an
`idrecon export access` file (plus a few never seen), times spread over the
stream's time range (START_MS..END_MS, UTC milliseconds; default its first three days).
Usage: gen_calls.py ACCESS_EXPORT N OUT [SEED [START_MS END_MS]]"""
import json
import random
import sys
import time

access, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 7)
asids = [json.loads(line)["asid"] for line in open(access)]
start = int(sys.argv[5]) // 1000 if len(sys.argv) > 6 else 1793491200  # 2026-11-01T00:00:00Z
span = (int(sys.argv[6]) // 1000 - start + 1) if len(sys.argv) > 6 else 3 * 86400
with open(out, "w") as f:
    for i in range(n):
        asid = rng.choice(asids) if rng.random() > 0.01 else str(900000000000000 + i)
        t = start + rng.randrange(span)
        called_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
        f.write(json.dumps({"called_at": called_at, "asid": asid, "endpoint": "/me"}) + "\n")
