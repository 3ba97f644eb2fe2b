"""A backfill launched the way the UI launches it, on a real ``dagster dev``.

``dagster dev -w workspace.yaml`` (webserver + daemon + code server) runs in its
own process group against a temp DAGSTER_HOME and a copy of the small fixture
store; the test calls the webserver's GraphQL ``launchPartitionBackfill`` with
the asset selection and partition names the UI sends, waits for the backfill
daemon to finish it, and checks the rows on disk and the partition metadata the
UI shows. The process group is killed at the end, pass or fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.defs.harness import (
    ANALYTICS,
    DATASETS,
    SMALL_DAYS,
    SMALL_MESSAGES,
    SMALL_SESSIONS,
    day_path,
    days_on_disk,
)
from tests.e2e.conftest import REPO, dagster_bin

pytestmark = pytest.mark.e2e

STARTUP_TIMEOUT_S = 240  # a webserver and a daemon on 2 busy cores
BACKFILL_TIMEOUT_S = 150
DONE_OK = {"COMPLETED", "COMPLETED_SUCCESS"}
DONE_BAD = {"FAILED", "COMPLETED_FAILED", "CANCELED", "CANCELING", "FAILING"}

WORKSPACE_Q = """
query {
  workspaceOrError {
    __typename
    ... on Workspace { locationEntries { name loadStatus
        locationOrLoadError { __typename ... on PythonError { message } } } }
    ... on PythonError { message }
  }
}"""

LAUNCH_M = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId launchedRunIds }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}"""

BACKFILL_Q = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill {
      id status numPartitions partitionNames
      assetSelection { path }
      error { message stack }
      runs { runId status tags { key value } }
    }
    ... on PythonError { message }
    ... on Error { message }
  }
}"""

SENSORS_Q = """
query {
  repositoriesOrError {
    __typename
    ... on RepositoryConnection { nodes { name location { name }
        sensors { id name sensorState { status ticks(limit: 5) { status } } } } }
    ... on PythonError { message }
  }
}"""

STOP_SENSOR_M = """
mutation Stop($id: String!) {
  stopSensor(id: $id) {
    __typename
    ... on StopSensorMutationResult { instigationState { status } }
    ... on PythonError { message }
  }
}"""

MATERIALIZATIONS_Q = """
query Mats($path: [String!]!, $partitions: [String!]) {
  assetOrError(assetKey: {path: $path}) {
    __typename
    ... on Asset {
      assetMaterializations(partitions: $partitions) {
        partition runId
        metadataEntries {
          label
          ... on IntMetadataEntry { intRepr }
          ... on PathMetadataEntry { path }
          ... on TextMetadataEntry { text }
        }
      }
    }
  }
}"""


# --------------------------------------------------------------------------
# a real dagster dev
# --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DagsterDev:
    """``dagster dev -w workspace.yaml`` (or ``dg dev`` with ``dg=True``) on a free loopback port."""

    def __init__(self, env: dict, log_path: Path, dg: bool = False):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        command = (
            [str(Path(dagster_bin()).with_name("dg")), "dev"] if dg else [dagster_bin(), "dev", "-w", "workspace.yaml"]
        )
        self.proc = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: webserver, daemon, code server, runs
        )

    def log_tail(self, n: int = 6000) -> str:
        self._log.flush()
        return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"dagster dev exited with {self.proc.returncode}:\n{self.log_tail()}")

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        req = urllib.request.Request(self.url + "/graphql", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            doc = json.loads(resp.read())
        assert not doc.get("errors"), doc["errors"]
        return doc["data"]

    def wait_ready(self, loaded: bool = True) -> dict:
        """Wait for the webserver and the code location; returns the location's ``locationOrLoadError``
        (with ``loaded=False`` a load error is an answer too, not a failure)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            self._alive()
            try:
                with urllib.request.urlopen(self.url + "/server_info", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"webserver not up after {STARTUP_TIMEOUT_S}s:\n{self.log_tail()}")
            time.sleep(0.5)
        while True:  # the code location must be loaded before a backfill can target it
            self._alive()
            ws = self.graphql(WORKSPACE_Q)["workspaceOrError"]
            entries = ws.get("locationEntries") or []
            ready = [e for e in entries if e["name"] == "hermes_assets" and e["loadStatus"] == "LOADED"]
            if ready:
                error = ready[0]["locationOrLoadError"]
                if loaded:
                    assert error["__typename"] == "RepositoryLocation", error
                return error
            if time.monotonic() > deadline:
                pytest.fail(f"code location not loaded: {ws}\n{self.log_tail()}")
            time.sleep(0.5)

    def running_sensors(self) -> list[dict]:
        repos = self.graphql(SENSORS_Q)["repositoriesOrError"]
        assert repos["__typename"] == "RepositoryConnection", repos
        return [s for r in repos["nodes"] for s in r["sensors"] if s["sensorState"]["status"] == "RUNNING"]

    def settle_and_stop_sensors(self, timeout_s: float = 60) -> list[str]:
        """Let every running sensor finish its first tick, then turn it off as the UI's
        toggle does; returns their names. (A tick already started when the sensor is
        stopped would still evaluate: waiting for it closes that race.)"""
        deadline = time.monotonic() + timeout_s
        while True:
            self._alive()
            running = self.running_sensors()
            ticks = [[t["status"] for t in s["sensorState"]["ticks"]] for s in running]
            if all(t and "STARTED" not in t for t in ticks):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"sensors never finished a first tick: {running}\n{self.log_tail()}")
            time.sleep(0.5)
        stopped = []
        for sensor in running:
            result = self.graphql(STOP_SENSOR_M, {"id": sensor["id"]})["stopSensor"]
            assert result["__typename"] == "StopSensorMutationResult", result
            assert result["instigationState"]["status"] == "STOPPED", result
            stopped.append(sensor["name"])
        assert not self.running_sensors()
        return stopped

    def stop(self) -> None:
        try:
            pgid = os.getpgid(self.proc.pid)
        except ProcessLookupError:
            pgid = None
        if pgid is not None:
            for sig, wait_s in ((signal.SIGTERM, 8), (signal.SIGKILL, 10)):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    continue
                # the leader is gone; make sure no member of the group survives it
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.5)
        self._log.close()


