"""Loading the datasets the Dagster way: the ``hermes_datasets`` IO manager (SPEC §11).

One capture of the small fixture (14 days) is shared by the module; every
test then loads from it through the project's own definitions, with the
warehouse named as a local path and as a ``file://`` URI (the pyarrow
filesystem path every object store takes). What is loaded is compared with
the partition files read directly with pyarrow.
"""

import datetime as dt

import dagster as dg
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hermes_assets.defs.io_manager import DATASETS_IO_MANAGER
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.loading import DatasetDays
from tests.conftest import suite_days
from tests.defs.harness import DATASETS, SMALL_DAYS, copy_small, day_path, new_capture
from tests.support.environ import use_environment

#: the partitions of the suite's definitions (tests/conftest.py)
SUITE_PARTITIONS = suite_days().partitions

#: slow: every test loads from one capture of the small fixture, run through Dagster
pytestmark = pytest.mark.slow

FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]
DAY = "2026-06-07"
EMPTY_DAY = "2026-05-20"  # a partition of the definition, before the fixture's first session
#: the 7 days ending on LAST (all with data), and on FIRST (4 days before the fixture: no files)
WEEK = [(dt.date.fromisoformat(LAST) - dt.timedelta(days=6 - i)).isoformat() for i in range(7)]
EARLY_WEEK = [(dt.date.fromisoformat(FIRST) - dt.timedelta(days=6 - i)).isoformat() for i in range(7)]


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The small fixture captured once: the three datasets for its 14 days."""
    cap = new_capture(tmp_path_factory.mktemp("io-manager") / "install")
    copy_small(cap.home)
    with pytest.MonkeyPatch.context() as mp:
        use_environment(mp, cap.environ())
        assert cap.materialize(FIRST, LAST).success
    return cap


@pytest.fixture(params=["local", "file-uri"])
def defs(request, captured, instance, monkeypatch) -> dg.Definitions:
    """The project's definitions, the warehouse named by a path or by a ``file://`` URI
    (loaded while the test's instance is open: Dagster's definitions state needs one)."""
    root = str(captured.warehouse) if request.param == "local" else captured.warehouse.as_uri()
    use_environment(monkeypatch, {**captured.environ(), "HERMES_ASSETS_WAREHOUSE": root})
    defs = captured.defs()
    assert defs.resources[DATASETS_IO_MANAGER].warehouse.root == root
    return defs


def load(defs: dg.Definitions, instance, dataset: str, **kwargs):
    """``defs.load_asset_value`` as a notebook calls it (the test's instance passed along)."""
    return defs.load_asset_value(dataset, instance=instance, **kwargs)


def on_disk(captured, dataset: str, days: list[str], columns: list[str] | None = None) -> pa.Table:
    """The days' files read directly (no project code): the reference."""
    schema = schemas.DATASETS[dataset].schema
    tables = [
        pq.read_table(day_path(captured.warehouse, dataset, d), schema=schema, columns=columns)
        for d in days
        if day_path(captured.warehouse, dataset, d).exists()
    ]
    full = pa.concat_tables(tables) if tables else schema.empty_table()
    return full.select(columns) if columns else full


def assert_pandas_types(frame: pd.DataFrame, dataset: str) -> None:
    """Every column typed after the dataset's own Arrow type, whatever the rows hold."""
    schema = schemas.DATASETS[dataset].schema
    for name in frame.columns:
        arrow = schema.field(name).type
        dtype = frame[name].dtype
        if arrow == schemas.TS:
            assert str(dtype) == "datetime64[ms, UTC]", name
        elif arrow in (schemas.JSON, pa.string()):
            assert pd.api.types.is_string_dtype(dtype) and dtype is not np.dtype(object), (name, dtype)
        elif arrow in (pa.int64(), pa.int32()):
            assert str(dtype) == ("Int64" if arrow == pa.int64() else "Int32"), (name, dtype)
        elif arrow == pa.bool_():
            assert str(dtype) == "boolean", name
        elif arrow == pa.binary():
            assert dtype is np.dtype(object), name  # bytes (display_identity), pandas' own binary type
        else:
            assert str(dtype) == "float64", name


def assert_same_rows(frame: pd.DataFrame, reference: pa.Table) -> None:
    """The frame holds the reference's rows: JSON as its text, timestamps as UTC instants."""
    assert list(frame.columns) == reference.column_names
    assert len(frame) == reference.num_rows
    for name in reference.column_names:
        column = reference.column(name)
        if isinstance(column.type, pa.BaseExtensionType):
            column = pa.chunked_array([c.storage for c in column.chunks], column.type.storage_type)
        want = column.to_pylist()
        got = [None if pd.isna(v) else v for v in frame[name].tolist()]
        if column.type == schemas.TS:
            got = [None if v is None else v.to_pydatetime() for v in got]
        assert got == want, name


# --------------------------------------------------------------------------
# defs.load_asset_value: one partition
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dataset", DATASETS)
def test_load_one_day_as_pandas_by_default(defs, instance, captured, dataset):
    frame = load(defs, instance, dataset, partition_key=DAY)
    assert isinstance(frame, pd.DataFrame)
    reference = on_disk(captured, dataset, [DAY])
    assert reference.num_rows > 0
    assert_same_rows(frame, reference)
    assert_pandas_types(frame, dataset)


@pytest.mark.parametrize("dataset", DATASETS)
def test_load_one_day_as_arrow_in_the_datasets_own_types(defs, instance, captured, dataset):
    table = load(defs, instance, dataset, partition_key=DAY, python_type=pa.Table)
    assert isinstance(table, pa.Table)
    assert table.schema == schemas.DATASETS[dataset].schema
    assert table.equals(on_disk(captured, dataset, [DAY]))


@pytest.mark.parametrize("dataset", DATASETS)
def test_a_day_with_no_file_loads_empty_with_the_datasets_columns(defs, instance, captured, dataset):
    assert not day_path(captured.warehouse, dataset, EMPTY_DAY).exists()
    assert SUITE_PARTITIONS.has_partition_key(EMPTY_DAY)
    table = load(defs, instance, dataset, partition_key=EMPTY_DAY, python_type=pa.Table)
    assert table.num_rows == 0 and table.schema == schemas.DATASETS[dataset].schema
    frame = load(defs, instance, dataset, partition_key=EMPTY_DAY)
    busy = load(defs, instance, dataset, partition_key=DAY)
    assert frame.empty and list(frame.columns) == list(busy.columns)
    assert frame.dtypes.to_dict() == busy.dtypes.to_dict()


def test_column_selection_through_input_metadata(defs, instance, captured):
    columns = ["message_created_at", "session_id", "attributes"]
    frame = load(defs, instance, GATEWAY, partition_key=DAY, metadata={"columns": columns})
    assert list(frame.columns) == columns
    assert_same_rows(frame, on_disk(captured, GATEWAY, [DAY], columns))
    assert_pandas_types(frame, GATEWAY)
    table = load(defs, instance, GATEWAY, partition_key=DAY, metadata={"columns": columns}, python_type=pa.Table)
    assert table.column_names == columns and table.schema.field("attributes").type == schemas.JSON


def test_an_unknown_column_is_a_clear_error(defs, instance):
    with pytest.raises(Exception) as info:
        load(defs, instance, SESSIONS, partition_key=DAY, metadata={"columns": ["id", "no_such_column"]})
    assert "hermes_sessions has no column 'no_such_column'" in str(info.value)


# --------------------------------------------------------------------------
# downstream assets: same partitions, a 7-day window, unpartitioned
# --------------------------------------------------------------------------


def _run(defs: dg.Definitions, instance, assets: list, partition_key: str | None = None):
    """Materialize test assets downstream of the project's assets (which are not re-run)."""
    with_tests = dg.Definitions(assets=[*defs.assets, *assets], resources=defs.resources)
    job = with_tests.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance,
        partition_key=partition_key,
        asset_selection=[a.key for a in assets],
        raise_on_error=False,
    )


