#!/usr/bin/env python3
"""What Dagster's bookkeeping costs a capture, apart from our own work.

Not a test: it measures, on a private copy of a store, each figure the median
of --repeat runs (wall seconds and CPU seconds of the whole process tree):

  import      `python -X importtime -c "import hermes_assets.definitions"`: the total, and
              the packages that dominate it (cumulative, top level)
  partitions  `dg launch` of the three datasets over 1, 10, 30 and 330 days that hold no
              session (so our own work per day is nil): the cost of a ranged run per partition,
              on the SQLite instance (dagster.yaml, its batched event log), on the same with
              Dagster's own SQLite event log, and on a Postgres one (a throwaway cluster, fsync
              on, as tests/ecosystem/pg_cluster.py starts it)
  batch       the 330-day run again with DAGSTER_EVENT_BATCH_SIZE=1000, and with
              DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=1 (one planned event per asset
              instead of one per partition), on both instances
  backfill    the store's whole range through `dg launch` (a fresh warehouse each time) and an
              empty one-day run, on each instance (Postgres with DAGSTER_EVENT_BATCH_SIZE=1000,
              as deploy/README.md advises)
  daemon      the store's whole range as one backfill launched the way the UI launches it
              (GraphQL launchPartitionBackfill on a real `dg dev`: the backfill daemon creates the
              run, the run launcher starts it in its own process), against the same range through
              `dg launch`: each run's events, and its time from creation to its end
  workers     the library over the first 1, 3, 10 and 30 days of the store on one process
              and on two: where parallel days start to pay (a worker's start by start method,
              through the capture's own pool: bench/pool_start.py)

    python bench/dagster_costs.py --store /path/to/medium/state.db
    python bench/dagster_costs.py --store ... --sections partitions,batch --repeat 3 --json out.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.run import (  # noqa: E402
    CAPTURED,
    DG,
    PY,
    dagster_env,
    measure,
    private_copy,
    store_facts,
    use_bytecode_caches,
)

EMPTY_START = "2024-01-01"  # days before any generated store's history: no session on them
SIZES = (1, 10, 30, 330)
SECTIONS = ("import", "partitions", "batch", "backfill", "daemon", "workers")


def median_of(repeat: int, fn) -> dict:
    """``fn()`` ``repeat`` times -> the median of each figure (and every wall time)."""
    runs = [fn() for _ in range(repeat)]
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "cpu": statistics.median(r["cpu"] for r in runs),
        "all": [round(r["seconds"], 2) for r in runs],
    }


def day_after(day: str, n: int) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=n)).isoformat()


# --------------------------------------------------------------------------
# import
# --------------------------------------------------------------------------


def import_time(env: dict) -> dict:
    out = subprocess.run(
        [PY, "-X", "importtime", "-c", "import hermes_assets.definitions"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    own: dict[str, int] = {}  # self time, by the top-level package of each module imported
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)", line)
        if m:
            top = m.group(3).split(".")[0]
            own[top] = own.get(top, 0) + int(m.group(1))
    total = sum(own.values())
    load = measure([PY, "-c", "from hermes_assets.definitions import defs; defs()"], env)
    return {
        "import_s": total / 1e6,
        "by_package_s": {k: round(v / 1e6, 3) for k, v in sorted(own.items(), key=lambda kv: -kv[1])[:15]},
        "import_and_load_s": load["seconds"],
        "import_and_load_cpu": load["cpu"],
    }


# --------------------------------------------------------------------------
# partitions and events
# --------------------------------------------------------------------------


def event_counts(env: dict) -> dict[str, int]:
    """Events of the newest run in the instance of ``env``, by type."""
    code = r"""
import collections, json, dagster as dg
with dg.DagsterInstance.get() as instance:
    (run,) = instance.get_runs(limit=1)
    counts = collections.Counter(
        r.event_log_entry.dagster_event.event_type_value if r.event_log_entry.dagster_event else "LOG"
        for r in instance.get_records_for_run(run.run_id, limit=1_000_000).records
    )
    print(json.dumps(dict(counts)))
