"""The checks the write step evaluates on the files it wrote (SPEC §2, §5, §6).

``key_unique`` (each dataset), ``required_columns_not_null`` and
``date_matches_message_created_at`` (the gateway dataset) are declared on the
capture's assets, partitioned by day, and reported by ``write_partitions``
itself: one evaluation per check and per day of the run, so no day a run
wrote is left "skipped". A failing one must still fail visibly, on its day
only: in the run's events, and on the asset in the instance the UI, ``dg``
and GraphQL read, with the count and the rows that break it.
"""

from __future__ import annotations

import json

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hermes_assets.defs import checks
from hermes_assets.lib import schemas
from hermes_assets.lib.schemas import GATEWAY, MESSAGES, SESSIONS
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


def _run_records(instance, run_id: str) -> dict[tuple[str, str, str | None], str]:
    """What the instance holds for one run's write checks, as the UI, ``dg`` and GraphQL read
    it: (asset, check, partition) -> execution status. A check Dagster planned on a day and
    that was never evaluated stays PLANNED, which the UI shows as skipped once the run ends."""
    found = {}
    for dataset, name in checks.WRITE_CHECKS:
        key = dg.AssetCheckKey(dg.AssetKey(dataset), name)
        for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=1000):
            if record.run_id == run_id:
                found[(dataset, name, record.partition)] = record.status.value
    return found


def test_a_ranged_run_reports_each_check_on_each_day_it_wrote(small, instance):
    result = small.materialize(FIRST, LAST, instance=instance)
    assert result.success
    found = day_check_results(result)
    for dataset, name in checks.WRITE_CHECKS:
        days = {day: found[(dataset, name, day)] for day in SMALL_DAYS}
        assert all(e.passed for e in days.values()), (dataset, name)
        assert all(e.target_materialization_data.run_id == result.run_id for e in days.values())
        rows = {day: e.metadata["rows_checked"].value for day, e in days.items()}
        assert rows == {day: pq.read_metadata(day_path(small.warehouse, dataset, day)).num_rows for day in SMALL_DAYS}
        assert (dataset, name, None) not in found  # no run-wide evaluation beside the days'
    records = _run_records(instance, result.run_id)
    assert records == {(d, n, day): "SUCCEEDED" for d, n in checks.WRITE_CHECKS for day in SMALL_DAYS}


def test_a_day_without_rows_passes_with_nothing_checked(capture, instance):
    """No store at all: every day of the run is materialized with no file, and each check passes
    on it (a day planned and left without an evaluation would show as skipped)."""
    result = capture.materialize(FIRST, SMALL_DAYS[2], instance=instance)
    assert result.success and capture.files() == {}
    found = day_check_results(result)
    for dataset, name in checks.WRITE_CHECKS:
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
    failing = {(GATEWAY, "key_unique"), (SESSIONS, "key_unique"), (GATEWAY, "date_matches_message_created_at")}
    for dataset, name in checks.WRITE_CHECKS:
        for day in SMALL_DAYS:
            assert found[(dataset, name, day)].passed is not ((dataset, name) in failing and day == FIRST)

    gateway_key = found[(GATEWAY, "key_unique", FIRST)]
    assert gateway_key.metadata["duplicate_rows"].value == 1
    assert gateway_key.metadata["rows"].value == [{"part_id": foreign["part_id"], "copies": 2}]
    sessions_key = found[(SESSIONS, "key_unique", FIRST)]
    assert sessions_key.metadata["duplicate_rows"].value == 1
    (dup,) = sessions_key.metadata["rows"].value
    assert (dup["store"], dup["id"], dup["copies"]) == (FOREIGN, session["id"], 2)
    dates = found[(GATEWAY, "date_matches_message_created_at", FIRST)]
    assert dates.metadata["mismatched_rows"].value == 2
    assert [(r["part_id"], r["date"]) for r in dates.metadata["rows"].value] == [(foreign["part_id"], LAST)] * 2
    assert found[(GATEWAY, "required_columns_not_null", FIRST)].metadata["rows_checked"].value > 0
    assert "rows" not in found[(GATEWAY, "key_unique", LAST)].metadata  # a passing day names no rows

    # on the asset, where the UI, dg and GraphQL look: failed on that day, passed on the others
    records = _run_records(instance, result.run_id)
    assert {k for k, status in records.items() if status == "FAILED"} == {(d, n, FIRST) for d, n in failing}
    assert set(records.values()) == {"SUCCEEDED", "FAILED"}
    assert len(records) == len(checks.WRITE_CHECKS) * len(SMALL_DAYS)
    key = dg.AssetCheckKey(dg.AssetKey(SESSIONS), "key_unique")
    (latest,) = [
        r
        for r in instance.event_log_storage.get_asset_check_execution_history(key, limit=100)
        if r.run_id == result.run_id and r.partition == FIRST
    ]
    assert latest.event.dagster_event.asset_check_evaluation_data.metadata["duplicate_rows"].value == 1


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
    assert {(d, n, FIRST) for d, n in checks.WRITE_CHECKS} <= set(found)
    check = found[(SESSIONS, "key_unique", FIRST)]
    assert not check.passed and check.partition == FIRST
    assert check.target_materialization_data is not None and check.target_materialization_data.run_id == result.run_id
    assert set(_run_records(instance, result.run_id)) == {(d, n, FIRST) for d, n in checks.WRITE_CHECKS}


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
        check = by_key[(dataset, "key_unique", FIRST)]
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
    passed, metadata = checks.day_result(GATEWAY, checks.REQUIRED_NOT_NULL, figures)
    assert not passed and metadata["null_counts"] == {"message_created_at": 1, "role": 2}
    assert metadata["rows"] == figures.samples[checks.REQUIRED_NOT_NULL] and metadata["rows_checked"] == 3
