#!/usr/bin/env python3
"""hermes_assets benchmark: the side-by-side speed table on a realistic Hermes store.

Not a test: it measures, on a private copy of the store (never the original).
Stores are generated with the real Hermes writer (tools/gen_state_db.py) and
cached in --cache-dir (``<cache>/medium/state.db``, ``<cache>/large/state.db``);
the large one is a raw-SQL multiple of the medium one (tools/multiply_db.py).

    python bench/run.py                          # medium store, 3 interleaved rounds
    python bench/run.py --store large            # ~1M messages
    python bench/run.py --rounds 5 --json out.json
    python bench/run.py --warehouse s3           # the warehouse in a bucket (moto's S3 server on loopback)

Each round runs, one after the other (so a drift of the machine's speed hits
every contender alike), each as a whole process from its start:

  empty     `dg launch` of the three datasets on one day without sessions: Dagster's fixed cost
  all       `dg launch --assets '*' --partition-range` over every day of the store: the datasets and
            their analytics, one run, a fresh warehouse (what a history import from the UI runs)
  empty, all (dagster CLI)
            the same two runs through `dagster asset materialize -m hermes_assets.definitions`, the
            command the speed targets were first measured with: it starts without dg's own CLI
            (its scaffolding and AI commands, imported by every `dg` command), so its fixed cost is
            lower by that much
  ours      the same, the three datasets only
  floor     a plain SELECT of `sessions` and `messages` into Arrow, then one Parquet file each
  dlt       dlt's `sql_database` source, backend="pyarrow", the same two tables to Parquet
            (only when dlt is installed: `pip install -e '.[bench]'`)

then, once:

  library      read + project + stage the three datasets of every day (no Dagster): canonical rows/s
               (redaction on and off; the key folder made and its rule set parsed before the rounds)
  incremental  100 new messages through the real Hermes writer, then `dg launch` of that one day
  rerun        the backfill again, nothing changed            (--sections rerun)
  sensor       bench/sensor_bench.py's ticks                   (--sections sensor)

Times are min / median / max over the rounds. Memory is the peak of the summed
PSS (proportional set size: shared pages split between their sharers) of the
run's whole process tree, sampled every 50 ms. Figures depend on the machine's
load: quote them with the core count the header prints and the 1-minute load
averages the last line prints (before each round, the library and the one-day run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools"
PY = sys.executable
DG = str(Path(PY).with_name("dg"))
DAGSTER = str(Path(PY).with_name("dagster"))
#: `dagster asset materialize` of this project's definitions (a --select and partitions follow)
MATERIALIZE = [DAGSTER, "asset", "materialize", "-m", "hermes_assets.definitions"]
#: the three captured datasets (the analytics layer downstream is not part of a capture's figures)
CAPTURED = "hermes_sessions,hermes_messages,ai_gateway_messages_hermes"
EMPTY_DAY = "2024-01-01"  # before any generated store's history: a partition with no session
EXTRA_SECTIONS = ("rerun", "sensor")
#: every asset: the datasets and their analytics
EVERYTHING = "*"
#: the speed targets: (medium store, 1M-message store); None where none is set
TARGETS = {
    "all_vs_dlt": (3.0, 2.0),
    "backfill_s": (None, 30.0),
    "compute_vs_floor": (3.0, 2.0),
    "library_rows_per_s": (100_000, 150_000),
    "incremental_s": (3.0, None),
    "pss_mb": (400, 500),
}


# --------------------------------------------------------------------------
# measuring one command: wall time and the peak PSS of its process tree
# --------------------------------------------------------------------------


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in kB: RSS counts a shared page in each sharer, PSS splits it."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def _adopt_orphans() -> None:
    """Make this process the reaper of its descendants' orphans (Linux ``PR_SET_CHILD_SUBREAPER``): a
    worker pool's processes are children of a forkserver that the measured process never waits for,
    so without this their CPU time would reach no ``RUSAGE_CHILDREN`` (they are reparented to init)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _reap_orphans(deadline_s: float = 30.0) -> None:
    """Wait for the measured tree's orphans this process adopted, so their CPU time is counted."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def measure(cmd: list[str], env: dict | None = None, *, cwd: Path = REPO) -> dict:
    """Run ``cmd`` to its end: wall seconds, CPU seconds (user + system of the whole tree, the
    worker processes of a forkserver included: a figure the machine's load moves less than the
    wall time), the peak summed PSS and the peak summed RSS of its process tree (workers included)
    and the most processes it had at once; a failure stops the benchmark."""
    _adopt_orphans()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    out: list[tuple[str, str]] = []
    reader = threading.Thread(target=lambda: out.append(proc.communicate()), daemon=True)
    reader.start()
    peak_pss = peak_rss = procs = 0
    while proc.poll() is None:
        tree = _tree(proc.pid)
        memory = [_memory_kb(pid) for pid in tree]
        peak_rss = max(peak_rss, sum(rss for rss, _ in memory))
        peak_pss = max(peak_pss, sum(pss for _, pss in memory))
        procs = max(procs, len(tree))
        time.sleep(0.05)
    wall = time.perf_counter() - start
    reader.join()
    _reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    stdout, stderr = out[0] if out else ("", "")
    if proc.returncode != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}\n{stderr[-4000:]}")
    return {
        "seconds": wall,
        "cpu": cpu,
        "pss_mb": peak_pss / 1024,
        "rss_mb": peak_rss / 1024,
        "processes": procs,
        "stdout": stdout[-4000:],
    }


def last_json(result: dict) -> dict:
    return json.loads(result["stdout"].strip().splitlines()[-1])


# --------------------------------------------------------------------------
# stores
# --------------------------------------------------------------------------


def ensure_store(kind: str, cache: Path) -> Path:
    if kind not in ("medium", "large"):
        return Path(kind).resolve()
    medium = cache / "medium" / "state.db"
    if not medium.exists():
        print("generating the medium store (about 2.5 min) ...", file=sys.stderr)
        subprocess.run(
            [PY, str(TOOLS / "gen_state_db.py"), str(medium.parent), "--sessions", "4500", "--seed", "42"]
            + ["--days", "30"],
            check=True,
        )
    if kind == "medium":
        return medium
    large = cache / "large" / "state.db"
    if not large.exists():
        print("multiplying it into the large store ...", file=sys.stderr)
        subprocess.run(
            [PY, str(TOOLS / "multiply_db.py"), str(medium), str(large.parent), "--copies", "11"], check=True
        )
    return large


def ensure_messages(messages: int, cache: Path) -> Path:
    """A store of at least ``messages`` messages: the medium store multiplied by raw SQL
    (``tools/multiply_db.py``) as many times as it takes; 1,000,000 gives the large store."""
    medium = ensure_store("medium", cache)
    conn = sqlite3.connect(f"file:{medium}?mode=ro", uri=True)
    try:
        per_copy = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    copies = max(1, -(-messages // per_copy))
    if copies == 1:
        return medium
    if copies == 11:
        return ensure_store("large", cache)
    target = cache / f"x{copies}" / "state.db"
    if not target.exists():
        print(f"multiplying the medium store {copies} times ...", file=sys.stderr)
        subprocess.run(
            [PY, str(TOOLS / "multiply_db.py"), str(medium), str(target.parent), "--copies", str(copies)], check=True
        )
    return target


def store_facts(path: Path) -> dict:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sessions, lo, hi = conn.execute("SELECT count(*), min(started_at), max(started_at) FROM sessions").fetchone()
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()

    def day(s: float) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(s))

    return {"sessions": sessions, "messages": messages, "first_day": day(lo), "last_day": day(hi)}


def private_copy(store: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    target = into / "state.db"
    shutil.copyfile(store, target)
    for suffix in ("-wal", "-shm"):
        if Path(str(store) + suffix).exists():
            shutil.copyfile(str(store) + suffix, str(target) + suffix)
    return target


# --------------------------------------------------------------------------
# the contenders
# --------------------------------------------------------------------------

#: the library alone: plan + policy + read + project + stage of every day, no Dagster, no partition file
_LIBRARY = r"""
import json, os, sys, tempfile, time
t = time.perf_counter()
from hermes_assets.lib.capture import steps
from hermes_assets.lib.plan import capture_plan
from hermes_assets.lib.plan import policy
from hermes_assets.lib.redaction.redactor import RedactionConfig
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.warehouse.datasets import Warehouse
stores = [Store(sys.argv[1])]
# redaction on, as a capture runs by default (its key in a scratch folder, or in the folder the
# fourth argument names: where the rule set's parsed copy is kept between runs); "off": without it
scratch_key = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp()
plan = capture_plan.plan_capture(stores, [], user_home="/home/bench")
days = sorted({d for sp in plan.stores for d in sp.days.values() if d})
plan = capture_plan.plan_capture(stores, days, user_home="/home/bench")
plan = capture_plan.apply_usage_policy(plan, policy.PolicyResolver("/nonexistent/policy.json"))
redaction = None if sys.argv[3] == "off" else RedactionConfig(os.path.join(scratch_key, "redaction.key"))
ctx = ProjectionContext(user_home="/home/bench", now_s=plan.read_at, git=NoGit())
with tempfile.TemporaryDirectory() as scratch:  # an empty warehouse: every day is staged as its final file
    run = steps.project_rows(plan, ctx, Warehouse(os.path.join(scratch, "warehouse")),
                               staging=os.path.join(scratch, "run"), redaction=redaction, workers=int(sys.argv[2]))
