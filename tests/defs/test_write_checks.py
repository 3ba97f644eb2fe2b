"""The check the write step evaluates on the files it wrote (SPEC §2, §5, §6).

``day_valid`` of each dataset (its rules: ``key_unique`` of each dataset,
``required_columns_not_null`` and ``date_matches_message_created_at`` of the
gateway dataset) is declared on the capture's assets, partitioned by day, and
reported by ``write_partitions`` itself: one evaluation per dataset and per day
of the run, so no day a run wrote is left "skipped" or planned. A failing day
must still fail visibly, on its day only: in the run's events, and on the asset
in the instance the UI, ``dg`` and GraphQL read, with the rules it breaks, the
counts and the rows that break them.
"""

from __future__ import annotations

import json

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hermes_assets.defs import checks
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.defs.harness import SMALL_DAYS, day_check_results, day_path, read_day

pytestmark = pytest.mark.slow  # Dagster runs (tests/support/fast_lane.py)

FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]
FOREIGN = "/elsewhere/.hermes/state.db"  # a store this installation does not read: its rows are kept as they are


def _foreign_gateway_row(table: pa.Table, *, date: str) -> dict:
    """A canonical row of a store not read here (its rows are not ours to judge), with ``date``."""
    row = table.slice(0, 1).to_pylist()[0]
    attrs = json.loads(row["attributes"])
    attrs.setdefault("gateway", {})["source_path_hash"] = "not-a-store-of-this-installation"
    row["attributes"] = json.dumps(attrs)
    row["part_id"] = row["part_id"] + ".foreign"
    row["date"] = date
    return row


def _append_rows(path, dataset: str, rows: list[dict]) -> None:
    table = read_day(path.parents[3], dataset, path.parent.parent.name[4:])  # <dataset>/day=<day>/host=<label>/
    extra = pa.Table.from_pylist(rows, schema=table.schema)
    pq.write_table(pa.concat_tables([table, extra]), path)


DAY_CHECKS = [(dataset, checks.DAY_VALID) for dataset in (SESSIONS, MESSAGES, GATEWAY)]


def _run_records(instance, run_id: str) -> dict[tuple[str, str, str | None], str]:
    """What the instance holds for one run's day checks, as the UI, ``dg`` and GraphQL read
    it: (asset, check, partition) -> execution status. A check Dagster planned on a day and
    that was never evaluated stays PLANNED, which the UI shows as skipped once the run ends."""
    found = {}
    for dataset, name in DAY_CHECKS:
        key = dg.AssetCheckKey(dg.AssetKey(dataset), name)
        for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=1000):
            if record.run_id == run_id:
                found[(dataset, name, record.partition)] = record.status.value
    return found


def test_a_ranged_run_reports_each_check_on_each_day_it_wrote(small, instance):
    result = small.materialize(FIRST, LAST, instance=instance)
    assert result.success
    found = day_check_results(result)
    for dataset, name in DAY_CHECKS:
        days = {day: found[(dataset, name, day)] for day in SMALL_DAYS}
        assert all(e.passed for e in days.values()), (dataset, name)
        assert all(e.target_materialization_data.run_id == result.run_id for e in days.values())
        rows = {day: e.metadata["rows_checked"].value for day, e in days.items()}
        assert rows == {day: pq.read_metadata(day_path(small.warehouse, dataset, day)).num_rows for day in SMALL_DAYS}
        assert all(e.metadata["rules_failed"].value == [] for e in days.values())
        assert (dataset, name, None) not in found  # no run-wide evaluation beside the days'
    records = _run_records(instance, result.run_id)
    assert records == {(d, n, day): "SUCCEEDED" for d, n in DAY_CHECKS for day in SMALL_DAYS}
    # every check Dagster planned in the run was evaluated: nothing left planned, on any asset
    planned = [
        (key.to_user_string(), record.partition)
        for key in small.defs().resolve_asset_graph().asset_check_keys
        for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=1000)
        if record.run_id == result.run_id and record.status.value == "PLANNED"
    ]
    assert planned == []


def test_a_day_without_rows_passes_with_nothing_checked(capture, instance):
    """No store at all: every day of the run is materialized with no file, and each check passes
    on it (a day planned and left without an evaluation would show as skipped)."""
    result = capture.materialize(FIRST, SMALL_DAYS[2], instance=instance)
    assert result.success and capture.files() == {}
    found = day_check_results(result)
    for dataset, name in DAY_CHECKS:
        for day in SMALL_DAYS[:3]:
            check = found[(dataset, name, day)]
            assert check.passed and check.metadata["rows_checked"].value == 0
    assert set(_run_records(instance, result.run_id).values()) == {"SUCCEEDED"}


