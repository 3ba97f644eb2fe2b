"""Many changed days in one tick (a first start on a long history) become one ranged run."""

from __future__ import annotations

import dagster as dg
import pyarrow.parquet as pq
import pytest
import structlog

from hermes_assets.defs.resources import HermesStores, HermesWarehouse
from hermes_assets.defs.sensors import run_requests
from hermes_assets.defs.tags import NO_SESSIONS_TAG
from hermes_assets.lib.basics import schemas
from tests.conftest import copy_fixture, suite_days
from tests.sensor.harness import SENSOR, _instance, definitions
from tests.support.hosts import HOST_FILES

SMALL_DAYS = [f"2026-06-{d:02d}" for d in range(1, 15)]
DATASETS = ("hermes_sessions", "hermes_messages", "ai_gateway_messages_hermes")
ANALYTICS = tuple(schemas.ANALYTICS)


def test_few_days_are_one_run_each():
    requests = run_requests(
        [("2026-06-02", "bbbbbbbbbbbb"), ("2026-06-01", "aaaaaaaaaaaa")], max_runs=14, days=suite_days()
    )
    assert sorted(r.partition_key for r in requests) == ["2026-06-01", "2026-06-02"]
    assert {r.run_key for r in requests} == {"2026-06-01@aaaaaaaaaaaa", "2026-06-02@bbbbbbbbbbbb"}


def test_many_days_are_one_ranged_run_with_a_key_that_moves_with_any_day():
    days = [(f"2026-06-{d:02d}", f"{d:012x}") for d in range(1, 21)]
    (request,) = run_requests(days, max_runs=14, days=suite_days())
    assert request.partition_key is None
    assert request.tags["dagster/asset_partition_range_start"] == "2026-06-01"
    assert request.tags["dagster/asset_partition_range_end"] == "2026-06-20"
    assert request.tags["hermes/trigger"] == "sensor"
    changed = list(days)
    changed[5] = (changed[5][0], "ffffffffffff")
    (again,) = run_requests(changed, max_runs=14, days=suite_days())
    assert again.run_key != request.run_key  # a reused key would be silently skipped by Dagster


def test_the_sensor_targets_the_datasets_by_name_and_its_runs_name_their_day_checks():
    """The UI shows a sensor's target as its selection's string: the three datasets' names (a
    selection that also subtracts a check shows as a Python repr). Its runs name their assets
    and checks: each dataset's day_valid, the capture's own checks; hermes_state's checks are
    reported by every run without being planned."""
    from hermes_assets.defs.capture_assets import capture_asset
    from hermes_assets.defs.sensors import SENSOR_TARGET

    target = str(SENSOR_TARGET)
    assert target == (
        'key:"hermes_sessions" or key:"hermes_messages" or key:"ai_gateway_messages_hermes"'
        + "".join(f' or key:"{name}"' for name in ANALYTICS)
    )
    for request in run_requests([("2026-06-01", "aaaaaaaaaaaa")], 14, days=suite_days()) + run_requests(
        [(f"2026-06-{d:02d}", f"{d:012x}") for d in range(1, 21)], 14, days=suite_days()
    ):
        assert set(request.asset_selection) == {dg.AssetKey(k) for k in (*DATASETS, *ANALYTICS)}
        assert set(request.asset_check_keys) == capture_asset(suite_days()).check_keys
        assert {k.name for k in request.asset_check_keys} == {"day_valid"} and len(request.asset_check_keys) == 3


