#!/usr/bin/env python3
"""hermes_assets benchmark: one table of figures on realistic Hermes stores.

Not a test: it measures. Stores are generated with the real Hermes writer
(tools/gen_state_db.py) and cached in --cache-dir; the large one is a
raw-SQL multiple of the medium one (tools/multiply_db.py).

    python bench/run.py                       # medium store, every section
    python bench/run.py --store large         # ~1M messages
    python bench/run.py --sections core,backfill --store medium
    python bench/run.py --warehouse s3        # the warehouse in a bucket (moto's S3 server on loopback)

Sections:
  core         the library alone: plan + read + project + stage the three datasets of every day
               (capture.project_rows on every core, no Dagster, no partition file): canonical rows/s
  floor        plain SELECT of sessions+messages into Arrow + writing as many Parquet bytes
  backfill     `dg launch --assets <the three datasets> --partition-range` over the store's days
  empty        the same CLI on one empty day (Dagster's fixed cost)
  rerun        the backfill again, nothing changed
  incremental  100 new messages through the real writer, then one day's materialization
  sensor       no-change tick and a tick after 100 new messages (bench/sensor_bench.py)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools"
PY = sys.executable
DG = str(Path(PY).with_name("dg"))
SECTIONS = ("core", "floor", "backfill", "empty", "rerun", "incremental", "sensor")
#: the three captured datasets (the analytics layer downstream is not part of a capture's figures)
CAPTURED = "hermes_sessions,hermes_messages,ai_gateway_messages_hermes"


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
    """(RSS, PSS) of one process in kB; PSS splits shared pages between their sharers."""
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


def measure(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd``: wall time, and the peak memory of its WHOLE process tree (workers
    included), sampled every 20 ms: the peak of the summed RSS and of the summed PSS."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    peak_rss = peak_pss = procs = 0
    out: list[str] = []
    reader = __import__("threading").Thread(target=lambda: out.append(proc.communicate()), daemon=True)
    reader.start()
    while proc.poll() is None:
        tree = _tree(proc.pid)
        sizes = [_memory_kb(pid) for pid in tree]
        peak_rss = max(peak_rss, sum(r for r, _ in sizes))
        peak_pss = max(peak_pss, sum(p for _, p in sizes))
        procs = max(procs, len(tree))
        time.sleep(0.02)
    reader.join()
    wall = time.perf_counter() - t
    stdout, stderr = out[0] if out else ("", "")
    if proc.returncode != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}\n{stderr[-4000:]}")
    return {
        "rc": proc.returncode,
        "wall": wall,
        "rss_mb": peak_rss / 1024,
        "pss_mb": peak_pss / 1024,
        "processes": procs,
        "stdout": stdout[-4000:],
        "stderr": stderr[-4000:],
    }


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
            [
                PY,
                str(TOOLS / "gen_state_db.py"),
                str(medium.parent),
                "--sessions",
                "4500",
                "--seed",
                "42",
                "--days",
                "30",
            ],
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


def store_facts(path: Path) -> dict:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sessions, lo, hi = conn.execute("SELECT count(*), min(started_at), max(started_at) FROM sessions").fetchone()
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    day = lambda s: time.strftime("%Y-%m-%d", time.gmtime(s))  # noqa: E731
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
# sections
# --------------------------------------------------------------------------

_CORE = r"""
import json, os, sys, time
from hermes_assets.lib import capture, policy
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.stores import Store
t = time.perf_counter()
stores = [Store(sys.argv[1])]
plan = capture.plan_capture(stores, [], user_home="/home/bench")
days = sorted({d for sp in plan.stores for d in sp.days.values() if d})
plan = capture.plan_capture(stores, days, user_home="/home/bench")
plan = capture.apply_usage_policy(plan, policy.PolicyResolver("/nonexistent/policy.json"))
ctx = ProjectionContext(user_home="/home/bench", now_s=plan.read_at, git=NoGit())
import tempfile
from hermes_assets.lib.warehouse import Warehouse
with tempfile.TemporaryDirectory() as scratch:  # an empty warehouse: every day is staged as its final file
    run = capture.project_rows(plan, ctx, Warehouse(os.path.join(scratch, "warehouse")),
                               staging=os.path.join(scratch, "run"), workers=os.cpu_count() or 1)