def test_rows_that_break_the_checks_fail_them_on_their_day_only_naming_the_rows(small, instance):
    assert small.materialize(FIRST, LAST, instance=instance).success
    # a day file holding rows of another store (kept as they are by every merge): the same row
    # twice, and a `date` that is not its message's day
    gateway = read_day(small.warehouse, GATEWAY, FIRST)
    foreign = _foreign_gateway_row(gateway, date=LAST)
    _append_rows(day_path(small.warehouse, GATEWAY, FIRST), GATEWAY, [foreign, foreign])
    session = read_day(small.warehouse, SESSIONS, FIRST).slice(0, 1).to_pylist()[0] | {"store": FOREIGN}
    _append_rows(day_path(small.warehouse, SESSIONS, FIRST), SESSIONS, [session, session])

    result = small.materialize(FIRST, LAST, instance=instance)
    assert result.success  # the checks report, they do not fail the run (not blocking)
    found = day_check_results(result)
    failing = {GATEWAY, SESSIONS}
    for dataset, name in DAY_CHECKS:
        for day in SMALL_DAYS:
            assert found[(dataset, name, day)].passed is not (dataset in failing and day == FIRST)

    gateway = found[(GATEWAY, checks.DAY_VALID, FIRST)].metadata
    assert gateway["rules_failed"].value == [checks.KEY_UNIQUE, checks.DATE_MATCHES]
    assert gateway["duplicate_rows"].value == 1
    assert gateway["rows"].value[checks.KEY_UNIQUE] == [{"part_id": foreign["part_id"], "copies": 2}]
    assert gateway["mismatched_rows"].value == 2
    dates = gateway["rows"].value[checks.DATE_MATCHES]
    assert [(r["part_id"], r["date"]) for r in dates] == [(foreign["part_id"], LAST)] * 2
    assert gateway["null_counts"].value == {} and gateway["rows_checked"].value > 0
    sessions_day = found[(SESSIONS, checks.DAY_VALID, FIRST)].metadata
    assert sessions_day["rules_failed"].value == [checks.KEY_UNIQUE] and sessions_day["duplicate_rows"].value == 1
    (dup,) = sessions_day["rows"].value[checks.KEY_UNIQUE]
    assert (dup["store"], dup["id"], dup["copies"]) == (FOREIGN, session["id"], 2)
    assert "rows" not in found[(GATEWAY, checks.DAY_VALID, LAST)].metadata  # a passing day names no rows

    # on the asset, where the UI, dg and GraphQL look: failed on that day, passed on the others
    records = _run_records(instance, result.run_id)
    assert {k for k, status in records.items() if status == "FAILED"} == {(d, checks.DAY_VALID, FIRST) for d in failing}
    assert set(records.values()) == {"SUCCEEDED", "FAILED"}
    assert len(records) == len(DAY_CHECKS) * len(SMALL_DAYS)
    key = dg.AssetCheckKey(dg.AssetKey(SESSIONS), checks.DAY_VALID)
    (latest,) = [
        r
        for r in instance.event_log_storage.get_asset_check_execution_history(key, limit=100)
        if r.run_id == result.run_id and r.partition == FIRST
    ]
    assert latest.event.dagster_event.asset_check_evaluation_data.metadata["duplicate_rows"].value == 1


def test_the_stores_and_the_run_are_checked_once_per_run_on_hermes_state(small, instance):
    """The checks about the stores and the run are on ``hermes_state`` (not partitioned): each run
    reports them once, unplanned, whatever its days, and none is planned on the days."""
    result = small.materialize(FIRST, LAST, instance=instance)
    assert result.success
    found = day_check_results(result)
    state = {name for (asset, name, _) in found if asset == "hermes_state"}
    assert state == {"stores_readable", "sessions_within_partition_range", "days_captured"}
    assert all(found[("hermes_state", name, None)].passed for name in state)
    assert found[("hermes_state", "stores_readable", None)].metadata["stores"].value == 1
    for name in state:
        key = dg.AssetCheckKey(dg.AssetKey("hermes_state"), name)
        records = instance.event_log_storage.get_asset_check_execution_history(key, limit=100)
        assert [(r.partition, r.status.value) for r in records if r.run_id == result.run_id] == [(None, "SUCCEEDED")]


