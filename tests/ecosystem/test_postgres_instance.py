"""The Dagster instance on a real PostgreSQL server.

``deploy/postgres/dagster.yaml`` (``DAGSTER_PG_URL``) is copied into a temp
DAGSTER_HOME, a throwaway cluster runs on loopback (``pg_cluster``), and a
real ``dagster dev`` does what a deployment does: the sensor's first tick
requests one run per day of the store, the runs succeed, then a ranged
backfill imports the same days in one run. Runs, events, the sensor's cursor
and our run-log lines are in Postgres (nothing in SQLite files), and the
partition metadata equals the Parquet files.
"""

from __future__ import annotations

import json
import shutil
import time

import pyarrow.parquet as pq
import pytest

from hermes_assets.defs.sensor_cursor import KEY_PREFIX
from hermes_assets.defs.tags import NO_SESSIONS_TAG
from tests.defs.harness import DATASETS, SMALL_DAYS, copy_small, day_path, days_on_disk, new_capture
from tests.e2e.conftest import REPO
from tests.e2e.test_backfill_graphql import (
    BACKFILL_Q,
    DONE_BAD,
    DONE_OK,
    LAUNCH_M,
    MATERIALIZATIONS_Q,
    DagsterDev,
    _metadata,
)
from tests.ecosystem.pg_cluster import pg_cluster  # noqa: F401  (fixture)
from tests.sensor.harness import project_env

pytestmark = pytest.mark.e2e

#: the partitions start on the fixture's last three days: three sensor runs, one 3-day backfill
DAYS = SMALL_DAYS[-3:]
TIMEOUT_S = 180

SENSOR_RUNS_Q = """
query {
  runsOrError(filter: {tags: [{key: "hermes/trigger", value: "sensor"}]}) {
    __typename
    ... on Runs { results { runId status tags { key value } } }
    ... on PythonError { message }
  }
}"""


def _tagged(run: dict, tags: dict[str, str]) -> bool:
    return all({"key": k, "value": v} in run["tags"] for k, v in tags.items())


def _key(name: str) -> str:
    """An asset key as Postgres's event log stores it."""
    return "'" + json.dumps([name]).replace("'", "''") + "'"


def _wait(what: str, probe, dev: DagsterDev, timeout_s: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not done after {timeout_s}s\n{dev.log_tail()}")
        time.sleep(1)


def test_sensor_runs_and_a_ranged_backfill_on_a_postgres_instance(pg_cluster, tmp_path):
    cap = new_capture(tmp_path / "install")
    copy_small(cap.home)
    shutil.copyfile(REPO / "deploy" / "postgres" / "dagster.yaml", cap.dagster_home / "dagster.yaml")
    env = project_env(
        **cap.environ(),
        DAGSTER_PG_URL=pg_cluster.url,
        HERMES_ASSETS_START_DATE=DAYS[0],
        HERMES_ASSETS_POLL_SECONDS="3600",
    )
    dev = DagsterDev(env, tmp_path / "dagster-dev.log")
    try:
        dev.wait_ready()

        # 1. the sensor (on by default) requests one run per day of sessions, and one per span of the
        # partitions' days without any (captured as empty days); the other days are not partitions
        def sensor_runs():
            runs = dev.graphql(SENSOR_RUNS_Q)["runsOrError"]["results"]
            bad = [r for r in runs if r["status"] in ("FAILURE", "CANCELED")]
            assert not bad, f"{bad}\n{dev.log_tail()}"
            done = [r for r in runs if r["status"] == "SUCCESS"]
            of_days = [r for r in done if not _tagged(r, NO_SESSIONS_TAG)]
            return done if len(of_days) == len(DAYS) and len(done) == len(runs) > len(DAYS) else None

        runs = _wait("sensor runs", sensor_runs, dev)
        of_days = [r for r in runs if not _tagged(r, NO_SESSIONS_TAG)]
        partitions = sorted({t["value"] for r in of_days for t in r["tags"] if t["key"] == "dagster/partition"})
        assert partitions == DAYS
        for dataset in DATASETS:
            assert days_on_disk(cap.warehouse, dataset) == DAYS, dataset

        # 2. a ranged backfill of the same days: one run
        params = {
            "assetSelection": [{"path": [n]} for n in DATASETS],
            "partitionNames": DAYS,
            "fromFailure": False,
            "tags": [],
            "title": "history import on Postgres",
        }
        launched = dev.graphql(LAUNCH_M, {"params": params})["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched

        def backfill_done():
            b = dev.graphql(BACKFILL_Q, {"id": launched["backfillId"]})["partitionBackfillOrError"]
            assert b["status"] not in DONE_BAD, f"{b}\n{dev.log_tail()}"
            return b if b["status"] in DONE_OK else None

        backfill = _wait("backfill", backfill_done, dev)
        (run,) = backfill["runs"]
        assert run["status"] == "SUCCESS"

        # the UI's partition metadata (read back from Postgres) equals the files
        for dataset in DATASETS:
            asset = dev.graphql(MATERIALIZATIONS_Q, {"path": [dataset], "partitions": DAYS})["assetOrError"]
            latest = {}
            for mat in asset["assetMaterializations"]:  # newest first
                latest.setdefault(mat["partition"], mat)
            assert sorted(latest) == DAYS
            for day, mat in latest.items():
                assert mat["runId"] == run["runId"]
                md = _metadata(mat["metadataEntries"])
                assert (
                    md["dagster/row_count"]
                    == md["rows_written"]
                    == pq.read_metadata(day_path(cap.warehouse, dataset, day)).num_rows
                )
    finally:
        dev.stop()

    # 3. what Postgres holds: the runs, their events, the sensor's cursor and state, our log lines
    captures = {r["runId"] for r in runs} | {run["runId"]}
    stored_runs = {run_id for (run_id,) in pg_cluster.query("SELECT run_id FROM runs")}
    assert captures <= stored_runs, (captures, stored_runs)
    days_in = ", ".join(f"'{d}'" for d in DAYS)
    ((n_mats,),) = pg_cluster.query(
        "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION' "
        f"AND partition IN ({days_in}) AND asset_key IN ({', '.join(_key(n) for n in DATASETS)})"
    )
    assert n_mats == 2 * len(DAYS) * len(DATASETS)  # the sensor's runs and the backfill's
    plans = pg_cluster.query("SELECT run_id FROM event_logs WHERE event LIKE '%hermes.capture.plan {%'")
    assert sorted(r for (r,) in plans) == sorted(captures)  # one per capture run: the plan op's
    bodies = [
        json.loads(body)
        for (body,) in pg_cluster.query(
            "SELECT instigator_body FROM instigators WHERE instigator_type = 'SENSOR' "
            "AND instigator_body LIKE '%\"hermes_state_sensor\"%'"
        )
    ]
    assert len(bodies) == 1
    # InstigatorState.instigator_data, as stored: a summary naming the state kept in the key-value store
    summary = json.loads(bodies[0]["job_specific_data"]["cursor"])
    lineage, _, digest = summary["state"].partition(".")
    ((kept,),) = pg_cluster.query(f"SELECT value FROM kvs WHERE key = '{KEY_PREFIX}{lineage}'")
    state = json.loads(json.loads(kept)[digest])
    assert list(state["stores"]) == [str(cap.store)] and summary["stores"] == 1
    assert sorted(state["pending"]) == SMALL_DAYS[:-3]  # days before the first partition wait, never dropped
    assert not (cap.dagster_home / "history" / "runs.db").exists()  # no SQLite run storage