rows = run.totals("ai_gateway_messages_hermes")[0]
print(json.dumps({"rows": rows, "seconds": time.perf_counter() - t}))
"""

#: a key folder as a home's first run leaves it: the key, the rule set's parsed copy, the compiled screen
_WARM_KEYS = r"""
import os, sys
from hermes_assets.lib.redaction.redactor import RedactionConfig
RedactionConfig(os.path.join(sys.argv[1], "redaction.key")).redactor().screen_column(["warm"])
"""

#: the floor: what any copy of these two tables into Parquet must do
_FLOOR = r"""
import json, os, sqlite3, sys, time
import pyarrow as pa, pyarrow.parquet as pq
path, out = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
rows = 0
for table in ("sessions", "messages"):
    cur = conn.execute(f"SELECT * FROM {table}")
    names = [d[0] for d in cur.description]
    parts = []
    while batch := cur.fetchmany(50_000):
        parts.append(pa.table(dict(zip(names, map(list, zip(*batch))))))
        rows += len(batch)
    # a column all NULL in one batch is typed null there: promoted to the others' type
    whole = pa.concat_tables(parts, promote_options="permissive")
    pq.write_table(whole, os.path.join(out, table + ".parquet"), compression="zstd")
print(json.dumps({"rows": rows}))
"""

#: dlt's SQL source with its Arrow backend, into Parquet files on the local filesystem
_DLT = r"""
import json, sys
import dlt
from dlt.sources.sql_database import sql_database
path, out = sys.argv[1], sys.argv[2]
source = sql_database(f"sqlite:///file:{path}?mode=ro&uri=true", table_names=["sessions", "messages"],
                      backend="pyarrow")