@pytest.mark.parametrize("dataset", DATASETS)
@pytest.mark.parametrize("as_type", [pd.DataFrame, pa.Table], ids=["pandas", "arrow"])
def test_a_downstream_asset_reads_the_last_7_days(defs, instance, captured, dataset, as_type):
    seen = {}

    @dg.asset(
        partitions_def=SUITE_PARTITIONS,
        ins={"upstream": dg.AssetIn(dataset, partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-6))},
    )
    def last_week(context: dg.AssetExecutionContext, upstream: as_type) -> None:
        seen["value"] = upstream

    for day, week in ((LAST, WEEK), (FIRST, EARLY_WEEK)):
        assert _run(defs, instance, [last_week], day).success
        value, reference = seen.pop("value"), on_disk(captured, dataset, week)
        assert isinstance(value, as_type)
        if as_type is pa.Table:
            assert value.equals(reference)
        else:
            assert_same_rows(value, reference)
    # the early week: only FIRST has files; the six days before it load as no rows
    assert on_disk(captured, dataset, EARLY_WEEK).num_rows == on_disk(captured, dataset, [FIRST]).num_rows > 0


def test_the_docstring_promise_a_report_over_same_day_partitions(defs, instance, captured):
    """``def my_report(ai_gateway_messages_hermes: pd.DataFrame)`` with the same partitions: it just works."""
    seen = {}

    @dg.asset(partitions_def=SUITE_PARTITIONS)
    def my_report(ai_gateway_messages_hermes: pd.DataFrame) -> None:
        seen["parts"] = ai_gateway_messages_hermes["part_type"].value_counts().to_dict()

    assert _run(defs, instance, [my_report], DAY).success
    reference = on_disk(captured, GATEWAY, [DAY], ["part_type"]).column("part_type").value_counts().to_pylist()
    assert seen["parts"] == {c["values"]: c["counts"] for c in reference}


