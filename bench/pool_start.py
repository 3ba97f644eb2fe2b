#!/usr/bin/env python3
"""The capture's worker pool measured: start-up by start method, and a day's re-run.

Not a test: it measures, on a copy of a cached store (never the cached file itself).

    python bench/pool_start.py                                  # every section, medium store
    python bench/pool_start.py --sections startup --repeat 9
    python bench/pool_start.py --sections rerun --code /tmp/old # the re-run with another tree's hermes_assets

Sections:
  startup  pool creation -> the first day a worker returns, for a trivial day job whose
           module imports what the capture's does (each try in a fresh process, then a second
           pool in that process, its forkserver running already)
  capture  a whole capture of the store's days (plan, project_rows, write_partitions) into an
           empty warehouse on --workers processes, each start method
  rerun    the same capture again, nothing changed: its time and how many times the run
           opened a partition file (strace), i.e. how often a day's existing file is read
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("startup", "capture", "rerun")
METHODS = ("forkserver", "spawn")

# a fresh process per try: the forkserver is started once per process
_STARTUP = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[2])
import pool_job  # the day job's module: it imports the capture's modules, as stage_day's does
from hermes_assets.lib.capture import pool
method = sys.argv[1]
t0 = time.monotonic()
days = [f"d{i}" for i in range(64)]
out = list(pool.map_days(pool_job.when, None, days, workers=2, start_method=method))
workers = [t for pid, t in out if pid != os.getpid()]
t1 = time.monotonic()  # a second pool in the same process: a forkserver already runs
again = [t for pid, t in pool.map_days(pool_job.when, None, days, workers=2, start_method=method) if pid != os.getpid()]
print(json.dumps({"first_worker_s": min(workers) - t0 if workers else None,
                  "second_pool_s": min(again) - t1 if again else None}))
"""

_POOL_JOB = """
import os, time
import hermes_assets.lib.capture.steps  # noqa: F401  (what a real worker imports)


def when(state, day):
    return os.getpid(), time.monotonic()
"""

# one capture of every day of a store, as the Dagster steps call the library
_CAPTURE = r"""
import json, os, sys, time
from hermes_assets.lib.capture import steps
from hermes_assets.lib.plan import policy
from hermes_assets.lib.plan import capture_plan
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.warehouse.datasets import Warehouse
store, root, workers, method = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
stores = [Store(store)]
found = capture_plan.plan_capture(stores, [], user_home="/home/bench")
days = sorted({d for sp in found.stores for d in sp.days.values() if d})
plan = capture_plan.plan_capture(stores, days, user_home="/home/bench")
plan = capture_plan.apply_usage_policy(plan, policy.PolicyResolver("/nonexistent/policy.json"))
ctx = ProjectionContext(user_home="/home/bench", now_s=plan.read_at, git=NoGit())
wh = Warehouse(root)
extra = {"start_method": method} if method != "-" else {}
t1 = time.perf_counter()
run = steps.project_rows(plan, ctx, wh, staging=os.path.join(wh.staging_root, "bench"), workers=workers, **extra)
t2 = time.perf_counter()
steps.write_partitions(run, wh)
t3 = time.perf_counter()
print(json.dumps({"days": len(days), "plan_s": t1 - t0, "project_s": t2 - t1, "write_s": t3 - t2, "total_s": t3 - t0}))
"""


