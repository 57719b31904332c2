#!/usr/bin/env python3
"""make bench: one machine, one run, the same generated events for every contender.

Usage: tools/bench.py [--events N] [--quick]
Prints a table and writes .bench/results.json (and results-N.json). Needs release builds of idrecon,
idrecon-gen and idrecon-bench (the Makefile's bench target builds them)."""
import argparse
import contextlib, json, math, os, platform, re, shutil, signal, sqlite3, statistics, subprocess, sys, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".build", "release")
OUT = os.path.join(ROOT, ".bench")


WRITTEN = {}  # bytes each measured process wrote to storage, by name
FREE_BEFORE = {}  # MB of memory free when each measured step started (`settle`)


def reap(name, proc):
    """Waits for proc; returns (exit code, peak RSS MB) and records the bytes it wrote to storage:
    the kernel's per-task I/O accounting (`write_bytes` of /proc/PID/io, which getrusage reports as
    ru_oublock 512-byte blocks), so SQLite's WAL writes and checkpoints are all counted."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    WRITTEN[name] = usage.ru_oublock * 512
    return proc.returncode, usage.ru_maxrss / 1024


def quiesce(keep=(), skip=()):
    """Writes back every dirty page before a step is measured: otherwise a step pays for the
    previous one's writeback (the 10M baseline and raw append leave gigabytes of dirty pages,
    which the kernel throttled the following ingest's writes behind). Then `settle`s the memory."""
    os.sync()
    return settle(keep, skip)


def memory_free_mb():
    with open("/proc/meminfo") as f:
        return int(re.search(r"MemFree:\s+(\d+) kB", f.read()).group(1)) / 1024


def settle(keep=(), skip=(), target_mb=1024):
    """Fills the page cache with the bench's own files (read through by `cat`, largest first) until
    less than target_mb of memory is free, so that every step writes into memory the kernel
    recycles. On this VM the first write into memory the guest had freed (and reported to its host)
    costs about 2 s of system CPU per GB, ten times a write into a full page cache (`dd` of 3 GB:
    6.4-7.2 s of system time against 0.6 s; schemas/performance.md, "The VM's fresh memory"): a
    step that wrote more than the memory freed before it paid for it, so a 10M `ingest` run after
    the bench deleted its old databases paid ~17 s that the 1M `ingest` at the end, in a full
    cache, did not. The step's inputs (`keep`) are read last, so that they stay cached; `skip` (a
    cold replay's log) is not read. Returns the MB free afterwards (`free_mb_before`, per step)."""
    files = sorted((os.path.join(OUT, f) for f in os.listdir(OUT)), key=lambda f: -os.path.getsize(f))
    for path in files:
        if memory_free_mb() < target_mb:
            break
        if os.path.isfile(path) and not path.endswith(("-wal", "-shm", "-lock")) and path not in (*keep, *skip):
            subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    grow_filler(target_mb)
    for path in keep:
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    return memory_free_mb()


FILLER = os.path.join(OUT, "filler")


def grow_filler(target_mb, disk_reserve_gb=16):
    """When the bench's own files are too small to fill the page cache (a 1M run's are about 4 GB,
    this machine has 24 GB), writes zeros to `filler` until less than target_mb is free, then
    writes them back (outside every clock): the 1M steps ran with 5-9 GB free, into the VM's fresh
    memory, which the 10M steps never did. Leaves disk_reserve_gb free for the steps; the bench
    deletes the filler when it ends, and a killed run's when the next one starts."""
    grow_mb = int(memory_free_mb() - target_mb)
    room_mb = int(shutil.disk_usage(OUT).free / 2**20 - disk_reserve_gb * 1024)
    grow_mb = min(grow_mb, room_mb)
    if grow_mb < 256:
        return
    subprocess.run(["dd", "if=/dev/zero", f"of={FILLER}", "bs=1M", f"count={grow_mb}", "oflag=append",
                    "conv=notrunc", "status=none"], check=True)
    os.sync()


def uncached(*paths):
    """Drops the files' pages from the page cache (after `quiesce` they are clean, so no root is
    needed: `dd iflag=nocache` advises POSIX_FADV_DONTNEED), so that the next step reads them from
    disk. Done in a process of its own: the harness never opens a database file itself."""
    quiesce(skip=paths)
    for path in paths:
        if os.path.exists(path):
            subprocess.run(["dd", f"if={path}", "iflag=nocache", "count=0", "status=none"], check=True)


def cached(*paths):
    """Reads the files through once (in a process of its own), so that the next step finds them
    in the page cache: the first replay after a cold one still read part of the log from disk
    (10M: 37.6 s, then 35.5 s)."""
    for path in paths:
        if os.path.exists(path):
            subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)


def replay_rates(db_path, name):
    """A replay of db_path from a cold page cache (its pages dropped first: how a nightly replay
    finds a log that the day's other work pushed out), then again with the log cached (read
    through first). The steps
    before leave a log more or less cached (at 10M the `consume` before it writes 9 GB), so either
    measure is only comparable at both sizes when both are taken alike. Returns (cold ev/s,
    cached ev/s, the higher peak RSS MB of the two)."""
    rates, rss = [], 0
    for cold in (True, False):
        (uncached if cold else cached)(db_path)
        _, peak, _, err = timed(name, [os.path.join(BIN, "idrecon"), "replay", "--db", db_path, "--format", "json"],
                                **({"skip": (db_path,)} if cold else {"keep": (db_path,)}))
        rss = max(rss, peak)
        m = re.search(r"(\d+) events in ([\d.]+) s", err)
        rates.append(int(m.group(1)) / float(m.group(2)))
    return rates[0], rates[1], rss