pipeline = dlt.pipeline(pipeline_name="bench", pipelines_dir=f"{out}/pipelines", dataset_name="hermes",
                        destination=dlt.destinations.filesystem(f"file://{out}/data"))
info = pipeline.run(source, loader_file_format="parquet")
print(json.dumps({"rows": sum(pipeline.last_trace.last_normalize_info.row_counts.get(t, 0)
                              for t in ("sessions", "messages"))}))
"""


def use_bytecode_caches() -> None:
    """Every contender runs as on a user's machine: Python's compiled modules are kept and reused
    (a shell that sets PYTHONDONTWRITEBYTECODE would make each process compile Dagster, dlt and
    this project again, seconds of a run); one process imports them all first."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    modules = ["hermes_assets.definitions", "dagster_dg_cli.cli", "dagster._cli", "pyarrow.parquet", "hermes_state"]
    if has_dlt():
        modules += ["dlt", "dlt.sources.sql_database", "dlt.destinations"]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)"
    subprocess.run([PY, "-c", code, *modules], capture_output=True, cwd=REPO)


def has_dlt() -> bool:
    return subprocess.run([PY, "-c", "import dlt.sources.sql_database"], capture_output=True).returncode == 0


def dlt_env(scratch: Path) -> dict:
    env = dict(os.environ)
    env.update(RUNTIME__DLTHUB_TELEMETRY="false", DLT_DATA_DIR=str(scratch / "dlt-home"))
    return env