def _python(code: str, *args: str, env: dict | None = None, strace: str | None = None) -> dict:
    cmd = [sys.executable, "-c", code, *args]
    if strace:
        cmd = ["strace", "-f", "-qq", "-e", "trace=openat", "-o", strace, *cmd]
    env = env or os.environ.copy()
    # `python -c` puts its working folder first on sys.path: another tree's code runs from that tree
    cwd = env.get("PYTHONPATH") or REPO
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-4000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def startup(work: Path, repeat: int) -> None:
    (work / "job").mkdir(exist_ok=True)
    (work / "job" / "pool_job.py").write_text(_POOL_JOB)
    for method in METHODS:
        tries = [_python(_STARTUP, method, str(work / "job")) for _ in range(repeat)]
        for key, what in (("first_worker_s", "first pool "), ("second_pool_s", "second pool")):
            got = [t[key] for t in tries if t[key] is not None]
            print(
                f"startup  {method:17s} {what} -> first worker result: median {statistics.median(got) * 1000:5.0f} ms"
                f" (min {min(got) * 1000:.0f}, max {max(got) * 1000:.0f}; {len(got)}/{repeat} tries reached a worker)"
            )


def _private_copy(store: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    target = into / "state.db"
    shutil.copyfile(store, target)
    for suffix in ("-wal", "-shm"):
        if Path(f"{store}{suffix}").exists():
            shutil.copyfile(f"{store}{suffix}", f"{target}{suffix}")
    return target


def _env(code: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_ASSETS_LOG_FORMAT"] = "json"
    if code:
        env["PYTHONPATH"] = code
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def capture(work: Path, store: Path, workers: int, repeat: int) -> None:
    for i in range(repeat):
        for method in METHODS:
            root = work / f"wh-{method}-{i}"
            r = _python(_CAPTURE, str(store), str(root), str(workers), method, env=_env(None))
            shutil.rmtree(root)
            print(
                f"capture  {method:10s} {r['days']} days, {workers} workers: project_rows {r['project_s']:.2f} s, "
                f"write {r['write_s']:.2f} s, total {r['total_s']:.2f} s"
            )


def rerun(work: Path, store: Path, workers: int, repeat: int, code: str | None) -> None:
    env = _env(code)
    method = "-" if code else METHODS[0]  # an older tree may have no start method
    root = work / "wh-rerun"
    first = _python(_CAPTURE, str(store), str(root), str(workers), method, env=env)
    label = code or "this tree"
    print(f"rerun    [{label}] first capture: total {first['total_s']:.2f} s")
    for _ in range(repeat):
        r = _python(_CAPTURE, str(store), str(root), str(workers), method, env=env)
        print(
            f"rerun    [{label}] again, nothing changed: project_rows {r['project_s']:.2f} s, "
            f"write {r['write_s']:.2f} s, total {r['total_s']:.2f} s"
        )
    trace = work / "rerun.strace"
    _python(_CAPTURE, str(store), str(root), str(workers), method, env=env, strace=str(trace))
    opened: dict[str, int] = {}
    for line in trace.read_text().splitlines():
        # a day's file by its path, or by the hard link the stage step reads it through (a pin)
        m = re.search(r'openat\(AT_FDCWD, "([^"]*(?:/day=[^"/]+/host=[^"/]+/part-0\.parquet|\.pin))", O_RDONLY', line)
        if m and " = -1 " not in line:
            opened[m.group(1)] = opened.get(m.group(1), 0) + 1
    per_file = statistics.mean(opened.values()) if opened else 0
    print(
        f"rerun    [{label}] read-only opens of existing day files (or their pins): {sum(opened.values())} "
        f"over {len(opened)} files ({per_file:.2f} per file)"
    )
    shutil.rmtree(root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--store", default="/work/cache/stores/medium/state.db", help="a cached store: copied first")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--code", help="rerun: a folder whose hermes_assets to run instead of this tree's")
    args = ap.parse_args()
    sections = args.sections.split(",")
    with tempfile.TemporaryDirectory(prefix="pool-bench-") as tmp:
        work = Path(tmp)
        store = _private_copy(Path(args.store), work / "store") if {"capture", "rerun"} & set(sections) else None
        start = time.perf_counter()
        if "startup" in sections:
            startup(work, args.repeat)
        if "capture" in sections:
            capture(work, store, args.workers, max(1, args.repeat // 2))
        if "rerun" in sections:
            rerun(work, store, args.workers, max(1, args.repeat // 2), args.code)
        print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