def timed(name, cmd, started=None, keep=(), skip=(), **kw):
    """Runs cmd after `quiesce` (keep, skip: `settle`'s); returns (wall seconds, peak RSS MB, stdout,
    stderr). `started` is called with the process's pid."""
    FREE_BEFORE[name] = quiesce(keep, skip)
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if started:
        started(p.pid)
    errors = []
    reader = threading.Thread(target=lambda: errors.append(p.stderr.read()))  # both pipes drain: no deadlock
    reader.start()
    out = p.stdout.read()
    reader.join()
    err = errors[0]
    code, rss = reap(name, p)
    wall = time.monotonic() - start
    if code != 0:
        sys.exit(f"{name} failed ({code}): {err.strip()[-2000:]}")
    return wall, rss, out, err


def read_only_value(path, sql, args=()):
    """The first column of the first row of sql on the database at path, read-only; None before the
    database or its tables exist (not created or migrated yet)."""
    if not os.path.exists(path):
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute(sql, args).fetchone()
            return row and row[0]
    except sqlite3.OperationalError:
        return None


def projections_level(path):
    """Whether the projections of the database at path have applied every logged event (a consumer's
    bulk build or catch-up done); False before it is created."""
    return bool(read_only_value(path, "SELECT applied_seq >= (SELECT coalesce(max(seq), 0) FROM events) FROM projection_meta"))


def committed_records(path, kind):
    """Records a consumer (kind "kafka") or a file ingest ("file") has committed to the database at
    path (its stored positions); 0 before it starts."""
    return read_only_value(path, "SELECT sum(records) FROM consumed_positions WHERE source LIKE ?", (kind + ":%",)) or 0


class Progress:
    """Samples a running ingest's committed records (read-only, every 0.1 s) to give the rate
    of each successive million records: whether the cost per event stays flat as the log grows."""

    def __init__(self, path):
        self.path, self.samples, self.stop, self.pid = path, [], threading.Event(), None
        self.cpu = []  # (records committed, user and system CPU seconds of the ingest so far)
        self.thread = threading.Thread(target=self.run)
        self.start = time.monotonic()
        self.thread.start()

    def attach(self, pid):
        """The ingest started: its clock starts here, after the step's `quiesce`."""
        self.pid, self.start = pid, time.monotonic()

    def process_cpu(self):
        """The ingest's user and system CPU seconds so far (all its threads); None once it has gone."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks = os.sysconf("SC_CLK_TCK")
            return int(fields[11]) / ticks, int(fields[12]) / ticks
        except (OSError, IndexError, ValueError, TypeError):
            return None

    def run(self):
        while not self.stop.wait(0.1):
            cpu = self.process_cpu() if self.pid else None
            done = committed_records(self.path, "file")
            self.samples.append((time.monotonic(), done))
            if cpu is not None:
                self.cpu.append((done, *cpu))

    def cpu_per_record(self, kinds=(1, 2)):
        """The ingest's CPU microseconds per record of each step `rates` took (`kinds`: 1 user, 2 the
        kernel's work for it, both by default): whether the cost per event stays flat when the wall
        rate, on a busy or noisy machine, does not say. Between the first samples at or past each
        step's end."""
        final = max((sample[0] for sample in self.cpu), default=0)
        out, previous = [], (0, 0.0)
        for goal in self.ends:
            sample = next(((s[0], sum(s[k] for k in kinds)) for s in self.cpu if s[0] >= min(goal, final)), None)
            if sample is None or sample[0] <= previous[0]:
                break
            out.append(1e6 * (sample[1] - previous[1]) / (sample[0] - previous[0]))
            previous = sample
        return out

    def rates(self, total, step=1_000_000):
        """Records per second of each step of `total` records, appending; and the seconds from the
        last commit to the end of the process (the projections' last catch-up or bulk build)."""
        self.stop.set()
        self.thread.join()
        final = max((done for _, done in self.samples), default=0)
        end = next((t for t, done in self.samples if done >= final), time.monotonic()) if final >= total else time.monotonic()
        self.finish_seconds = time.monotonic() - end
        # A step ends at the first commit that reaches it: its time is between the sample that saw it
        # and the one before (the middle is taken), its records those committed then. The commits come
        # every 64,000 records or so, ~0.3 s apart here: taken as if the records came one by one
        # between samples, each million's rate was off by up to ~6 %.
        marks = [(self.start, 0)]
        for k in range(1, total // step + 1):
            goal, before = k * step, self.start
            for t, done in self.samples:
                if done >= goal:
                    if done > marks[-1][1]:
                        marks.append(((before + t) / 2, done))
                    break
                before = t
            else:
                break
        rest = total - marks[-1][1]
        if 0 < rest < step // 2 and len(marks) > 1:
            marks.pop()  # a short tail joins the last step (it holds the final catch-up)
            rest = total - marks[-1][1]
        rates = [(d1 - d0) / (t1 - t0) for (t0, d0), (t1, d1) in zip(marks, marks[1:])]
        self.ends = [done for _, done in marks[1:]]  # the records at each step's end
        if rest > 0:
            rates.append(rest / (end - marks[-1][0]))
            self.ends.append(total)
        return rates


def audit_rate(db_path, access_export, n, calls_path):
    """Audits n generated calls against db_path; returns (calls/s, peak RSS MB)."""
    # Calls at random times over the whole stream (made anew: the database decides the range), so
    # that 1M and 10M audits judge the same mix of states.
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        first, last = conn.execute("SELECT min(occurred_at), max(occurred_at) FROM events").fetchone()
    subprocess.run(["python3", os.path.join(ROOT, "tools", "gen_calls.py"), access_export, str(n), calls_path, "7",
                    str(first), str(last)], check=True)
    start = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", os.path.join(OUT, "audit.time"), os.path.join(BIN, "idrecon"),
                        "audit", "calls", calls_path, "--db", db_path, "--strict", "--format", "csv"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"audit failed: {p.stderr}")
    return n / (time.monotonic() - start), int(open(os.path.join(OUT, "audit.time")).read().split()[-1]) / 1024