def dagster_env(home: Path, store: Path, warehouse: str, start: str) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        HERMES_STATE_DB=str(store),
        HERMES_ASSETS_WAREHOUSE=str(warehouse),
        HERMES_ASSETS_START_DATE=start,
        HERMES_ASSETS_LOG_FORMAT="json",
    )
    return env


def launch(env: dict, *partition: str) -> dict:
    return measure([DG, "launch", "--assets", CAPTURED, *partition], env)


def gateway_rows(warehouse: str) -> int:
    import pyarrow.parquet as pq

    from hermes_assets.lib.warehouse.datasets import Warehouse

    wh = Warehouse(warehouse)
    rows = 0
    for day in wh.days("ai_gateway_messages_hermes"):
        with wh.storage.open_input(wh.path("ai_gateway_messages_hermes", day)) as f:
            rows += pq.ParquetFile(f).metadata.num_rows
    return rows


def start_s3() -> tuple[str, subprocess.Popen]:
    """moto's S3-compatible server on loopback, one bucket; -> (warehouse URI, server process)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [PY, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_EC2_METADATA_DISABLED="true")
    import pyarrow.fs as pafs

    endpoint = f"127.0.0.1:{port}"
    pafs.S3FileSystem(
        endpoint_override=endpoint, scheme="http", region="us-east-1", allow_bucket_creation=True
    ).create_dir("bench")
    return f"s3://bench/warehouse?endpoint_override={endpoint}&scheme=http&region=us-east-1", proc


def append_messages(store: Path, n: int) -> str:
    """Append ``n`` messages through the real writer to the newest session; return its day."""
    code = r"""
import sys, time
from pathlib import Path
from hermes_state import SessionDB
db = SessionDB(db_path=Path(sys.argv[1]))
sid, started = db._conn.execute("SELECT id, started_at FROM sessions ORDER BY started_at DESC LIMIT 1").fetchone()
for i in range(int(sys.argv[2])):
    db.append_message(sid, "user" if i % 2 == 0 else "assistant", f"benchmark message {i}")