"""
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}


class Instances:
    """The two instances compared: the project's SQLite one, and Postgres (when installed)."""

    def __init__(self, work: Path):
        self.work = work
        self.cluster = None

    def postgres_url(self) -> str | None:
        if self.cluster is None:
            try:
                from tests.ecosystem.pg_cluster import PgCluster, server_bin
            except ImportError:
                return None
            bin_dir = server_bin()
            if bin_dir is None:
                return None
            self.cluster = PgCluster(bin_dir).start()
            # durable commits, as SQLite's (the test cluster turns fsync off)
            for sql in (
                "ALTER SYSTEM SET fsync = on",
                "ALTER SYSTEM SET full_page_writes = on",
                "SELECT pg_reload_conf()",
            ):
                self.cluster._run("psql", "-h", "127.0.0.1", "-p", str(self.cluster.port), "-U", "postgres", "-c", sql)
        return self.cluster.url

    def env(self, kind: str, store: Path, name: str) -> dict:
        """``kind``: ``sqlite`` (the project's dagster.yaml), ``sqlite-dagster`` (the same without its
        batched event log: Dagster's own), ``postgres`` (deploy/postgres/dagster.yaml)."""
        home = self.work / name / "home"
        env = dagster_env(home, store, str(self.work / name / "warehouse"), EMPTY_START)
        if kind == "sqlite-dagster":
            import yaml

            config = yaml.safe_load((home / "dagster.yaml").read_text())
            del config["event_log_storage"]
            (home / "dagster.yaml").write_text(yaml.safe_dump(config))
        if kind == "postgres":
            url = self.postgres_url()
            if url is None:
                raise SystemExit("no PostgreSQL server (apt-get install postgresql) or no dagster-postgres")
            database = name.replace("-", "_")  # one database per instance
            self.cluster._run("createdb", "-h", "127.0.0.1", "-p", str(self.cluster.port), "-U", "postgres", database)
            yaml = (REPO / "deploy" / "postgres" / "dagster.yaml").read_text()
            (home / "dagster.yaml").write_text(yaml)
            env["DAGSTER_PG_URL"] = url.rsplit("/", 1)[0] + "/" + database
        return env

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def ranged(env: dict, n: int) -> dict:
    return measure(
        [DG, "launch", "--assets", CAPTURED, "--partition-range", f"{EMPTY_START}...{day_after(EMPTY_START, n - 1)}"],
        env,
    )


def partitions(instances: Instances, store: Path, kinds: list[str], repeat: int) -> dict:
    out: dict = {}
    for kind in kinds:
        env = instances.env(kind, store, f"partitions-{kind}")
        ranged(env, 1)  # the instance's tables exist, as on any machine after the first run
        figures = {n: median_of(repeat, lambda n=n, env=env: ranged(env, n)) for n in SIZES}
        figures[SIZES[-1]]["events"] = event_counts(env)
        slope = (figures[SIZES[-1]]["seconds"] - figures[SIZES[0]]["seconds"]) / (SIZES[-1] - SIZES[0])
        cpu_slope = (figures[SIZES[-1]]["cpu"] - figures[SIZES[0]]["cpu"]) / (SIZES[-1] - SIZES[0])
        out[kind] = {"runs": figures, "per_partition_ms": slope * 1000, "per_partition_cpu_ms": cpu_slope * 1000}
        print(f"{kind}: " + json.dumps(out[kind]), file=sys.stderr)
    return out


