"""The checks the write step evaluates on the files it wrote (SPEC §2, §5, §6).

``key_unique`` (each dataset), ``required_columns_not_null`` and
``date_matches_message_created_at`` (the gateway dataset) are declared on the
capture's assets and reported by ``write_partitions`` itself. A failing one
must still fail visibly: in the run's events, and on the asset in the
instance the UI, ``dg`` and GraphQL read, with the days and the counts.
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
from tests.defs.harness import SMALL_DAYS, check_results, day_path, read_day

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
    table = read_day(path.parents[2], dataset, path.parent.name[4:])
    extra = pa.Table.from_pylist(rows, schema=table.schema)
    pq.write_table(pa.concat_tables([table, extra]), path)


def test_rows_that_break_the_checks_fail_them_visibly_with_their_days(small, instance):
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
    found = check_results(result)
    gateway_key, sessions_key = found[(GATEWAY, "key_unique")], found[(SESSIONS, "key_unique")]
    for check in (gateway_key, sessions_key):
        assert not check.passed
        assert check.metadata["duplicate_rows"].value == 1
        assert check.metadata["days_with_duplicates"].value == [FIRST]
        assert check.metadata["days_checked"].value == len(SMALL_DAYS)
    dates = found[(GATEWAY, "date_matches_message_created_at")]
    assert not dates.passed
    assert dates.metadata["mismatched_rows"].value == 2 and dates.metadata["days_with_mismatches"].value == [FIRST]
    for passed in ((MESSAGES, "key_unique"), (GATEWAY, "required_columns_not_null")):
        assert found[passed].passed, passed
    assert found[(GATEWAY, "required_columns_not_null")].metadata["rows_checked"].value > 0

    # on the asset, where the UI, dg and GraphQL look: the latest execution of each check failed
    keys = [dg.AssetCheckKey(dg.AssetKey(GATEWAY), "key_unique"), dg.AssetCheckKey(dg.AssetKey(SESSIONS), "key_unique")]
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    for key in keys:
        record = latest[key]
        assert record.run_id == result.run_id
        assert record.status.value == "FAILED", key  # what the UI shows as a failed check
        assert record.event.dagster_event.asset_check_evaluation_data.metadata["days_with_duplicates"].value == [FIRST]


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
    check = check_results(result)[(SESSIONS, "key_unique")]
    assert not check.passed and check.partition == FIRST
    assert check.target_materialization_data is not None and check.target_materialization_data.run_id == result.run_id


def test_files_left_as_they_were_are_read_with_their_defaults(small):
    """A day the run did not rewrite (superseded, no store read) is judged as it stands: files
    of an earlier version, without ``generation``/``replaced``, read with their defaults."""
    assert small.materialize(FIRST).success
    for dataset in (SESSIONS, MESSAGES):
        path = day_path(small.warehouse, dataset, FIRST)
        pq.write_table(pq.read_table(path).drop_columns(list(schemas.ADDED_COLUMNS)), path)
    results = checks.written_checks(Warehouse(str(small.warehouse)), {SESSIONS: [FIRST], MESSAGES: [FIRST]})
    by_key = {(r.asset_key.to_user_string(), r.check_name): r for r in results}
    for dataset in (SESSIONS, MESSAGES):
        check = by_key[(dataset, "key_unique")]
        assert check.passed and check.metadata["rows_checked"].value > 0 and check.metadata["days_checked"].value == 1
    # no day of the gateway dataset given: checked nothing, and says so
    assert by_key[(GATEWAY, "key_unique")].metadata["days_checked"].value == 0


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