db.close()
print(time.strftime("%Y-%m-%d", time.gmtime(started)))
"""
    out = subprocess.run(
        [PY, "-c", code, str(store), str(n)],
        capture_output=True,
        text=True,
        env={**os.environ, "HERMES_HOME": str(store.parent)},
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


# --------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------


def spread(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "all": values}


def fmt(s: dict, unit: str = "s", digits: int = 2) -> str:
    return f"{s['min']:.{digits}f} / {s['median']:.{digits}f} / {s['max']:.{digits}f} {unit}"


def rounds(args, store: Path, facts: dict, work: Path, warehouse_uri) -> dict:
    """The interleaved rounds: empty, all (each through dg, then the dagster CLI), ours, floor, dlt; each
    run with a fresh instance and warehouse."""
    times: dict[str, list[float]] = {
        "empty": [],
        "empty_dagster": [],
        "all": [],
        "all_dagster": [],
        "ours": [],
        "floor": [],
        "dlt": [],
    }
    cpu: dict[str, list[float]] = {name: [] for name in times}
    pss: dict[str, list[float]] = {"empty": [], "empty_dagster": [], "all": [], "all_dagster": [], "ours": []}
    rows = {}
    loads: list[float] = []
    with_dlt = has_dlt()
    day_range = f"{facts['first_day']}...{facts['last_day']}"
    for i in range(args.rounds):
        loads.append(os.getloadavg()[0])
        here = work / f"round{i}"
        warehouse = warehouse_uri(here)
        env = _workers(dagster_env(here / "dagster_home", store, warehouse, facts["first_day"]), args)
        r = launch({**env, "HERMES_ASSETS_START_DATE": EMPTY_DAY}, "--partition", EMPTY_DAY)
        _record(r, "empty", times, cpu, pss)
        # the same through the dagster CLI: its own instance and warehouse
        empty_env = dagster_env(here / "dagster_home_empty", store, warehouse_uri(work / f"round{i}-empty"), EMPTY_DAY)
        r = measure([*MATERIALIZE, "--select", CAPTURED, "--partition", EMPTY_DAY], _workers(empty_env, args))
        _record(r, "empty_dagster", times, cpu, pss)
        shutil.rmtree(work / f"round{i}-empty", ignore_errors=True)
        # its own instance and warehouse
        everything = dagster_env(
            here / "dagster_home_all", store, warehouse_uri(work / f"round{i}-all"), facts["first_day"]
        )
        _workers(everything, args)
        r = measure([DG, "launch", "--assets", EVERYTHING, "--partition-range", day_range], everything)
        _record(r, "all", times, cpu, pss)
        shutil.rmtree(work / f"round{i}-all", ignore_errors=True)
        everything = dagster_env(
            here / "dagster_home_all_dagster", store, warehouse_uri(work / f"round{i}-all"), facts["first_day"]
        )
        r = measure([*MATERIALIZE, "--select", EVERYTHING, "--partition-range", day_range], _workers(everything, args))
        _record(r, "all_dagster", times, cpu, pss)
        r = launch(env, "--partition-range", day_range)
        times["ours"].append(r["seconds"])
        cpu["ours"].append(r["cpu"])
        pss["ours"].append(r["pss_mb"])
        rows["ours"] = gateway_rows(warehouse)
        (here / "floor").mkdir()
        r = measure([PY, "-c", _FLOOR, str(store), str(here / "floor")])
        times["floor"].append(r["seconds"])
        cpu["floor"].append(r["cpu"])
        rows["floor"] = last_json(r)["rows"]
        if with_dlt:
            r = measure([PY, "-c", _DLT, str(store), str(here / "dlt")], dlt_env(here))
            times["dlt"].append(r["seconds"])
            cpu["dlt"].append(r["cpu"])
            rows["dlt"] = last_json(r)["rows"]
        print(
            f"round {i + 1}/{args.rounds} (load average {loads[-1]:.2f} before it): "
            + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in times.items() if values),
            file=sys.stderr,
        )
        shutil.rmtree(here, ignore_errors=True)
        shutil.rmtree(work / f"round{i}-all", ignore_errors=True)
    out = {name: spread(values) for name, values in times.items() if values}
    compute = [ours - empty for ours, empty in zip(times["ours"], times["empty"])]
    out["compute"] = spread(compute)
    out["compute_all"] = spread([every - empty for every, empty in zip(times["all"], times["empty"])])
    out["compute_all_dagster"] = spread(
        [every - empty for every, empty in zip(times["all_dagster"], times["empty_dagster"])]
    )
    out["cpu"] = {name: spread(values) for name, values in cpu.items() if values}
    out["pss_mb"] = {name: max(values) for name, values in pss.items()}
    out["rows"] = rows
    out["load"] = {"rounds": loads + [os.getloadavg()[0]]}
    return out


def _workers(env: dict, args: argparse.Namespace) -> dict:
    """``env`` with the runs' HERMES_ASSETS_WORKERS, when --workers names one."""
    if args.workers:
        env["HERMES_ASSETS_WORKERS"] = str(args.workers)
    return env