def wrk_run(url, env, seconds=10, connections=8, script=True):
    """Runs wrk with tools/wrk/access.lua (or a plain GET of url); returns (requests/s, p99 ms)."""
    lua = ["-s", os.path.join(ROOT, "tools", "wrk", "access.lua")] if script else []
    p = subprocess.run(["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds}s", "--latency", *lua, url],
                       capture_output=True, text=True, env={**os.environ, **env})
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", p.stdout).group(1))
    value, unit = re.search(r"99%\s+([\d.]+)(us|ms|s)", p.stdout).groups()
    return rps, float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


PACED_RATES = (5_000, 10_000, 20_000)


def paced_p99s(url, asids, seconds=5, connections=64):
    """GET /v1/access/{asid} for random ASIDs at fixed offered rates (tools/wrk/paced.c, built by
    bench.sh): the p99 *at* 5,000, 10,000 and issue 22's 20,000 requests/s, each request's latency
    counted from its intended start (wrk2's correction for coordinated omission), where wrk measures
    at saturation. The generator runs on the same two cores. Returns the p99s in ms."""
    paced = os.path.join(OUT, "paced")
    host = re.match(r"http://([\d.:]+)", url).group(1)
    p99s = []
    for rate in PACED_RATES:
        p = subprocess.run([paced, host, "/v1/access/", asids, str(rate), str(seconds), str(connections)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"paced failed: {p.stderr.strip()}")
        result = json.loads(p.stdout)
        if result["errors"] or result["non_2xx"]:
            sys.exit(f"paced: {result['errors']} errors, {result['non_2xx']} answers not 2xx")
        p99s.append(result["p99_ms"])
    return p99s


def api_rates(r, db_path):
    """The read API over the ingested database: GET one random ASID, POST 1,000 (wrk on the same
    machine, 8 connections, 10 s each). Skipped when wrk is missing."""
    if not shutil.which("wrk"):
        print("read API: skipped (apt-get install wrk)", file=sys.stderr)
        return
    print("read API: GET /v1/access/{asid} and POST /v1/access (1,000 ASIDs), wrk, 10 s each ...", file=sys.stderr)
    asids = os.path.join(OUT, "api-asids.txt")
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        with open(asids, "w") as f:
            f.writelines(row[0] + "\n" for row in conn.execute("SELECT asid FROM asids ORDER BY random() LIMIT 100000"))
    server = subprocess.Popen([os.path.join(BIN, "idrecon"), "serve", "--db", db_path, "--listen", "127.0.0.1:0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://[\d.:]+", server.stderr.readline()).group(0)
        r["api_get_rps"], r["api_get_p99_ms"] = wrk_run(url, {"ASIDS": asids})
        r["api_get_paced_p99_ms"] = paced_p99s(url, asids)
        r["api_post1000_rps"], r["api_post1000_p99_ms"] = wrk_run(url, {"ASIDS": asids, "BATCH": "1000"})
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def api_while_consuming(r, db_path):
    """The read API of a consumer while it ingests (issue 22's targets): `consume --api-address`
    on the 1M database, fed a second stream (seed 2, 2M events: at 1M a consumer fast enough finished it
    before the step's last loads) through a dev broker; wrk
    asks it GET one random ASID (8 connections) and POST 1,000 (one connection: a caller asking
    before a batch of calls) for 8 s each. The stream is produced before the consumer starts:
    a producer and a broker live on other machines, not on the API's two cores. The database
    is changed: this runs last."""
    if not shutil.which("wrk"):
        return
    print("read API while consume ingests (consume --api-address, a second stream produced) ...", file=sys.stderr)
    more = os.path.join(OUT, "events-seed2-2000000.jsonl")
    if not os.path.exists(more) or os.path.getsize(more) == 0:
        subprocess.run([os.path.join(BIN, "idrecon-gen"), "--events", "2000000", "--seed", "2", "--output", more,
                        "--manifest", os.devnull], check=True)
    floor_db = os.path.join(OUT, "floor.sqlite")  # the same database for the floor's own consumer
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as src, sqlite3.connect(floor_db) as dst:
        src.backup(dst)
    FREE_BEFORE["busy"] = quiesce(keep=(more,))
    asids = os.path.join(OUT, "api-asids.txt")
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        with open(asids, "w") as f:
            f.writelines(row[0] + "\n" for row in conn.execute("SELECT asid FROM asids ORDER BY random() LIMIT 100000"))
        before = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
    # 256 partitions: the embedded cluster keeps about 5 MB of each (the stream is about 800 MB).
    # It stands in for Kafka brokers, which run on machines of their own: at idle priority it serves
    # the consumer from the cores the API leaves, where at normal priority its thread delayed the API's
    # and the load generator's wake-ups by milliseconds (perf sched; schemas/performance.md, "The busy
    # GET's floor").
    broker = subprocess.Popen([os.path.join(BIN, "idrecon"), "dev-broker", "--partitions", "256", "--topic", "more"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              preexec_fn=lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)))
    bootstrap = broker.stdout.readline().strip()
    subprocess.run([os.path.join(BIN, "idrecon"), "produce", more, "--brokers", bootstrap, "--topic", "more"],
                   stderr=subprocess.DEVNULL, check=True)
    try:
        with busy_consumer(db_path, bootstrap, "idrecon-busy") as url:
            start, done = time.monotonic(), committed_records(db_path, "kafka")
            r["api_busy_get_rps"], r["api_busy_get_p99_ms"] = wrk_run(url, {"ASIDS": asids}, seconds=8)
            r["api_busy_get_paced_p99_ms"] = paced_p99s(url, asids)
            r["api_busy_post1000_rps"], r["api_busy_post1000_p99_ms"] = wrk_run(
                url, {"ASIDS": asids, "BATCH": "1000"}, seconds=8, connections=1)
            # The HTTP server alone (no database read), for the ceiling this machine leaves it.
            r["api_busy_healthz_rps"], r["api_busy_healthz_p99_ms"] = wrk_run(
                url.replace("/v1", "") + "/healthz", {}, seconds=8, script=False)
            r["api_busy_consume_eps"], r["api_busy_consume_still_running"] = consumed_since(db_path, start, done)
        floor_while_consuming(r, floor_db, bootstrap, asids)
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait()


@contextlib.contextmanager
def busy_consumer(db_path, bootstrap, group):
    """`consume --api-address` of the produced stream ("more") into db_path, in `group`; yields its
    API's URL once it has committed 20,000 records (ingestion then runs at idle priority, the API at
    normal), and stops it on leaving."""
    consumer = subprocess.Popen([os.path.join(BIN, "idrecon"), "consume", "--brokers", bootstrap, "--topic", "more",
                                 "--group", group, "--db", db_path, "--api-address", "127.0.0.1:0",
                                 "-X", "session.timeout.ms=6000", "--log-level", "warning"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        while url is None:
            line = consumer.stderr.readline()
            if not line:
                sys.exit("consume --api-address did not start")
            m = re.search(r"api: (http://[\d.:]+)", line)
            url = m and m.group(1)
        threading.Thread(target=consumer.stderr.read, daemon=True).start()
        while committed_records(db_path, "kafka") < 20_000:
            if consumer.poll() is not None:
                sys.exit("consume --api-address stopped before it had ingested 20,000 records")
            time.sleep(0.1)
        yield url
    finally:
        consumer.send_signal(signal.SIGTERM)
        consumer.wait(timeout=120)


def consumed_since(db_path, start, done):
    """The consumer's events/s since (start, done), and whether it was still ingesting (the stream
    is 1M events)."""
    ingested = committed_records(db_path, "kafka")
    return (ingested - done) / (time.monotonic() - start), ingested < 1_000_000


def floor_while_consuming(r, db_path, bootstrap, asids):
    """The floor this machine sets under the busy step's GET: a server that does no work
    (tools/wrk/floor.c, an epoll loop per core answering every request with the same bytes) asked
    as the API was, while a consumer of its own (another group, on a copy of the same database, its
    API listening and idle, so that ingestion runs at idle priority as beside the API) ingests the
    same stream. A p99 this server misses is the machine's: the load generator, the consumer and the
    server share two cores."""
    print("the floor: a server that does no work, while a consumer ingests ...", file=sys.stderr)
    server = subprocess.Popen([os.path.join(OUT, "floor")], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        with busy_consumer(db_path, bootstrap, "idrecon-floor"):
            start, done = time.monotonic(), committed_records(db_path, "kafka")
            r["floor_busy_get_rps"], r["floor_busy_get_p99_ms"] = wrk_run(url, {"ASIDS": asids}, seconds=8)
            r["floor_busy_get_paced_p99_ms"] = paced_p99s(url, asids)
            r["floor_busy_consume_eps"], r["floor_busy_consume_still_running"] = consumed_since(db_path, start, done)
    finally:
        server.terminate()
        server.wait()


def generated(n):
    """The cached generated stream of n events (seed 1) and its line count."""
    events = os.path.join(OUT, f"events-{n}.jsonl")
    if not os.path.exists(events) or os.path.getsize(events) == 0:
        print(f"generating {n} events into {events} (cached)", file=sys.stderr)
        subprocess.run([os.path.join(BIN, "idrecon-gen"), "--events", str(n), "--seed", "1", "--output", events,
                        "--manifest", os.path.join(OUT, f"manifest-{n}.json")], check=True)
    return events, sum(1 for _ in open(events, "rb"))


def idrecon(*args):
    return subprocess.run([os.path.join(BIN, "idrecon"), *args], capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="100k events smoke run")
    a = ap.parse_args()
    n = 100_000 if a.quick else a.events
    small = 1_000_000
    os.makedirs(OUT, exist_ok=True)
    events, lines = generated(n)
    for f in os.listdir(OUT):
        stale = f.endswith((".sqlite", ".sqlite-wal", ".sqlite-shm", ".open-lock", ".replay-lock"))
        if stale or f == os.path.basename(FILLER):
            os.remove(os.path.join(OUT, f))
    db = lambda name: os.path.join(OUT, name + ".sqlite")
    r = {"events": n, "lines": lines, "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"}

    print("baseline (Python json + sqlite3) ...", file=sys.stderr)
    wall, rss, _, _ = timed("baseline", ["python3", os.path.join(ROOT, "tools", "baseline_ingest.py"), events, db("baseline")],
                            keep=(events,))
    r["baseline_eps"], r["baseline_rss_mb"] = lines / wall, rss

    print("raw append (storage module, projections off) ...", file=sys.stderr)
    _, rss, out, _ = timed("raw", [os.path.join(BIN, "idrecon-bench"), "raw-append", events, db("raw")], keep=(events,))
    raw = json.loads(out)
    r["raw_append_eps"], r["raw_append_rss_mb"] = lines / raw["seconds"], rss

    def ingest_1m(name):
        """The 1M stream's `ingest` into a new database `name`, for the ratios: its rate."""
        events1, lines1 = generated(small)
        wall, _, _, _ = timed(name, [os.path.join(BIN, "idrecon"), "ingest", events1, "--db", db(name), "--format", "json"],
                              keep=(events1,))
        return lines1 / wall

    if n > small:
        # The 1M `ingest` right before and right after this one, and the ratio to their mean: the host's speed
        # drifts over minutes (the same 1M `ingest` alternated with a 10M one: 120k, 135k ev/s around 115k).
        print("idrecon ingest of the 1M stream, before the one measured (for the ratio) ...", file=sys.stderr)
        r["ingest_1m_before_eps"] = ingest_1m("ingest-1M-before")

    print("idrecon ingest (projections on) ...", file=sys.stderr)
    progress = Progress(db("ingest"))
    wall, rss, _, _ = timed("ingest", [os.path.join(BIN, "idrecon"), "ingest", events, "--db", db("ingest"), "--format", "json"],
                            started=progress.attach, keep=(events,))
    r["ingest_eps"], r["ingest_rss_mb"] = lines / wall, rss
    r["ingest_eps_per_million"] = progress.rates(lines)
    r["ingest_cpu_us_per_record_per_million"] = progress.cpu_per_record()  # the steps of `rates`, above
    # Apart: idrecon's own work, and the kernel's (on this VM the latter grows as the page cache
    # recycles pages left idle longer: schemas/performance.md, "User and system time per million").
    r["ingest_user_cpu_us_per_record_per_million"] = progress.cpu_per_record(kinds=(1,))
    r["ingest_system_cpu_us_per_record_per_million"] = progress.cpu_per_record(kinds=(2,))
    r["ingest_finish_seconds"] = progress.finish_seconds
    r["db_bytes_per_event"] = os.path.getsize(db("ingest")) / n
    if n > small:
        print("idrecon ingest of the 1M stream, after the one measured (for the ratio) ...", file=sys.stderr)
        r["ingest_1m_after_eps"] = ingest_1m("ingest-1M")
        r["ingest_1m_eps"] = (r["ingest_1m_before_eps"] + r["ingest_1m_after_eps"]) / 2

    print("idrecon consume from the embedded cluster, produced concurrently ...", file=sys.stderr)
    partitions = max(16, math.ceil(lines / 8000))
    FREE_BEFORE["consume"] = quiesce(keep=(events,))
    broker = subprocess.Popen([os.path.join(BIN, "idrecon"), "dev-broker", "--partitions", str(partitions)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    bootstrap = broker.stdout.readline().strip()
    consumer = subprocess.Popen([os.path.join(BIN, "idrecon"), "consume",
                                 "--brokers", bootstrap, "--topic", "login-events", "--db", db("consume"),
                                 "-X", "session.timeout.ms=6000", "--log-level", "warning"],
                                stderr=subprocess.DEVNULL)
    producer = subprocess.Popen([os.path.join(BIN, "idrecon"), "produce", events, "--brokers", bootstrap],
                                stderr=subprocess.DEVNULL)
    started = None
    # Progress is read straight from the consumer's database (read-only, WAL): spawning a
    # process per poll would take CPU from the consumer being measured. The clock stops when
    # every record is committed and the projections hold every event, as `ingest`'s does: a
    # consumer builds its projections in bulk once it has drained its backlog, so stopping at
    # the last commit left the build out of the rate and the peak whenever the last records came
    # before it (31-33k ev/s at ~237 MB when they came after it, 40-46k at ~141 MB otherwise).
    while True:
        done = committed_records(db("consume"), "kafka")
        if done > 0 and started is None:
            started = time.monotonic()
        if done >= lines and projections_level(db("consume")):
            break
        time.sleep(0.1)
    r["consume_eps"] = lines / (time.monotonic() - started)
    # Peak RSS of the consumer itself (VmHWM), read before it is stopped.
    hwm = re.search(r"VmHWM:\s+(\d+) kB", open(f"/proc/{consumer.pid}/status").read())
    r["consume_rss_mb"] = int(hwm.group(1)) / 1024
    producer.wait()
    consumer.send_signal(signal.SIGTERM)
    if reap("consume", consumer)[0] != 0:
        sys.exit("consume did not exit 0 on SIGTERM")
    broker.send_signal(signal.SIGTERM)
    broker.wait()

    if n > small:
        # Like the ingest's: the 1M replays right before and right after this one, and the ratio to their mean
        # (a 10M replay at 0.81x the 1M one of the run's end, DuckDB's rate 13 % below its previous run's).
        print("idrecon replay of the 1M database, before the one measured (for the ratio) ...", file=sys.stderr)
        replay_1m_before = replay_rates(db("ingest-1M"), "replay-1M-before")
    print("idrecon replay (cold, then cached) ...", file=sys.stderr)
    r["replay_cold_eps"], r["replay_eps"], r["replay_rss_mb"] = replay_rates(db("ingest"), "replay")
    if n > small:
        print("idrecon replay of the 1M database, after the one measured (for the ratio) ...", file=sys.stderr)
        replay_1m_after = replay_rates(db("ingest-1M"), "replay-1M")
        r["replay_1m_cold_eps_before_after"] = [replay_1m_before[0], replay_1m_after[0]]
        r["replay_1m_eps_before_after"] = [replay_1m_before[1], replay_1m_after[1]]
        r["replay_1m_cold_eps"] = sum(r["replay_1m_cold_eps_before_after"]) / 2
        r["replay_1m_eps"] = sum(r["replay_1m_eps_before_after"]) / 2

    print("DuckDB contender (the four exports from the accepted events, exported once) ...", file=sys.stderr)
    accepted = os.path.join(OUT, f"accepted-{n}.jsonl")
    with sqlite3.connect(f"file:{db('ingest')}?mode=ro", uri=True) as conn, open(accepted, "w") as f:
        for (payload,) in conn.execute("SELECT payload FROM event_payloads ORDER BY seq"):
            f.write(payload + "\n")
    duck_out = os.path.join(OUT, "duckdb")
    # Like the replay: from a cold page cache, then cached.
    for cold in (True, False):
        (uncached if cold else cached)(accepted)
        _, rss, out, _ = timed("duckdb", ["python3", os.path.join(ROOT, "tools", "duckdb_contender.py"), accepted, duck_out],
                               **({"skip": (accepted,)} if cold else {"keep": (accepted,)}))
        duck = json.loads(out)
        r["duckdb_cold_eps" if cold else "duckdb_eps"], r["duckdb_rss_mb"] = duck["events"] / duck["seconds"], rss
    r["duckdb_exports_equal"] = {}
    for kind in ("devices", "identities", "friends", "access"):
        ours = idrecon("export", kind, "--db", db("ingest"), "--format", "json").stdout.splitlines()
        with open(os.path.join(duck_out, kind + ".jsonl")) as f:
            theirs = f.read().splitlines()
        r["duckdb_exports_equal"][kind] = [json.loads(l) for l in ours] == [json.loads(l) for l in theirs]
    if not all(r["duckdb_exports_equal"].values()):
        print(f"warning: DuckDB's exports differ from idrecon's: {r['duckdb_exports_equal']}", file=sys.stderr)

    print("query latency (whole command, median of 20) ...", file=sys.stderr)
    ident = next(l for l in idrecon("export", "identities", "--db", db("ingest")).stdout.splitlines()
                 if len(json.loads(l)["asids"]) >= 2)
    asid_a, asid_b = json.loads(ident)["asids"][:2]
    limited = next(json.loads(l)["asid"] for l in idrecon("export", "access", "--db", db("ingest")).stdout.splitlines()
                   if "forbidden_limited" in l)
    queries = {
        "user": ["user", asid_a, "--format", "json"],
        "access_as_of": ["access", limited, asid_a, "--as-of", "2026-11-05T12:00:00Z", "--format", "json"],
        "explain": ["explain", asid_a, asid_b, "--format", "json"],
    }
    for name, args in queries.items():
        samples = []
        for _ in range(20):
            t = time.monotonic()
            p = subprocess.run([os.path.join(BIN, "idrecon"), *args, "--db", db("ingest")], capture_output=True)
            samples.append((time.monotonic() - t) * 1000)
            if p.returncode not in (0, 1):
                sys.exit(f"{name} failed: {p.stderr.decode()}")
        r[f"{name}_ms"] = statistics.median(samples)

    api_rates(r, db("ingest"))

    print("idrecon audit calls (one call per event, judged at its own time) ...", file=sys.stderr)
    access = os.path.join(OUT, f"access-{n}.jsonl")
    with open(access, "w") as f:
        f.write(idrecon("export", "access", "--db", db("ingest")).stdout)
    r["audit_calls_per_s"], r["audit_rss_mb"] = audit_rate(db("ingest"), access, n, os.path.join(OUT, f"calls-{n}.jsonl"))

    if n > small:
        # The same measures at 1M in this run, on the 1M stream: is the cost per event flat?
        print("at 1M, for the ratios: audit calls ...", file=sys.stderr)
        r["ingest_1m_written_bytes_per_event"] = WRITTEN["ingest-1M"] / small
        access1 = os.path.join(OUT, f"access-{small}.jsonl")
        with open(access1, "w") as f:
            f.write(idrecon("export", "access", "--db", db("ingest-1M")).stdout)
        r["audit_1m_calls_per_s"], _ = audit_rate(db("ingest-1M"), access1, small, os.path.join(OUT, f"calls-{small}.jsonl"))
        r["ingest_over_1m"] = r["ingest_eps"] / r["ingest_1m_eps"]
        r["replay_over_1m"] = r["replay_eps"] / r["replay_1m_eps"]
        r["replay_cold_over_1m"] = r["replay_cold_eps"] / r["replay_1m_cold_eps"]
        r["audit_over_1m"] = r["audit_calls_per_s"] / r["audit_1m_calls_per_s"]
        r["written_over_1m"] = (WRITTEN["ingest"] / n) / r["ingest_1m_written_bytes_per_event"]

    # Last: it changes the database it runs on (the 1M one of this run).
    api_while_consuming(r, db("ingest-1M") if n > small else db("ingest"))

    for name in ("baseline", "ingest", "consume", "replay"):
        r[f"{name}_written_bytes_per_event"] = WRITTEN[name] / n
    r["ingest_over_baseline"] = r["ingest_eps"] / r["baseline_eps"]
    r["ingest_over_raw_append"] = r["ingest_eps"] / r["raw_append_eps"]
    r["consume_over_ingest"] = r["consume_eps"] / r["ingest_eps"]
    r["replay_over_duckdb"] = r["replay_eps"] / r["duckdb_eps"]
    r["replay_cold_over_duckdb"] = r["replay_cold_eps"] / r["duckdb_cold_eps"]
    r["free_mb_before"] = {name: round(mb) for name, mb in FREE_BEFORE.items()}
    for name in ("results.json", f"results-{n}.json"):  # the latest, and the latest at this size
        json.dump(r, open(os.path.join(OUT, name), "w"), indent=2)

    rows = [
        ("baseline: Python json+sqlite3, batched", f"{r['baseline_eps']:,.0f} ev/s", f"{r['baseline_rss_mb']:.0f} MB"),
        ("raw append (storage, projections off)", f"{r['raw_append_eps']:,.0f} ev/s", f"{r['raw_append_rss_mb']:.0f} MB"),
        ("idrecon ingest (projections on)", f"{r['ingest_eps']:,.0f} ev/s", f"{r['ingest_rss_mb']:.0f} MB"),
        ("idrecon consume (embedded cluster)", f"{r['consume_eps']:,.0f} ev/s", f"{r['consume_rss_mb']:.0f} MB"),
        ("idrecon replay (log cached)", f"{r['replay_eps']:,.0f} ev/s", f"{r['replay_rss_mb']:.0f} MB"),
        ("idrecon replay (cold page cache)", f"{r['replay_cold_eps']:,.0f} ev/s", ""),
        ("DuckDB: four exports from accepted events", f"{r['duckdb_eps']:,.0f} ev/s", f"{r['duckdb_rss_mb']:.0f} MB"),
        ("DuckDB (cold page cache)", f"{r['duckdb_cold_eps']:,.0f} ev/s", ""),
        ("idrecon audit calls --strict", f"{r['audit_calls_per_s']:,.0f} calls/s", f"{r['audit_rss_mb']:.0f} MB"),
        ("user (median of 20)", f"{r['user_ms']:.1f} ms", ""),
        ("access --as-of (median of 20)", f"{r['access_as_of_ms']:.1f} ms", ""),
        ("explain (median of 20)", f"{r['explain_ms']:.1f} ms", ""),
        *([("API GET /v1/access (wrk, saturating): req/s · p99",
            f"{r['api_get_rps']:,.0f} · {r['api_get_p99_ms']:.2f} ms", ""),
           ("API GET paced at 5k · 10k · 20k/s: p99 (ms)", " · ".join(f"{x:.2f}" for x in r["api_get_paced_p99_ms"]),
            ""),
           ("API POST 1,000 ASIDs: req/s · p99", f"{r['api_post1000_rps']:,.0f} · {r['api_post1000_p99_ms']:.1f} ms", "")]
          if "api_get_rps" in r else []),
        *([("API while consume ingests: GET (wrk, saturating) req/s · p99",
            f"{r['api_busy_get_rps']:,.0f} · {r['api_busy_get_p99_ms']:.2f} ms", ""),
           ("API while consume ingests: GET paced at 5k · 10k · 20k/s: p99 (ms)",
            " · ".join(f"{x:.2f}" for x in r["api_busy_get_paced_p99_ms"]), ""),
           ("API while consume ingests: POST 1,000 (1 conn.) req/s · p99",
            f"{r['api_busy_post1000_rps']:,.0f} · {r['api_busy_post1000_p99_ms']:.1f} ms", ""),
           ("API while consume ingests: GET /healthz (no database)",
            f"{r['api_busy_healthz_rps']:,.0f} · {r['api_busy_healthz_p99_ms']:.2f} ms", ""),
           ("consume meanwhile", f"{r['api_busy_consume_eps']:,.0f} ev/s"
            + ("" if r["api_busy_consume_still_running"] else " (finished before wrk did)"), "")]
          if "api_busy_get_rps" in r else []),
        *([("the floor (a server doing no work) while consuming: GET (wrk) req/s · p99",
            f"{r['floor_busy_get_rps']:,.0f} · {r['floor_busy_get_p99_ms']:.2f} ms", ""),
           ("the floor: GET paced at 5k · 10k · 20k/s: p99 (ms)",
            " · ".join(f"{x:.2f}" for x in r["floor_busy_get_paced_p99_ms"]), ""),
           ("the floor's consumer meanwhile", f"{r['floor_busy_consume_eps']:,.0f} ev/s"
            + ("" if r["floor_busy_consume_still_running"] else " (finished before wrk did)"), "")]
          if "floor_busy_get_rps" in r else []),
        ("memory free when measured (settled): ingest · consume" + (" · ingest at 1M" if n > small else ""),
         " · ".join(f"{r['free_mb_before'].get(k, 0):,} MB" for k in ("ingest", "consume", "ingest-1M")[:3 if n > small else 2]),
         ""),
        ("database size", f"{r['db_bytes_per_event']:.0f} B/event", ""),
        *[(f"disk bytes written: {name}", f"{r[f'{name}_written_bytes_per_event']:,.0f} B/event", "")
          for name in ("baseline", "ingest", "consume", "replay")],
        ("ingest / baseline", f"{r['ingest_over_baseline']:.2f}x", ""),
        ("ingest / raw append", f"{r['ingest_over_raw_append']:.2f}x", ""),
        ("consume / ingest", f"{r['consume_over_ingest']:.2f}x", ""),
        ("replay / DuckDB (cached · cold)", f"{r['replay_over_duckdb']:.2f}x · {r['replay_cold_over_duckdb']:.2f}x", ""),
        ("DuckDB exports equal idrecon's", " ".join(k for k, v in r["duckdb_exports_equal"].items() if v) or "none", ""),
    ]
    rates = r["ingest_eps_per_million"]
    if len(rates) > 1:
        rows.append(("ingest, each million records appended", " ".join(f"{x / 1000:.1f}k" for x in rates), ""))
        rows.append(("ingest: last million / first", f"{rates[-1] / rates[0]:.2f}x", ""))
    cpu = r.get("ingest_cpu_us_per_record_per_million", [])
    if len(cpu) > 1:
        rows.append(("ingest CPU per record, each million (µs)", " ".join(f"{x:.1f}" for x in cpu), ""))
        rows.append(("ingest CPU per record: last million / first", f"{cpu[-1] / cpu[0]:.2f}x", ""))
        user = r.get("ingest_user_cpu_us_per_record_per_million", [])
        system = r.get("ingest_system_cpu_us_per_record_per_million", [])
        if len(user) > 1 and len(system) > 1:
            rows.append(("  of it user, each million (µs)", " ".join(f"{x:.1f}" for x in user), ""))
            rows.append(("  of it system, each million (µs)", " ".join(f"{x:.1f}" for x in system), ""))
            rows.append(("  user · system: last million / first",
                         f"{user[-1] / user[0]:.2f}x · {system[-1] / system[0]:.2f}x", ""))
    rows.append(("ingest: last commit to exit (projections)", f"{r['ingest_finish_seconds']:.1f} s", ""))
    if n > small:
        rows += [
            ("at 1M: ingest · replay (cached · cold; means) · audit",
             f"{r['ingest_1m_eps']:,.0f} · {r['replay_1m_eps']:,.0f} · "
             f"{r['replay_1m_cold_eps']:,.0f} · {r['audit_1m_calls_per_s']:,.0f}", ""),
            ("at 1M: ingest right before · after it", f"{r['ingest_1m_before_eps']:,.0f} · {r['ingest_1m_after_eps']:,.0f}", ""),
            ("at 1M: replay right before · after it (cached; cold)",
             " · ".join(f"{x:,.0f}" for x in r["replay_1m_eps_before_after"]) + "; "
             + " · ".join(f"{x:,.0f}" for x in r["replay_1m_cold_eps_before_after"]), ""),
            ("ingest / its 1M rate (their mean)", f"{r['ingest_over_1m']:.2f}x", ""),
            ("replay / its 1M rate (their means: cached · cold)",
             f"{r['replay_over_1m']:.2f}x · {r['replay_cold_over_1m']:.2f}x", ""),
            ("audit calls / its 1M rate", f"{r['audit_over_1m']:.2f}x", ""),
            ("ingest bytes written / 1M's", f"{r['written_over_1m']:.2f}x", ""),
        ]
    print(f"\n{n:,} events ({lines:,} lines) on {r['machine']}")
    print(f"| {'measure':<40} | {'value':>16} | {'peak RSS':>8} |\n|{'-'*42}|{'-'*18}|{'-'*10}|")
    for name, value, rss in rows:
        print(f"| {name:<40} | {value:>16} | {rss:>8} |")


if __name__ == "__main__":
    try:
        main()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(FILLER)
