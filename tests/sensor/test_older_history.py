"""History older than the first partition is captured by itself, with no reload, in a real ``dagster dev``.

The partitions start at the earliest session found when the definitions load.
Two ways older history appears while Dagster runs, both in one real ``dagster dev``
(webserver + daemon, the repo's ``dagster.yaml``, the sensor on a 5 s interval)
watching a folder of stores (``HERMES_STATE_DB``), ``HERMES_ASSETS_START_DATE`` unset:

1. Dagster starts on an empty store; then Hermes writes sessions begun just
   before midnight of the previous UTC day;
2. a second store, with older history (three days before that), is added to the folder.

Each day reaches the warehouse within the normal bound (3 sensor intervals plus the
run), while the loaded definitions keep their first partition (today): nobody
reloaded anything; the older days of a tick came in one run (a run a day would wait
its turn in the queue behind the others), which computed their analytics too. A fresh load
(the CLI) then has them as partitions: a ranged backfill over every day writes the same
files. Stores are written by Hermes's own ``SessionDB``.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.analytics.daily import ANALYTICS, USAGE
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from tests.sensor.harness import DAGSTER, REPO, copy_instance_config, free_port, kill_group, project_env, start
from tests.support.hermes_writer import HermesWriter
from tests.support.hosts import HOST_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

POLL_S = 5
#: a day's capture: detected within 3 sensor intervals, then a run of a few seconds (more on a busy machine)
CAPTURE_BOUND_S = 3 * POLL_S + 60
DATASETS = (SESSIONS, MESSAGES, GATEWAY)

PARTITIONS_Q = """
query {
  assetNodes(assetKeys: [{path: ["hermes_sessions"]}]) {
    partitionKeysByDimension { partitionKeys }
  }
}"""


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["data"]


def _loaded_partitions(port: int, proc, log: Path, timeout_s: float = 180) -> list[str]:
    """The partition keys of the definitions the webserver loaded (waits for it to answer)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"dagster dev exited early:\n{log.read_text()[-3000:]}"
        try:
            return _graphql(port, PARTITIONS_Q)["assetNodes"][0]["partitionKeysByDimension"][0]["partitionKeys"]
        except Exception:  # not up yet
            time.sleep(1)
    raise AssertionError(f"dagster dev did not answer within {timeout_s} s:\n{log.read_text()[-3000:]}")


def _session_ids(warehouse: Path, day: str) -> set[str]:
    path = warehouse / SESSIONS / f"day={day}" / HOST_DIR / "part-0.parquet"
    if not path.exists():
        return set()
    return set(pq.read_table(path, columns=["id"]).column("id").to_pylist())


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for d in DATASETS for p in sorted((root / d).rglob("*.parquet"))}


def _captured(warehouse: Path, day: str) -> bool:
    return all((warehouse / d / f"day={day}" / HOST_DIR / "part-0.parquet").exists() for d in DATASETS)


def _write_day(db: Path, home: Path, at_s: float, sids: list[str]) -> None:
    """Hermes writes sessions begun at ``at_s`` (its clock), one exchange each."""
    with HermesWriter(db, home=home) as w:
        for n, sid in enumerate(sids):
            w.at(at_s + n)
            w.session(sid, "cli")
            w.msg(sid, "user", f"question {n}")
            w.msg(sid, "assistant", f"answer {n}")


def _wait_captured(warehouse: Path, day: str, sids: set[str], since: float, proc, log: Path) -> float:
    """Seconds from ``since`` until the day holds every session of ``sids`` in all three datasets."""
    deadline = since + CAPTURE_BOUND_S + 120  # fail with figures rather than hang
    while time.time() < deadline:
        assert proc.poll() is None, f"dagster dev exited:\n{log.read_text()[-3000:]}"
        if _captured(warehouse, day) and sids <= _session_ids(warehouse, day):
            return time.time() - since
        time.sleep(0.5)
    raise AssertionError(f"{day} not captured within {deadline - since:.0f} s:\n{log.read_text()[-4000:]}")


def _sensor_runs_ended(dagster_home: Path, proc, log: Path, timeout_s: float = 180) -> list:
    """The sensor's runs, once none is queued or running (a day's files land before its run ends)."""
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"dagster dev exited:\n{log.read_text()[-3000:]}"
        records = instance.get_run_records(filters=dg.RunsFilter(tags={"hermes/trigger": "sensor"}))
        if all(r.dagster_run.is_finished for r in records):
            return records
        time.sleep(1)
    raise AssertionError(f"sensor runs still in flight after {timeout_s} s:\n{log.read_text()[-3000:]}")