def _record(r: dict, name: str, times: dict, cpu: dict, pss: dict) -> None:
    times[name].append(r["seconds"])
    cpu[name].append(r["cpu"])
    pss[name].append(r["pss_mb"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="medium", help="medium, large, or a path to a state.db")
    ap.add_argument("--cache-dir", default=os.environ.get("HERMES_BENCH_CACHE", "/tmp/hermes-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sections", default="", help=f"extra sections, comma-separated: {', '.join(EXTRA_SECTIONS)}")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--workers", type=int, help="HERMES_ASSETS_WORKERS of the runs (default: the CPU count)")
    ap.add_argument(
        "--warehouse",
        choices=("local", "file", "s3"),
        default="local",
        help="a local folder, the same folder as a file:/// URI (the object-store code path), "
        "or a bucket on moto's S3 server (needs the test extra)",
    )
    args = ap.parse_args()
    use_bytecode_caches()
    extra = {s for s in args.sections.split(",") if s}
    source = ensure_store(args.store, Path(args.cache_dir))
    facts = store_facts(source)
    large = facts["messages"] > 500_000
    work = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    figures: dict = {"store": str(source), "warehouse": args.warehouse, "cores": os.cpu_count(), **facts}
    server = None
    try:
        store = private_copy(source, work / "hermes")
        if args.warehouse == "s3":
            uri, server = start_s3()

            def warehouse_uri(here: Path) -> str:
                return uri.replace("s3://bench/warehouse", f"s3://bench/{here.name}")
        else:

            def warehouse_uri(here: Path) -> str:
                return (here / "warehouse").as_uri() if args.warehouse == "file" else str(here / "warehouse")

        figures.update(rounds(args, store, facts, work, warehouse_uri))

        figures["load"]["library"] = os.getloadavg()[0]
        workers = str(args.workers or os.cpu_count() or 1)
        # redaction on (the default) and off, interleaved: the fastest of each (the machine's drift hits both).
        # The key's folder is made once, its rule set parsed and screen compiled before the rounds
        # (what every run after a home's first finds: the home's first run pays ~0.8 s more, the
        # all-assets rounds above measure that): the rounds time the library, not a home's set-up.
        keys = str(work / "redaction-keys")
        subprocess.run([PY, "-c", _WARM_KEYS, keys], check=True, cwd=REPO)
        measured: dict[str, list[dict]] = {"on": [], "off": []}
        for _ in range(max(1, args.rounds)):
            for mode in ("on", "off"):
                r = measure([PY, "-c", _LIBRARY, str(store), workers, mode, keys])
                measured[mode].append({**last_json(r), "cpu": r["cpu"], "pss_mb": r["pss_mb"]})
        best = {mode: min(runs, key=lambda m: m["cpu"]) for mode, runs in measured.items()}
        library = best["on"]
        figures["library"] = {**library, "rows_per_s": library["rows"] / library["seconds"]}
        figures["library_redaction_off"] = best["off"]
        figures["redaction_share"] = (best["on"]["cpu"] - best["off"]["cpu"]) / best["off"]["cpu"]

        # one warehouse and instance for the runs that follow a backfill
        env = _workers(dagster_env(work / "dagster_home", store, warehouse_uri(work), facts["first_day"]), args)
        day_range = f"{facts['first_day']}...{facts['last_day']}"
        launch(env, "--partition-range", day_range)
        if "rerun" in extra:
            figures["rerun"] = launch(env, "--partition-range", day_range)["seconds"]
        day = append_messages(store, 100)
        figures["load"]["incremental"] = os.getloadavg()[0]
        r = launch(env, "--partition", day)
        figures["incremental"] = {"seconds": r["seconds"], "cpu": r["cpu"], "pss_mb": r["pss_mb"], "day": day}
        if "sensor" in extra:
            out = subprocess.run(
                [PY, str(REPO / "bench" / "sensor_bench.py"), "--store", str(source), "--json"],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            figures["sensor"] = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
    finally:
        if server is not None:
            server.terminate()
        shutil.rmtree(work, ignore_errors=True)
    report(figures, large, args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


def _verdict(name: str, value: float, large: bool, *, at_least: bool = False) -> str:
    target = TARGETS[name][1 if large else 0]
    if target is None:
        return ""
    met = value >= target if at_least else value <= target
    return f"target {'>=' if at_least else '<='} {target:,g}: {'met' if met else 'MISSED'}"


def report(f: dict, large: bool, args) -> None:
    print(
        f"\nstore: {f['store']}  ({f['sessions']:,} sessions, {f['messages']:,} messages, "
        f"{f['first_day']} .. {f['last_day']}); {f['cores']} cores; warehouse: {f['warehouse']}; "
        f"{args.rounds} interleaved rounds: wall min / median / max, CPU (user + system) median\n"
    )
    cpu = f["cpu"]
    floor = f["floor"]["median"]
    rows: list[tuple[str, str, str, str]] = [
        (
            "all assets: dg launch --assets '*' --partition-range",
            fmt(f["all"]),
            f"{cpu['all']['median']:.1f} s",
            f"compute (all - empty) {f['compute_all']['median']:.2f} s = {f['compute_all']['median'] / floor:.1f}x "
            "the floor; " + _verdict("compute_vs_floor", f["compute_all"]["median"] / floor, large),
        ),
        (
            "ours: dg launch --partition-range, one run",
            fmt(f["ours"]),
            f"{cpu['ours']['median']:.1f} s",
            _verdict("backfill_s", f["ours"]["median"], large),
        ),
        ("ours: an empty one-day run (Dagster's fixed cost)", fmt(f["empty"]), f"{cpu['empty']['median']:.1f} s", ""),
        (
            "all assets: dagster asset materialize --select '*'",
            fmt(f["all_dagster"]),
            f"{cpu['all_dagster']['median']:.1f} s",
            f"compute (all - empty) {f['compute_all_dagster']['median']:.2f} s = "
            f"{f['compute_all_dagster']['median'] / floor:.1f}x the floor",
        ),
        (
            "empty one-day run: dagster asset materialize",
            fmt(f["empty_dagster"]),
            f"{cpu['empty_dagster']['median']:.1f} s",
            "",
        ),
    ]
    compute = f["compute"]["median"]
    rows.append(
        (
            "floor: SELECT sessions, messages into Arrow + Parquet",
            fmt(f["floor"]),
            f"{cpu['floor']['median']:.1f} s",
            f"compute (ours - empty) {compute:.2f} s = {compute / floor:.1f}x the floor",
        )
    )
    if "dlt" in f:
        ratio = f["ours"]["median"] / f["dlt"]["median"]
        every = f["all"]["median"] / f["dlt"]["median"]
        every_dagster = f["all_dagster"]["median"] / f["dlt"]["median"]
        rows.append(
            (
                "dlt sql_database, backend=pyarrow, to Parquet",
                fmt(f["dlt"]),
                f"{cpu['dlt']['median']:.1f} s",
                f"all assets = {every:.1f}x dlt ({_verdict('all_vs_dlt', every, large)}), "
                f"{every_dagster:.1f}x through the dagster CLI; datasets only = {ratio:.1f}x dlt",
            )
        )
    else:
        rows.append(("dlt sql_database, backend=pyarrow", "not installed", "", "pip install -e '.[bench]'"))
    lib = f["library"]
    rows.append(
        (
            "library alone: read + project + stage 3 datasets",
            f"{lib['seconds']:.2f} s",
            f"{lib['cpu']:.1f} s",
            f"{lib['rows_per_s']:,.0f} canonical rows/s; "
            + _verdict("library_rows_per_s", lib["rows_per_s"], large, at_least=True),
        )
    )
    off = f["library_redaction_off"]
    rows.append(
        (
            "the same, redaction off",
            f"{off['seconds']:.2f} s",
            f"{off['cpu']:.1f} s",
            f"redaction costs {f['redaction_share']:+.1%} of the library's CPU (target <= 15%)",
        )
    )
    inc = f["incremental"]
    rows.append(
        (
            "one day after 100 new messages (dg launch)",
            f"{inc['seconds']:.2f} s",
            f"{inc['cpu']:.1f} s",
            _verdict("incremental_s", inc["seconds"], large),
        )
    )
    pss = max(f["pss_mb"]["all"], f["pss_mb"]["ours"], inc["pss_mb"])
    rows.append(("whole process tree, peak PSS", f"{pss:.0f} MB", "", _verdict("pss_mb", pss, large)))
    if "rerun" in f:
        rows.append(("re-run of the backfill, nothing changed", f"{f['rerun']:.2f} s", "", ""))
    for name, value in (f.get("sensor") or {}).items():
        if isinstance(value, (int, float)):
            rows.append((f"sensor: {name}", f"{value:.2f}" + (" ms" if "ms" in name else ""), "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"  {'':<{widths[0]}}  {'wall':>{widths[1]}}  {'CPU':>{widths[2]}}")
    for name, value, cpu_s, note in rows:
        print(f"  {name:<{widths[0]}}  {value:>{widths[1]}}  {cpu_s:>{widths[2]}}  {note}")
    print(
        f"\n  rows: gateway {f['rows'].get('ours', 0):,}; floor and dlt copy {f['rows'].get('floor', 0):,} source rows"
    )
    load = f["load"]
    print(
        "  load average (1 min; the machine is shared): before each round "
        + ", ".join(f"{v:.2f}" for v in load["rounds"][:-1])
        + f", after the last {load['rounds'][-1]:.2f}; before the library {load['library']:.2f}, "
        f"before the one-day run {load['incremental']:.2f}"
    )


if __name__ == "__main__":
    main()