@pytest.mark.slow
def test_first_tick_on_a_long_history_materializes_every_day_in_one_run(tmp_path, monkeypatch):
    """The small fixture spans 14 days; with the batch limit at 5, the first tick asks for one
    ranged run, and running exactly what it asks writes every day of the three datasets."""
    monkeypatch.setenv("HERMES_ASSETS_SENSOR_MAX_RUNS", "5")
    home = tmp_path / "hermes"
    copy_fixture("small", home)
    defs = definitions()
    hermes = HermesStores(hermes_home=str(home))
    warehouse = HermesWarehouse(root=str(tmp_path / "warehouse"))
    ctx = dg.build_sensor_context(
        cursor=None, definitions=defs, resources={"hermes": hermes, "warehouse": warehouse}, instance=_instance()
    )
    with structlog.testing.capture_logs() as events:
        data = defs.resolve_sensor_def(SENSOR).evaluate_tick(ctx)
    (request,) = [r for r in data.run_requests if not NO_SESSIONS_TAG.items() <= r.tags.items()]
    # the tick log counts runs created, not days: 14 days in one ranged run is one run (and one run
    # per span of the partition days with no session: before the fixture's first day, after its last)
    (tick,) = [e for e in events if e["event"] == "hermes.sensor.tick"]
    assert (tick["runs_requested"], tick["days_requested"], tick["stores_read"]) == (3, 14, 1)
    assert (request.tags["dagster/asset_partition_range_start"], request.tags["dagster/asset_partition_range_end"]) == (
        SMALL_DAYS[0],
        SMALL_DAYS[-1],
    )

    warehouse = tmp_path / "warehouse"
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={dg.AssetKey(k) for k in ("hermes_sessions", "hermes_messages", "ai_gateway_messages_hermes")}
    )
    result = job.execute_in_process(
        instance=dg.DagsterInstance.ephemeral(),
        tags=request.tags,
        resources={"hermes": hermes, "warehouse": HermesWarehouse(root=str(warehouse))},
    )
    assert result.success
    written = sorted(p.parent.parent.name[4:] for p in (warehouse / "ai_gateway_messages_hermes").glob(HOST_FILES))
    assert written == SMALL_DAYS
    sessions = sum(pq.ParquetFile(p).metadata.num_rows for p in (warehouse / "hermes_sessions").glob(HOST_FILES))
    assert sessions == 59


def test_a_day_before_the_first_partition_is_a_run_naming_its_day_with_its_analytics():
    """History older than the first partition: a run of its own day, which names its partition itself
    (the loaded definitions lack it; the run's own load has it) and computes the day's analytics."""
    first = suite_days().first()
    (request,) = run_requests([("2020-01-01", "aaaaaaaaaaaa")], max_runs=14, days=suite_days())
    assert first > "2020-01-01"
    assert request.partition_key == "2020-01-01" and request.tags["dagster/partition"] == "2020-01-01"
    assert request.run_key == "2020-01-01@aaaaaaaaaaaa" and request.tags["hermes/trigger"] == "sensor"
    assert request.tags["dagster/priority"] == "-1"  # the queue starts the live days' runs first
    keys = {k.to_user_string() for k in request.asset_selection}
    assert keys == {"hermes_sessions", "hermes_messages", "ai_gateway_messages_hermes"} | {
        *ANALYTICS,
    }
    (regular,) = run_requests([(first, "bbbbbbbbbbbb")], max_runs=14, days=suite_days())
    assert "dagster/partition" not in regular.tags  # Dagster resolves it, checking the key
    assert {k.to_user_string() for k in regular.asset_selection} == keys  # every run computes its analytics


def test_the_days_before_the_first_partition_are_one_ranged_run_naming_its_range_with_their_analytics():
    """Several days older than the first partition (one tick's): one ranged run over them, which
    names its range itself (the loaded definitions lack those days), computes their analytics and
    waits behind the live days' runs in the queue."""
    assert suite_days().first() > "2020-01-05"
    (request,) = run_requests(
        [("2020-01-05", "bbbbbbbbbbbb"), ("2020-01-01", "aaaaaaaaaaaa")], max_runs=1, days=suite_days()
    )
    assert request.partition_key is None and "dagster/partition" not in request.tags
    assert (request.tags["dagster/asset_partition_range_start"], request.tags["dagster/asset_partition_range_end"]) == (
        "2020-01-01",
        "2020-01-05",
    )
    assert request.run_key.startswith("2020-01-01...2020-01-05@") and request.tags["dagster/priority"] == "-1"
    assert {k.to_user_string() for k in request.asset_selection} == {
        "hermes_sessions",
        "hermes_messages",
        "ai_gateway_messages_hermes",
        *ANALYTICS,
    }
