#!/usr/bin/env python3
"""How long after a Hermes write its day's datasets and analytics are current, live. Not a test.

``make run``'s Dagster (``python -m hermes_assets.dev``: webserver, daemon, the sensors at their
default 30 s poll unless ``--poll``) on a copy of a store, in a temporary ``DAGSTER_HOME``; once
the first capture is done, ``tools/live_writer.py`` writes to the store through Hermes's own
``SessionDB`` for ``--minutes``, logging each operation's time. Then, per operation, the lag to:

- the capture: the first materialization of ``hermes_messages`` of the op's day by a run that
  started after the op (it read the store after it);
- the analytics: likewise, the first materialization of ``hermes_daily_usage``.

It prints p50/p95/max of both, the runs by trigger, the load average before and after, and the
CPU seconds of the whole process tree (Dagster's and the writer's, from ``getrusage``)::

    .venv/bin/python bench/analytics_lag.py --store /tmp/store100/state.db --minutes 4
    .venv/bin/python bench/analytics_lag.py --repo /path/to/another/checkout ...   # another version
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _spread(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
        "max": round(ordered[-1], 1),
        "n": len(ordered),
    }


def _runs_and_materializations(home: Path, python: Path) -> dict:
    """The instance's runs (start time, trigger) and the materializations of the two assets, read
    by a child process with the checkout's own Dagster."""
    script = """
import json, dagster as dg
i = dg.DagsterInstance.get()
runs = {r.dagster_run.run_id: {"start": r.start_time, "trigger": r.dagster_run.tags.get("hermes/trigger", "other"),
        "status": r.dagster_run.status.value} for r in i.get_run_records()}
out = {"runs": runs, "materializations": {}}
for asset in ("hermes_messages", "hermes_daily_usage"):
    recs = i.fetch_materializations(dg.AssetKey(asset), limit=10000).records
    out["materializations"][asset] = [[r.partition_key, r.timestamp, r.run_id] for r in recs]
print(json.dumps(out))
"""
    done = subprocess.run(
        [str(python), "-c", script], env={**os.environ, "DAGSTER_HOME": str(home)}, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _lag(op_t: float, day: str, records: list, runs: dict) -> float | None:
    hits = [
        ts for partition, ts, run_id in records if partition == day and (runs.get(run_id, {}).get("start") or 0) >= op_t
    ]
    return min(hits) - op_t if hits else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True, help="a state.db to copy (its history is captured first)")
    parser.add_argument("--minutes", type=float, default=4.0, help="how long Hermes writes")
    parser.add_argument("--rate", type=float, default=0.5, help="writer operations per second")
    parser.add_argument("--poll", type=int, default=30, help="HERMES_ASSETS_POLL_SECONDS")
    parser.add_argument("--repo", default=str(REPO), help="the checkout to run (its .venv)")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    args = parser.parse_args()
    repo = Path(args.repo).resolve()
    python = repo / ".venv" / "bin" / "python"
    work = Path(tempfile.mkdtemp(prefix="analytics-lag-"))
    home, hermes = work / "dagster", work / "hermes"
    home.mkdir()
    hermes.mkdir()
    shutil.copyfile(repo / "dagster.yaml", home / "dagster.yaml")
    shutil.copyfile(args.store, hermes / "state.db")
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "DAGSTER_"))},
        "DAGSTER_HOME": str(home),
        "HERMES_HOME": str(hermes),
        "HERMES_ASSETS_POLL_SECONDS": str(args.poll),
        "HERMES_ASSETS_LOG_FORMAT": "json",
    }
    load_before = os.getloadavg()
    cpu_before = _cpu_children()
    log = open(work / "dagster.log", "wb")
    dagster = subprocess.Popen(
        [str(python), "-m", "hermes_assets.dev", "--port", str(port)],
        cwd=repo,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while True:  # up, then the first capture of the history done (no run left in flight)
            time.sleep(5)
            assert dagster.poll() is None, (work / "dagster.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the first capture took more than five minutes"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5).close()
            except OSError:
                continue
            state = _runs_and_materializations(home, python)
            if state["runs"] and all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in state["runs"].values()):
                break
        first_runs = len(state["runs"])
        ops = work / "ops.jsonl"
        writer = subprocess.run(
            [
                str(python),
                str(repo / "tools" / "live_writer.py"),
                str(hermes / "state.db"),
                "--rate",
                str(args.rate),
                "--duration",
                str(int(args.minutes * 60)),
                "--log",
                str(ops),
            ],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert writer.returncode == 0, writer.stderr[-2000:]
        time.sleep(args.poll * 3 + 30)  # the last writes' captures and their analytics
        state = _runs_and_materializations(home, python)
    finally:
        os.killpg(dagster.pid, signal.SIGTERM)
        try:
            dagster.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(dagster.pid, signal.SIGKILL)
            dagster.wait()
        log.close()
    cpu = _cpu_children() - cpu_before
    runs = state["runs"]
    capture, analytics = [], []
    with sqlite3.connect(f"file:{hermes / 'state.db'}?mode=ro", uri=True) as db:
        started = dict(db.execute("SELECT id, started_at FROM sessions"))
    for line in ops.read_text().splitlines():
        op = json.loads(line)
        t, sid = op["t"], op.get("session_id")
        if sid not in started:  # deleted since, or no session: no day to follow
            continue
        day = dt.datetime.fromtimestamp(float(started[sid]), dt.UTC).date().isoformat()
        for out, asset in ((capture, "hermes_messages"), (analytics, "hermes_daily_usage")):
            lag = _lag(t, day, state["materializations"][asset], runs)
            if lag is not None:
                out.append(lag)
    later = list(runs.values())[: len(runs) - first_runs]
    triggers: dict[str, int] = {}
    for run in later:
        triggers[run["trigger"]] = triggers.get(run["trigger"], 0) + 1
    figures = {
        "poll_s": args.poll,
        "minutes": args.minutes,
        "ops": sum(1 for _ in ops.read_text().splitlines()),
        "capture_lag_s": _spread(capture),
        "analytics_lag_s": _spread(analytics),
        "runs_after_the_first_capture": triggers,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_s_process_tree": round(cpu, 1),
        "work": str(work),
    }
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