rows = run.totals("ai_gateway_messages_hermes")[0]
print(json.dumps({"rows": rows, "seconds": time.perf_counter() - t}))
"""

_FLOOR = r"""
import json, sqlite3, sys, time, tempfile, os
import pyarrow as pa, pyarrow.parquet as pq
path, nbytes = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
rows = 0
for table in ("sessions", "messages"):
    cur = conn.execute(f"SELECT * FROM {table}")
    names = [d[0] for d in cur.description]
    while True:
        batch = cur.fetchmany(50000)
        if not batch:
            break
        cols = list(zip(*batch))
        pa.table({n: pa.array(c) for n, c in zip(names, cols)})
        rows += len(batch)
select = time.perf_counter() - t
# Write the same number of Parquet bytes our run wrote (incompressible-ish payload).
payload = pa.table({"x": pa.array([os.urandom(1024).hex() for _ in range(max(1, nbytes // 2048))])})
t2 = time.perf_counter()
with tempfile.TemporaryDirectory() as tmp:
    pq.write_table(payload, os.path.join(tmp, "f.parquet"), compression="zstd")
write = time.perf_counter() - t2
print(json.dumps({"rows": rows, "select": select, "write": write, "seconds": select + write}))
"""


def run_python(code: str, *args: str) -> dict:
    out = subprocess.run(
        [PY, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "HERMES_ASSETS_LOG_FORMAT": "json"},
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def statements(env: dict) -> dict:
    """The SQL statements of the newest run, from its ops' metadata (by what they read)."""
    code = r"""
import json, dagster as dg
with dg.DagsterInstance.get() as instance:
    (run,) = instance.get_runs(limit=1)
    total = {}
    for record in instance.get_records_for_run(run.run_id).records:
        event = record.event_log_entry.dagster_event
        if event and event.event_type_value == "STEP_OUTPUT" and event.step_key in (
                "hermes_capture.plan", "hermes_capture.project_rows"):
            md = event.event_specific_data.metadata.get("sql_statements")
            if md is not None and event.step_key.endswith("project_rows"):
                total = md.value  # the projection's figures include the plan's
    print(json.dumps(total))
"""
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}


def materialize(env: dict, *partition: str) -> dict:
    return measure([DG, "launch", "--assets", CAPTURED, *partition], env)


def gateway_rows(warehouse: str) -> tuple[int, int]:
    """Canonical rows and Parquet bytes in the warehouse (a path or a URI)."""
    import pyarrow.parquet as pq

    from hermes_assets.lib.warehouse import Warehouse

    wh = Warehouse(warehouse)
    rows = size = 0
    for dataset in ("ai_gateway_messages_hermes", "hermes_sessions", "hermes_messages"):
        for day in wh.days(dataset):
            with wh.fs.open_input_file(wh.path(dataset, day)) as f:
                size += f.size()
                if dataset == "ai_gateway_messages_hermes":
                    rows += pq.ParquetFile(f).metadata.num_rows
    return rows, size


def start_s3(work: Path) -> tuple[str, subprocess.Popen]:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="medium", help="medium, large, or a path to a state.db")
    ap.add_argument("--cache-dir", default=os.environ.get("HERMES_BENCH_CACHE", "/tmp/hermes-bench"))
    ap.add_argument("--sections", default=",".join(SECTIONS))
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
    sections = [s for s in args.sections.split(",") if s]
    cache = Path(args.cache_dir)
    source = ensure_store(args.store, cache)
    facts = store_facts(source)
    work = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    figures: dict = {"store": str(source), "warehouse": args.warehouse, **facts}
    table: list[tuple[str, str, str]] = []
    server = None
    try:
        store = private_copy(source, work / "hermes")
        warehouse = str(work / "warehouse")
        if args.warehouse == "file":
            warehouse = (work / "warehouse").as_uri()
        elif args.warehouse == "s3":
            warehouse, server = start_s3(work)
        env = dagster_env(work / "dagster_home", store, warehouse, facts["first_day"])
        env.update({k: v for k, v in os.environ.items() if k.startswith("AWS_")})
        env["HERMES_ASSETS_SPOOL"] = str(work / "spool")
        if args.workers:
            env["HERMES_ASSETS_WORKERS"] = str(args.workers)
            figures["workers"] = args.workers
        day_range = f"{facts['first_day']}...{facts['last_day']}"

        if "core" in sections:
            r = measure([PY, "-c", _CORE, str(store)])
            core = json.loads(r["stdout"].strip().splitlines()[-1])
            figures["core"] = {
                **core,
                "rows_per_s": core["rows"] / core["seconds"],
                "rss_mb": r["rss_mb"],
                "pss_mb": r["pss_mb"],
            }
            table.append(
                (
                    "core: read + project 3 datasets (no Dagster)",
                    f"{core['seconds']:.2f} s",
                    f"{core['rows'] / core['seconds']:,.0f} canonical rows/s, tree RSS {r['rss_mb']:.0f} MB",
                )
            )
        if "empty" in sections:
            # First, so the instance's databases exist (as on any machine after the first run):
            # Dagster's fixed cost of a run, subtracted from the backfill to get our compute.
            empty_day = "2024-01-01"
            r = materialize({**env, "HERMES_ASSETS_START_DATE": empty_day}, "--partition", empty_day)
            figures["empty"] = {"seconds": r["wall"]}
        if {"backfill", "rerun", "floor", "empty"} & set(sections):
            r = materialize(env, "--partition-range", day_range)
            rows, size = gateway_rows(warehouse)
            figures["backfill"] = {
                "seconds": r["wall"],
                "rows": rows,
                "bytes": size,
                "rss_mb": r["rss_mb"],
                "pss_mb": r["pss_mb"],
                "processes": r["processes"],
                "statements": statements(env),
            }
            table.append(
                (
                    "full backfill (CLI, one run, 3 assets)",
                    f"{r['wall']:.2f} s",
                    f"{rows / r['wall']:,.0f} gateway rows/s; process tree peak: RSS {r['rss_mb']:.0f} MB, "
                    f"PSS {r['pss_mb']:.0f} MB ({r['processes']} processes)",
                )
            )
            table.append(("  SQL statements of the run", "", json.dumps(figures["backfill"]["statements"])))
        if "empty" in sections:
            compute = figures["backfill"]["seconds"] - figures["empty"]["seconds"]
            figures["compute"] = compute
            table.append(
                (
                    "empty one-day run (Dagster fixed cost)",
                    f"{figures['empty']['seconds']:.2f} s",
                    f"compute = backfill - empty = {compute:.2f} s",
                )
            )
        if "floor" in sections:
            floor = run_python(_FLOOR, str(store), str(figures["backfill"]["bytes"]))
            figures["floor"] = floor
            ratio = (figures.get("compute") or figures["backfill"]["seconds"]) / floor["seconds"]
            figures["floor_ratio"] = ratio
            table.append(
                (
                    "floor: SELECT all into Arrow + write as many Parquet bytes",
                    f"{floor['seconds']:.2f} s",
                    f"ours / floor = {ratio:.1f}x",
                )
            )
        if "rerun" in sections:
            r = materialize(env, "--partition-range", day_range)
            figures["rerun"] = {"seconds": r["wall"]}
            table.append(
                (
                    "re-run of the same backfill (nothing changed)",
                    f"{r['wall']:.2f} s",
                    f"{r['wall'] / figures['backfill']['seconds']:.0%} of the first run",
                )
            )
        if "incremental" in sections:
            day = append_messages(store, 100)
            r = materialize(env, "--partition", day)
            figures["incremental"] = {"seconds": r["wall"], "day": day}
            table.append(("one day after 100 new messages (CLI run)", f"{r['wall']:.2f} s", f"day {day}"))
        if "sensor" in sections and (REPO / "bench" / "sensor_bench.py").exists():
            out = subprocess.run(
                [PY, str(REPO / "bench" / "sensor_bench.py"), "--store", str(source), "--json"],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            if out.returncode == 0:
                sensor = json.loads(out.stdout.strip().splitlines()[-1])
                figures["sensor"] = sensor
                for name, value in sensor.items():
                    if isinstance(value, (int, float)):
                        table.append((f"sensor: {name}", f"{value:.2f} ms" if "ms" in name else str(value), ""))
            else:
                table.append(("sensor", "failed", out.stderr.strip().splitlines()[-1] if out.stderr else ""))
    finally:
        if server is not None:
            server.terminate()
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"\nstore: {source}  ({facts['sessions']:,} sessions, {facts['messages']:,} messages, "
        f"{facts['first_day']} .. {facts['last_day']}; {os.cpu_count()} cores; warehouse: {args.warehouse})\n"
    )
    width = max(len(t[0]) for t in table) if table else 10
    for name, value, note in table:
        print(f"  {name:<{width}}  {value:>10}  {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