def batch(instances: Instances, store: Path, kinds: list[str], repeat: int) -> dict:
    variants = {
        "default": {},
        "DAGSTER_EVENT_BATCH_SIZE=1000": {"DAGSTER_EVENT_BATCH_SIZE": "1000"},
        "planned events as one subset per asset": {"DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "1"},
    }
    out: dict = {}
    n = SIZES[-1]
    for kind in kinds:
        out[kind] = {}
        for name, extra in variants.items():
            env = {**instances.env(kind, store, f"batch-{kind}-{len(out[kind])}"), **extra}
            ranged(env, 1)
            out[kind][name] = median_of(repeat, lambda env=env: ranged(env, n))
            out[kind][name]["events"] = sum(event_counts(env).values())
            print(f"{kind} {name}: " + json.dumps(out[kind][name]), file=sys.stderr)
    return out


def backfill(instances: Instances, store: Path, kinds: list[str], repeat: int) -> dict:
    facts = store_facts(store)
    out: dict = {}
    for kind in kinds:
        env = instances.env(kind, store, f"backfill-{kind}")
        if kind == "postgres":
            env["DAGSTER_EVENT_BATCH_SIZE"] = "1000"
        empty = median_of(repeat, lambda env=env: ranged(env, 1))
        env["HERMES_ASSETS_START_DATE"] = facts["first_day"]
        runs = []
        for i in range(repeat):
            here = {**env, "HERMES_ASSETS_WAREHOUSE": f"{env['HERMES_ASSETS_WAREHOUSE']}-{i}"}
            runs.append(
                measure(
                    [
                        DG,
                        "launch",
                        "--assets",
                        CAPTURED,
                        "--partition-range",
                        f"{facts['first_day']}...{facts['last_day']}",
                    ],
                    here,
                )
            )
        out[kind] = {
            "empty": empty,
            "backfill": {
                "seconds": statistics.median(r["seconds"] for r in runs),
                "cpu": statistics.median(r["cpu"] for r in runs),
                "all": [round(r["seconds"], 2) for r in runs],
            },
        }
        print(f"backfill {kind}: " + json.dumps(out[kind]), file=sys.stderr)
    return out


# --------------------------------------------------------------------------
# a backfill through the daemon, against the CLI
# --------------------------------------------------------------------------

_RUN_FACTS = r"""
import collections, json, dagster as dg
with dg.DagsterInstance.get() as instance:
    out = []
    for run in instance.get_runs(limit=5):
        records = instance.get_records_for_run(run.run_id, limit=1_000_000).records
        counts = collections.Counter(
            r.event_log_entry.dagster_event.event_type_value if r.event_log_entry.dagster_event else "LOG" for r in records
        )
        stats = instance.get_run_stats(run.run_id)
        rec = instance.get_run_record_by_id(run.run_id)
        out.append({
            "tags": {k: v for k, v in run.tags.items() if k.startswith("dagster/")},
            "status": run.status.value,
            "events": sum(counts.values()),
            "by_type": dict(counts),
            # created (the CLI or the daemon) -> started (in its process) -> ended
            "created_to_start_s": (stats.start_time - rec.create_timestamp.timestamp()) if stats.start_time else None,
            "start_to_end_s": (stats.end_time - stats.start_time) if stats.end_time and stats.start_time else None,
        })
    print(json.dumps(out))
"""


def run_facts(env: dict) -> list[dict]:
    out = subprocess.run([PY, "-c", _RUN_FACTS], capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else [{"error": out.stderr[-2000:]}]


def daemon(store: Path, work: Path) -> dict:
    """One backfill of the store's range through GraphQL and the daemon, one through the CLI."""
    import time

    from tests.e2e.test_backfill_graphql import BACKFILL_Q, LAUNCH_M, DagsterDev

    facts = store_facts(store)
    days = [
        day_after(facts["first_day"], i)
        for i in range((dt.date.fromisoformat(facts["last_day"]) - dt.date.fromisoformat(facts["first_day"])).days + 1)
    ]
    out: dict = {}
    # the CLI: one run, created and executed in the command's process
    env = dagster_env(work / "cli" / "home", store, str(work / "cli" / "warehouse"), facts["first_day"])
    cli = measure([DG, "launch", "--assets", CAPTURED, "--partition-range", f"{days[0]}...{days[-1]}"], env)
    out["cli"] = {"command_s": cli["seconds"], "command_cpu": cli["cpu"], "run": run_facts(env)[0]}
    # the UI's way: dg dev (webserver, daemon, code server); the store in place once the sensors are off
    aside = work / "daemon" / "store-aside"
    aside.mkdir(parents=True)
    moved = aside / "state.db"
    shutil.copyfile(store, moved)
    env = dagster_env(
        work / "daemon" / "home",
        work / "daemon" / "hermes" / "state.db",
        str(work / "daemon" / "warehouse"),
        facts["first_day"],
    )
    env["HERMES_ASSETS_POLL_SECONDS"] = "3600"
    dev = DagsterDev(env, work / "daemon" / "dg-dev.log", dg=True)
    try:
        dev.wait_ready()
        dev.settle_and_stop_sensors()
        (work / "daemon" / "hermes").mkdir()
        shutil.move(moved, work / "daemon" / "hermes" / "state.db")
        params = {
            "assetSelection": [{"path": [n]} for n in CAPTURED.split(",")],
            "partitionNames": days,
            "fromFailure": False,
            "tags": [],
            "title": "bench",
        }
        start = time.monotonic()
        launched = dev.graphql(LAUNCH_M, {"params": params})["launchPartitionBackfill"]
        while True:
            backfill = dev.graphql(BACKFILL_Q, {"id": launched["backfillId"]})["partitionBackfillOrError"]
            if backfill["status"] in ("COMPLETED", "COMPLETED_SUCCESS", "FAILED", "COMPLETED_FAILED", "CANCELED"):
                break
            time.sleep(0.5)
        out["daemon"] = {
            "launch_to_done_s": time.monotonic() - start,
            "status": backfill["status"],
            "runs": [r for r in run_facts(env) if "dagster/backfill" in r.get("tags", {})],
        }
    finally:
        dev.stop()
    return out


# --------------------------------------------------------------------------
# workers
# --------------------------------------------------------------------------

_LIBRARY_DAYS = r"""
import json, os, sys, tempfile, time
from hermes_assets.lib.capture import steps
from hermes_assets.lib.plan import capture_plan
from hermes_assets.lib.plan import policy
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.warehouse.datasets import Warehouse
stores = [Store(sys.argv[1])]
plan = capture_plan.plan_capture(stores, [], user_home="/home/bench")
days = sorted({d for sp in plan.stores for d in sp.days.values() if d})[: int(sys.argv[3])]
plan = capture_plan.plan_capture(stores, days, user_home="/home/bench")
plan = capture_plan.apply_usage_policy(plan, policy.PolicyResolver("/nonexistent/policy.json"))
ctx = ProjectionContext(user_home="/home/bench", now_s=plan.read_at, git=NoGit())
t = time.perf_counter()
with tempfile.TemporaryDirectory() as scratch:
    run = steps.project_rows(plan, ctx, Warehouse(os.path.join(scratch, "warehouse")),
                               staging=os.path.join(scratch, "run"), workers=int(sys.argv[2]), parallel_min_sessions=0)
print(json.dumps({"sessions": plan.sessions_in_range(), "seconds": time.perf_counter() - t}))
"""


def workers(store: Path, repeat: int) -> dict:
    out: dict = {"days": {}}
    for n in (1, 3, 10, 30):
        row = {}
        for w in (1, 2):
            runs = [
                json.loads(
                    measure([PY, "-c", _LIBRARY_DAYS, str(store), str(w), str(n)])["stdout"].strip().splitlines()[-1]
                )
                for _ in range(repeat)
            ]
            row["sessions"] = runs[0]["sessions"]
            row[f"workers_{w}_s"] = round(statistics.median(r["seconds"] for r in runs), 3)
        out["days"][n] = row
        print(f"workers {n} days: {row}", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="a state.db (copied first)")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--instances", default="sqlite-dagster,sqlite,postgres")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    use_bytecode_caches()
    sections = [s for s in args.sections.split(",") if s]
    kinds = [k for k in args.instances.split(",") if k]
    work = Path(tempfile.mkdtemp(prefix="hermes-dagster-costs-"))
    instances = Instances(work)
    figures: dict = {"store": args.store, "cores": os.cpu_count(), **store_facts(Path(args.store))}
    try:
        store = private_copy(Path(args.store), work / "hermes")
        if "import" in sections:
            env = dagster_env(work / "import" / "home", store, str(work / "import" / "warehouse"), EMPTY_START)
            figures["import"] = import_time(env)
            print("import: " + json.dumps(figures["import"]), file=sys.stderr)
        if "partitions" in sections:
            figures["partitions"] = partitions(instances, store, kinds, args.repeat)
        if "batch" in sections:
            figures["batch"] = batch(instances, store, kinds, args.repeat)
        if "backfill" in sections:
            figures["backfill"] = backfill(instances, store, kinds, args.repeat)
        if "daemon" in sections:
            figures["daemon"] = daemon(store, work)
            print("daemon: " + json.dumps(figures["daemon"]), file=sys.stderr)
        if "workers" in sections:
            figures["workers"] = workers(store, args.repeat)
    finally:
        instances.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