@pytest.fixture
def dagster_dev(dagster_env, installation):
    """A running ``dagster dev`` with its sensors turned off, then the fixture store in place.

    The store arrives only once the sensors are off (the watermark sensor is on by
    default and would race the backfill with one run per day); until then the
    Hermes home is empty, so the sensor's first tick skips (SPEC R9), and with a
    one-hour interval there is no second tick before it is stopped.
    """
    aside = installation.root / "store-aside.db"
    shutil.move(installation.store, aside)
    env = {**dagster_env, "HERMES_ASSETS_POLL_SECONDS": "3600"}
    dev = DagsterDev(env, installation.root / "dagster-dev.log")
    try:
        dev.wait_ready()
        dev.settle_and_stop_sensors()
        shutil.move(aside, installation.store)
        yield dev
    finally:
        dev.stop()


# --------------------------------------------------------------------------
# the test
# --------------------------------------------------------------------------


def _metadata(entries: list[dict]) -> dict:
    out = {}
    for e in entries:
        if "intRepr" in e:
            out[e["label"]] = int(e["intRepr"])
        elif "path" in e:
            out[e["label"]] = e["path"]
        elif "text" in e:
            out[e["label"]] = e["text"]
    return out


def test_backfill_launched_through_graphql_writes_every_day(dagster_dev, installation):
    params = {
        "assetSelection": [{"path": [name]} for name in DATASETS],
        "partitionNames": SMALL_DAYS,
        "fromFailure": False,
        "tags": [],
        "title": "hermes history import (e2e test)",
    }
    launched = dagster_dev.graphql(LAUNCH_M, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill_id = launched["backfillId"]

    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    while True:
        backfill = dagster_dev.graphql(BACKFILL_Q, {"id": backfill_id})["partitionBackfillOrError"]
        assert backfill["__typename"] == "PartitionBackfill", backfill
        if backfill["status"] in DONE_OK:
            break
        if backfill["status"] in DONE_BAD:
            pytest.fail(f"backfill ended {backfill['status']}: {backfill}\n{dagster_dev.log_tail()}")
        if time.monotonic() > deadline:
            pytest.fail(
                f"backfill still {backfill['status']} after {BACKFILL_TIMEOUT_S}s: {backfill}\n{dagster_dev.log_tail()}"
            )
        time.sleep(1)

    assert sorted(backfill["partitionNames"]) == SMALL_DAYS
    assert sorted(tuple(a["path"]) for a in backfill["assetSelection"]) == sorted((n,) for n in DATASETS)
    # BackfillPolicy.single_run(): the whole range is ONE run
    (run,) = backfill["runs"]
    assert run["status"] == "SUCCESS", run
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags.get("dagster/backfill") == backfill_id
    assert (tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")) == (
        SMALL_DAYS[0],
        SMALL_DAYS[-1],
    )

    # rows on disk for every day, in all three datasets
    wh = installation.warehouse
    for dataset in DATASETS:
        assert days_on_disk(wh, dataset) == SMALL_DAYS, dataset
    totals = {d: sum(pq.read_metadata(day_path(wh, d, day)).num_rows for day in SMALL_DAYS) for d in DATASETS}
    assert totals["hermes_sessions"] == SMALL_SESSIONS
    assert totals["hermes_messages"] == SMALL_MESSAGES

    # the partition metadata the UI shows matches the files
    for dataset in DATASETS:
        asset = dagster_dev.graphql(MATERIALIZATIONS_Q, {"path": [dataset], "partitions": SMALL_DAYS})["assetOrError"]
        assert asset["__typename"] == "Asset", asset
        mats = {m["partition"]: m for m in asset["assetMaterializations"]}
        assert sorted(mats) == SMALL_DAYS, dataset
        for day, mat in mats.items():
            assert mat["runId"] == run["runId"]
            md = _metadata(mat["metadataEntries"])
            path = day_path(wh, dataset, day)
            assert md["rows_written"] == pq.read_metadata(path).num_rows == md["dagster/row_count"], (dataset, day)
            assert md["bytes"] == path.stat().st_size, (dataset, day)
            assert md["path"] == str(path)
            assert md["rows_retained_source_deleted"] == 0
            assert not [label for label in md if label.startswith("run_")]  # the day's own figures only


# --------------------------------------------------------------------------
# the checks of a ranged backfill, day by day
# --------------------------------------------------------------------------

#: (asset, check) of every check the write step evaluates on each day it wrote
DAY_CHECKS = [(asset, "day_valid") for asset in DATASETS]
#: the checks about the stores and the runs, on the external asset hermes_state: once per run
STATE_CHECKS = [
    ("hermes_state", name) for name in ("stores_readable", "sessions_within_partition_range", "days_captured")
]

CHECK_EXECUTIONS_Q = """
query Executions($key: AssetKeyInput!, $name: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $name, limit: 200) {
    runId status partition
    evaluation { metadataEntries { label ... on IntMetadataEntry { intRepr } } }
  }
}"""

ASSET_CHECKS_Q = """
query Checks($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    __typename
    ... on AssetNode { assetChecksOrError { __typename ... on AssetChecks { checks {
        name
        executionForLatestMaterialization { status partition }
        partitionStatuses { __typename
          ... on AssetCheckTimePartitionStatuses { ranges { startKey endKey status } } }
    } } } }
  }
}"""

SENSOR_TARGET_Q = """
query {
  sensorOrError(sensorSelector: {repositoryName: "__repository__", repositoryLocationName: "hermes_assets",
                                 sensorName: "hermes_state_sensor"}) {
    __typename
    ... on Sensor { targets { pipelineName } assetSelection { assetSelectionString assetKeys { path } }
                    sensorState { ticks(limit: 5) { status logEvents { events { level message } } } } }
    ... on PythonError { message }
  }
}"""


def backfill(dev: DagsterDev, days: list[str], title: str) -> dict:
    """A backfill of the three datasets over ``days``, as the UI launches it; waits for its end."""
    params = {
        "assetSelection": [{"path": [name]} for name in DATASETS],
        "partitionNames": days,
        "fromFailure": False,
        "tags": [],
        "title": title,
    }
    launched = dev.graphql(LAUNCH_M, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    while True:
        found = dev.graphql(BACKFILL_Q, {"id": launched["backfillId"]})["partitionBackfillOrError"]
        assert found["__typename"] == "PartitionBackfill", found
        if found["status"] in DONE_OK:
            return found
        if found["status"] in DONE_BAD or time.monotonic() > deadline:
            pytest.fail(f"backfill {found['status']}: {found}\n{dev.log_tail()}")
        time.sleep(1)


def check_executions(dev: DagsterDev, asset: str, check: str, run_id: str) -> dict[str | None, dict]:
    """One run's executions of one check, by partition, as GraphQL (and the UI) reads them."""
    found = dev.graphql(CHECK_EXECUTIONS_Q, {"key": {"path": [asset]}, "name": check})["assetCheckExecutions"]
    mine = [e for e in found if e["runId"] == run_id]
    by_partition = {e["partition"]: e for e in mine}
    assert len(by_partition) == len(mine), f"{asset}/{check}: a partition evaluated twice: {mine}"
    return by_partition


def test_a_ranged_backfill_shows_each_check_passed_on_each_day(dagster_dev, installation):
    """After a 5-day backfill (one run), GraphQL shows one SUCCEEDED evaluation per day check per
    day and one of each check of hermes_state, none planned or SKIPPED, and each check's latest
    execution passed; the sensor's target reads as the datasets' names, and its tick's summary was
    printed once and is in the tick's log."""
    days = SMALL_DAYS[2:7]
    found = backfill(dagster_dev, days, "hermes checks per day (e2e test)")
    (run,) = found["runs"]
    assert run["status"] == "SUCCESS", run
    for asset, check in STATE_CHECKS:
        executions = check_executions(dagster_dev, asset, check, run["runId"])
        assert {day: e["status"] for day, e in executions.items()} == {None: "SUCCEEDED"}, (asset, check)
    for asset, check in DAY_CHECKS:
        executions = check_executions(dagster_dev, asset, check, run["runId"])
        assert sorted(executions, key=str) == days, (asset, check, executions)
        assert {e["status"] for e in executions.values()} == {"SUCCEEDED"}, (asset, check, executions)
        for day, execution in executions.items():
            entries = {m["label"]: m.get("intRepr") for m in execution["evaluation"]["metadataEntries"]}
            assert (
                int(entries["rows_checked"]) == pq.read_metadata(day_path(installation.warehouse, asset, day)).num_rows
            )
    # what the asset's page and the lineage show: every check passed, on every day it ran
    for asset in DATASETS:
        node = dagster_dev.graphql(ASSET_CHECKS_Q, {"path": [asset]})["assetNodeOrError"]
        checks = {c["name"]: c for c in node["assetChecksOrError"]["checks"]}
        for name in (c for a, c in DAY_CHECKS if a == asset):
            latest = checks[name]["executionForLatestMaterialization"]
            assert latest is not None and latest["status"] == "SUCCEEDED", (asset, name, latest)
            ranges = checks[name]["partitionStatuses"]["ranges"]
            assert [(r["startKey"], r["endKey"], r["status"]) for r in ranges] == [(days[0], days[-1], "SUCCEEDED")]

    sensor = dagster_dev.graphql(SENSOR_TARGET_Q)["sensorOrError"]
    assert sensor["__typename"] == "Sensor", sensor
    target = sensor["assetSelection"]["assetSelectionString"]
    assert all(f'key:"{name}"' in target for name in DATASETS) and "AssetSelection(" not in target, target
    # the datasets, and the analytics that the run of a day older than the first partition computes
    assert sorted(k["path"][0] for k in sensor["assetSelection"]["assetKeys"]) == sorted([*DATASETS, *ANALYTICS])
    # the one tick (store not there yet): its summary is in the tick's log; the console, quiet at
    # info, prints no tick (HERMES_ASSETS_LOG_LEVEL=debug prints each once: tests/ecosystem/test_structured_logs.py)
    (tick,) = [t for t in sensor["sensorState"]["ticks"] if t["status"] != "STARTED"]
    kept = [e for e in tick["logEvents"]["events"] if e["message"].startswith("hermes.sensor.tick ")]
    assert [e["level"] for e in kept] == ["INFO"], tick
    printed = [line for line in dagster_dev.log_tail(10**7).splitlines() if "hermes.sensor.tick" in line]
    assert printed == [], printed