def _span(tags) -> tuple[str, str]:
    """The first and last day of a run (one day, or a range)."""
    one = tags.get("dagster/partition")
    return (
        (one, one) if one else (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"])
    )


def test_older_history_is_captured_with_no_reload(tmp_path):
    dagster_home, warehouse, stores = tmp_path / "dagster_home", tmp_path / "warehouse", tmp_path / "stores"
    copy_instance_config(dagster_home)
    today = dt.datetime.now(dt.UTC).date()
    yesterday, older = today - dt.timedelta(days=1), today - dt.timedelta(days=6)
    #: the added store's days: the oldest, a day without sessions, two more
    added = {older: 6, older + dt.timedelta(days=2): 4, older + dt.timedelta(days=3): 3}
    midnight = dt.datetime.combine(today, dt.time(), dt.UTC).timestamp()

    # an empty store: Hermes created it (schema, no session yet)
    first = stores / "laptop" / "state.db"
    with HermesWriter(first, home=first.parent):
        pass
    env = project_env(
        DAGSTER_HOME=dagster_home,
        HERMES_STATE_DB=stores,
        HERMES_ASSETS_WAREHOUSE=warehouse,
        HERMES_ASSETS_POLL_SECONDS=POLL_S,
        HERMES_ASSETS_POLICY_LIST=tmp_path / "no-policy-list.json",
    )
    port, log = free_port(), tmp_path / "dagster-dev.log"
    proc = start([str(DAGSTER), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)], env, log, cwd=REPO)
    try:
        assert _loaded_partitions(port, proc, log) == [today.isoformat()]  # no history: today only
        time.sleep(2 * POLL_S)  # the sensor has ticked on the empty store

        # 1. sessions begun just before midnight of the previous UTC day
        t1 = time.time()
        _write_day(first, first.parent, midnight - 90, ["late-1", "late-2"])
        lag_yesterday = _wait_captured(warehouse, yesterday.isoformat(), {"late-1", "late-2"}, t1, proc, log)

        # 2. a second store with older history, added to the folder of stores (moved in whole)
        staged = tmp_path / "restore" / "desktop" / "state.db"
        for ago in added.values():
            _write_day(staged, staged.parent, midnight - ago * 86400 + 3600, [f"old-{ago}-1", f"old-{ago}-2"])
        for extra in ("-wal", "-shm"):
            assert not staged.with_name(staged.name + extra).exists()  # closed: the file is whole
        t2 = time.time()
        staged.parent.rename(stores / "desktop")
        lag_older = max(
            _wait_captured(warehouse, day.isoformat(), {f"old-{ago}-1", f"old-{ago}-2"}, t2, proc, log)
            for day, ago in added.items()
        )

        records = _sensor_runs_ended(dagster_home, proc, log)
        # nobody reloaded: the loaded definitions still start today
        assert _loaded_partitions(port, proc, log) == [today.isoformat()]
    finally:
        kill_group(proc)

    instance = dg.DagsterInstance.from_config(str(dagster_home))
    spans = [_span(r.dagster_run.tags) for r in records]
    assert (yesterday.isoformat(), yesterday.isoformat()) in spans, spans
    # the added store's days in one ranged run, over the day without sessions too
    newest = max(added).isoformat()
    assert [s for s in spans if s[0] < yesterday.isoformat()] == [(older.isoformat(), newest)], spans
    failed = [(_span(r.dagster_run.tags), r.dagster_run.status) for r in records]
    assert all(status == dg.DagsterRunStatus.SUCCESS for _, status in failed), failed
    # the runs of the older days computed their analytics too (the automation sensor sees only the
    # partitions of the loaded definitions)
    older_days = {(older + dt.timedelta(days=n)).isoformat() for n in range(4)}
    for dataset in (*DATASETS, *ANALYTICS):
        done = instance.get_materialized_partitions(dg.AssetKey(dataset))
        assert {yesterday.isoformat()} | older_days <= done, (dataset, sorted(done))
    for day in (yesterday, *added):  # (a day without tool calls has no hermes_daily_tools rows, hence no file)
        assert (warehouse / USAGE / f"day={day.isoformat()}" / "part-0.parquet").exists(), day

    # a fresh load of the definitions starts at the older day: a ranged backfill by the CLI over
    # every day writes the very same files into an empty warehouse
    fresh, backfill_home = tmp_path / "fresh", tmp_path / "dagster_home_backfill"
    copy_instance_config(backfill_home)
    cli_log = tmp_path / "backfill.log"
    span = f"{older.isoformat()}...{today.isoformat()}"
    cli = start(
        [
            str(DAGSTER),
            "asset",
            "materialize",
            "-m",
            "hermes_assets.definitions",
            "--select",
            "*",
            "--partition-range",
            span,
        ],
        {**env, "DAGSTER_HOME": str(backfill_home), "HERMES_ASSETS_WAREHOUSE": str(fresh)},
        cli_log,
        cwd=REPO,
    )
    try:
        assert cli.wait(timeout=300) == 0, cli_log.read_text()[-4000:]
    finally:
        kill_group(cli)
    live, backfilled = _files(warehouse), _files(fresh)
    assert set(live) <= set(backfilled) and [n for n in live if live[n] != backfilled[n]] == []

    print(
        "\nolder history:", json.dumps({"lag_yesterday_s": round(lag_yesterday, 1), "lag_older_s": round(lag_older, 1)})
    )
    assert lag_yesterday <= CAPTURE_BOUND_S and lag_older <= CAPTURE_BOUND_S, (lag_yesterday, lag_older)