def test_a_one_day_run_reports_its_checks_on_its_partition(small, instance):
    """A run of one partition (as the sensor requests them): the result names its day and the
    materialization it judged."""
    assert small.materialize(FIRST, instance=instance).success
    path = day_path(small.warehouse, SESSIONS, FIRST)
    session = read_day(small.warehouse, SESSIONS, FIRST).slice(0, 1).to_pylist()[0] | {"store": FOREIGN}
    _append_rows(path, SESSIONS, [session, session])
    job = small.defs().resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance, partition_key=FIRST, asset_selection=[dg.AssetKey(d) for d in (GATEWAY, SESSIONS, MESSAGES)]
    )
    found = day_check_results(result)
    assert {(d, n, FIRST) for d, n in DAY_CHECKS} <= set(found)
    check = found[(SESSIONS, checks.DAY_VALID, FIRST)]
    assert not check.passed and check.partition == FIRST
    assert check.target_materialization_data is not None and check.target_materialization_data.run_id == result.run_id
    assert set(_run_records(instance, result.run_id)) == {(d, n, FIRST) for d, n in DAY_CHECKS}


def test_files_left_as_they_were_are_read_with_their_defaults(small):
    """A day the run did not rewrite (superseded, no store read) is judged as it stands: files
    of an earlier version, without ``generation``/``replaced``, read with their defaults."""
    assert small.materialize(FIRST).success
    for dataset in (SESSIONS, MESSAGES):
        path = day_path(small.warehouse, dataset, FIRST)
        pq.write_table(pq.read_table(path).drop_columns(list(schemas.ADDED_COLUMNS)), path)
    figures = checks.written_figures(Warehouse(str(small.warehouse)), {SESSIONS: {FIRST: 1}, MESSAGES: {FIRST: 1}})
    evaluations = checks.day_evaluations(figures)
    by_key = {(e.asset_key.to_user_string(), e.check_name, e.partition): e for e in evaluations}
    for dataset in (SESSIONS, MESSAGES):
        check = by_key[(dataset, checks.DAY_VALID, FIRST)]
        assert check.passed and check.metadata["rows_checked"].value > 0
    # no day of the gateway dataset given: nothing evaluated for it
    assert not [e for e in evaluations if e.asset_key.to_user_string() == GATEWAY]


def test_day_figures_count_each_violation():
    ts = pa.array([1_780_272_000_000, 1_780_272_000_000, None], pa.timestamp("ms", tz="UTC"))  # 2026-06-01
    columns = {name: pa.array(["x", "x", "y"]) for name in schemas.REQUIRED_GATEWAY_COLUMNS}
    columns |= {"message_created_at": ts, "date": pa.array(["2026-06-01", "2026-06-02", "2026-06-01"])}
    columns["part_id"] = pa.array(["p1", "p1", "p2"])
    columns["role"] = pa.array(["user", None, None])
    figures = checks.day_figures(GATEWAY, pa.table(columns))
    assert (figures.rows, figures.duplicates) == (3, 1)
    assert figures.nulls == {"message_created_at": 1, "role": 2}
    assert figures.mismatched == 1  # a NULL time is reported by the required-columns check, not here
    # the rows each failing check names: their key and what is wrong
    assert figures.samples[checks.KEY_UNIQUE] == [{"part_id": "p1", "copies": 2}]
    assert figures.samples[checks.REQUIRED_NOT_NULL] == [
        {"part_id": "p1", "null_columns": ["role"]},
        {"part_id": "p2", "null_columns": ["message_created_at", "role"]},
    ]
    (mismatch,) = figures.samples[checks.DATE_MATCHES]
    assert (mismatch["part_id"], mismatch["date"]) == ("p1", "2026-06-02")
    passed, metadata = checks.day_result(GATEWAY, figures)
    assert not passed and metadata["null_counts"] == {"message_created_at": 1, "role": 2}
    assert metadata["rules_failed"] == [checks.KEY_UNIQUE, checks.REQUIRED_NOT_NULL, checks.DATE_MATCHES]
    assert metadata["rows"] == {rule: figures.samples[rule] for rule in metadata["rules_failed"]}
    assert metadata["rows_checked"] == 3 and metadata["duplicate_rows"] == 1 and metadata["mismatched_rows"] == 1