def test_an_unpartitioned_downstream_asset_reads_every_day_on_disk(defs, instance, captured):
    seen = {}

    @dg.asset(ins={"sessions": dg.AssetIn(SESSIONS, metadata={"columns": ["id", "day"]})})
    def every_session(sessions: pa.Table) -> None:
        seen["value"] = sessions

    assert _run(defs, instance, [every_session]).success
    assert seen["value"].equals(on_disk(captured, SESSIONS, SMALL_DAYS, ["id", "day"]))
    assert sorted(set(seen["value"].column("day").to_pylist())) == SMALL_DAYS


def test_day_by_day_reading_with_dataset_days(defs, instance, captured):
    """Annotated :class:`DatasetDays`, a long range is read one day's file at a time."""
    seen = {}

    @dg.asset(
        partitions_def=SUITE_PARTITIONS,
        ins={
            "messages": dg.AssetIn(
                MESSAGES,
                partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-20),
                metadata={"columns": ["id", "session_id"]},
            )
        },
    )
    def per_day(messages: DatasetDays) -> None:
        seen["days"] = {day: table.num_rows for day, table in messages}
        seen["schema"] = messages.schema

    assert _run(defs, instance, [per_day], LAST).success
    assert len(seen["days"]) == 21
    assert {d: n for d, n in seen["days"].items() if n} == {
        d: pq.read_metadata(day_path(captured.warehouse, MESSAGES, d)).num_rows for d in SMALL_DAYS
    }
    assert seen["schema"].names == ["id", "session_id"]


# --------------------------------------------------------------------------
# handle_output stores nothing
# --------------------------------------------------------------------------


def test_handle_output_accepts_none_and_refuses_a_value_it_would_drop(defs, instance):
    @dg.asset(io_manager_key=DATASETS_IO_MANAGER, key="hermes_sessions_copy")
    def writes_its_own_files() -> None:
        return None

    @dg.asset(io_manager_key=DATASETS_IO_MANAGER, key="hermes_messages_copy")
    def returns_a_frame() -> pd.DataFrame:
        return pd.DataFrame({"a": [1]})

    assert _run(defs, instance, [writes_its_own_files]).success
    result = _run(defs, instance, [returns_a_frame])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "stores nothing" in str(failure.event_specific_data.error)
