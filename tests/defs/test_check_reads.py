"""What ``day_valid`` reads of a day's file on disk, and what it still catches (SPEC §2, §5).

The write step's check reads each file's footer and only the columns its rules
read: the gateway's null counts of its required columns come from the footer
(the writer's statistics of every row group), its keys, ``date`` and
``message_created_at`` from the file. Whatever is wrong in the file on disk is
still found: a null in any required column (counted by the footer, or read
when the footer does not count it), a duplicate key, a date that is not its
message's day, a file cut short.
"""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from hermes_assets.defs import checks
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse import partition_file
from hermes_assets.lib.warehouse.datasets import Warehouse

DAY = "2026-06-01"
MIDNIGHT_MS = 1_780_272_000_000  # 2026-06-01T00:00:00Z


def _gateway(rows: int = 6) -> pa.Table:
    """A day of canonical rows: every required column filled, the others NULL."""
    schema = schemas.schema_of(GATEWAY)
    values: dict[str, list] = {}
    for f in schema:
        if f.nullable:
            values[f.name] = [None] * rows
        elif pa.types.is_string(f.type):
            values[f.name] = [f"{f.name}-{i}" for i in range(rows)]
        elif pa.types.is_integer(f.type):
            values[f.name] = list(range(rows))
        elif pa.types.is_timestamp(f.type):
            values[f.name] = [MIDNIGHT_MS + i * 60_000 for i in range(rows)]
        else:
            raise AssertionError(f"no value for {f.name}: {f.type}")
    values["date"] = [DAY] * rows
    values["session_id"] = ["s1"] * rows
    return pa.Table.from_pydict(values, schema=schema)


def _write(warehouse: Warehouse, dataset: str, table: pa.Table, **options) -> str:
    path = warehouse.path(dataset, DAY)
    warehouse.make_spool_dirs(warehouse.file_dir(dataset, DAY))
    if options:
        pq.write_table(table, path, **options)
    else:
        with open(path, "wb") as f:
            f.write(partition_file.encode(dataset, table).to_pybytes())
    return path


def _figures(warehouse: Warehouse, dataset: str) -> checks.DayFigures:
    return checks.written_figures(warehouse, {dataset: {DAY: 1}})[dataset][DAY]


@pytest.fixture
def warehouse(tmp_path) -> Warehouse:
    return Warehouse(str(tmp_path / "wh"), host="vm")


def test_a_file_as_written_passes(warehouse):
    _write(warehouse, GATEWAY, _gateway())
    figures = _figures(warehouse, GATEWAY)
    assert (figures.rows, figures.duplicates, figures.nulls, figures.mismatched) == (6, 0, {}, 0)
    assert checks.day_result(GATEWAY, figures)[0]


@pytest.mark.parametrize("statistics", [True, False], ids=["counted by the footer", "no statistics: read"])
def test_a_null_in_a_required_column_the_rules_do_not_read_fails_the_day(warehouse, statistics):
    table = _gateway()
    role = table.schema.get_field_index("role")
    table = table.set_column(role, table.schema.field(role).with_nullable(True), pa.array(["user", None] * 3))
    _write(warehouse, GATEWAY, table, write_statistics=statistics, compression="zstd")
    figures = _figures(warehouse, GATEWAY)
    assert figures.nulls == {"role": 3}
    passed, metadata = checks.day_result(GATEWAY, figures)
    assert not passed and metadata["rules_failed"] == [checks.REQUIRED_NOT_NULL]
    assert metadata["rows"][checks.REQUIRED_NOT_NULL] == [
        {"part_id": f"part_id-{i}", "null_columns": ["role"]} for i in (1, 3, 5)
    ]


def test_the_footer_counts_nulls_in_every_row_group(warehouse):
    table = _gateway(10)
    provider = table.schema.get_field_index("provider")
    cells = ["p"] * 9 + [None]  # the null in the last of five row groups
    table = table.set_column(provider, table.schema.field(provider).with_nullable(True), pa.array(cells))
    path = _write(warehouse, GATEWAY, table, row_group_size=2)
    assert pq.read_metadata(path).num_row_groups == 5
    assert checks.footer_nulls(pq.read_metadata(path), ["provider", "role"]) == {"provider": 1, "role": 0}
    assert _figures(warehouse, GATEWAY).nulls == {"provider": 1}


def test_a_required_column_missing_from_the_file_is_all_null(warehouse):
    _write(warehouse, GATEWAY, _gateway().drop_columns(["host"]), compression="zstd")
    assert checks.footer_nulls(pq.read_metadata(warehouse.path(GATEWAY, DAY)), ["host"]) == {"host": None}
    figures = _figures(warehouse, GATEWAY)
    assert figures.nulls == {"host": 6}
    assert not checks.day_result(GATEWAY, figures)[0]


@pytest.mark.parametrize("dataset", [GATEWAY, SESSIONS])
def test_a_file_without_a_column_read_dictionary_encoded_is_judged(warehouse, dataset):
    """``date`` (gateway) and ``store`` are read dictionary-encoded; a file without one reads it
    as NULL and is judged like any other, its step not failed."""
    column = "date" if dataset == GATEWAY else "store"
    table = _gateway() if dataset == GATEWAY else _sessions()
    _write(warehouse, dataset, table.drop_columns([column]), compression="zstd")
    figures = _figures(warehouse, dataset)
    assert (figures.rows, figures.duplicates) == (table.num_rows, 0)
    if dataset == GATEWAY:  # a required column: all NULL, the day fails
        assert figures.nulls == {"date": table.num_rows} and figures.mismatched == 0
        assert not checks.day_result(dataset, figures)[0]


def test_a_file_changed_on_disk_after_its_write_fails_the_day(warehouse):
    table = _gateway()
    _write(warehouse, GATEWAY, table)
    assert checks.day_result(GATEWAY, _figures(warehouse, GATEWAY))[0]
    # replaced behind the capture's back: a duplicate key and a date that is not its message's day
    bad = pa.concat_tables([table, table.slice(0, 1)])
    bad = bad.set_column(bad.schema.get_field_index("date"), "date", pa.array([DAY] * 6 + ["2026-06-02"]))
    _write(warehouse, GATEWAY, bad, compression="zstd")
    figures = _figures(warehouse, GATEWAY)
    assert (figures.rows, figures.duplicates, figures.mismatched) == (7, 1, 1)
    assert figures.samples[checks.KEY_UNIQUE] == [{"part_id": "part_id-0", "copies": 2}]
    assert figures.samples[checks.DATE_MATCHES] == [
        {"part_id": "part_id-0", "date": "2026-06-02", "message_created_at": "2026-06-01 00:00:00+00:00"}
    ]


@pytest.mark.parametrize("dataset", [GATEWAY, SESSIONS])
def test_a_file_cut_short_on_disk_fails_the_step(warehouse, dataset):
    table = _gateway() if dataset == GATEWAY else _sessions()
    path = _write(warehouse, dataset, table)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(pa.ArrowInvalid):
        _figures(warehouse, dataset)


def _sessions(dataset: str = SESSIONS) -> pa.Table:
    """Three rows of a capture dataset's key columns (the last two share all but their generation)."""
    schema = schemas.schema_of(dataset)
    keys = {"store": ["/a/state.db"] * 3, "session_id": ["s"] * 3, "id": ["s1", "s2", "s2"], "generation": [1, 1, 2]}
    if dataset == MESSAGES:
        keys["id"] = [1, 2, 2]
    return pa.table({name: pa.array(keys[name], schema.field(name).type) for name in checks._keys(dataset)})


@pytest.mark.parametrize("dataset", [SESSIONS, MESSAGES])
def test_a_duplicate_key_in_a_capture_file_fails_the_day(warehouse, dataset):
    table = _sessions(dataset)
    _write(warehouse, dataset, table, compression="zstd")
    assert _figures(warehouse, dataset).duplicates == 0
    _write(warehouse, dataset, pa.concat_tables([table, table.slice(2)]), compression="zstd")
    figures = _figures(warehouse, dataset)
    assert figures.duplicates == 1
    (dup,) = figures.samples[checks.KEY_UNIQUE]
    assert (dup["store"], dup["copies"]) == ("/a/state.db", 2)


def test_dates_are_compared_as_the_text_of_their_day():
    """:func:`checks.mismatched_dates` says what comparing each time's ``YYYY-MM-DD`` text with
    ``date`` says, for any text (other ISO forms, spaces, not a date) and times either side of
    1970 and of midnight; NULL on either side is no mismatch."""
    rng = random.Random(36)
    texts = ["2026-06-01", "2026-06-02", "1969-12-31", "1970-01-01", "2026-6-01", "20260601", " 2026-06-01", "x", None]
    times = [MIDNIGHT_MS, MIDNIGHT_MS - 1, MIDNIGHT_MS + 86_400_000 - 1, MIDNIGHT_MS + 86_400_000, -1, -86_400_000, 0]
    times.append(None)
    for _ in range(300):
        n = rng.randint(1, 25)
        cut = rng.randint(0, n)
        text = [rng.choice(texts) for _ in range(n)]
        time = [rng.choice(times) for _ in range(n)]
        dates = pa.chunked_array([pa.array(text[:cut], pa.string()), pa.array(text[cut:], pa.string())])
        ts = pa.timestamp("ms", tz="UTC")
        created = pa.chunked_array([pa.array(time[:cut], ts), pa.array(time[cut:], ts)])
        expected = pc.fill_null(pc.not_equal(pc.strftime(created, format="%Y-%m-%d"), dates), False)
        assert checks.mismatched_dates(dates, created).to_pylist() == expected.to_pylist(), (text, time)
        # as the check reads a file's dates: dictionary-encoded, each chunk its own dictionary
        encoded = checks.mismatched_dates(dates.dictionary_encode(), created)
        assert encoded.to_pylist() == expected.to_pylist(), (text, time)
    assert dt.date(2026, 6, 1) == dt.datetime.fromtimestamp(MIDNIGHT_MS / 1000, dt.UTC).date()


def test_a_day_as_written_is_judged_without_grouping_its_rows(warehouse, monkeypatch):
    """A file as the capture writes it has its keys proven distinct by compute functions, on
    pyarrow's pool (one key: as many distinct values as rows; several: every row's key after the
    last's, the files' order): Acero's grouping, whose memory stays with Arrow's default pool,
    is left for the files it cannot prove."""

    def grouped(*args, **kwargs):
        raise AssertionError("a day as written is grouped")

    monkeypatch.setattr(pa.TableGroupBy, "aggregate", grouped)
    for dataset, table in ((GATEWAY, _gateway()), (SESSIONS, _sessions()), (MESSAGES, _sessions(MESSAGES))):
        _write(warehouse, dataset, table)
        figures = _figures(warehouse, dataset)
        assert (figures.rows, figures.duplicates) == (table.num_rows, 0)
        assert checks.day_result(dataset, figures)[0]


@pytest.mark.parametrize("dataset", [SESSIONS, MESSAGES])
def test_a_file_out_of_its_key_order_is_still_judged_whole(warehouse, dataset):
    """Rows not in their key's order prove nothing: they are grouped, and counted as they are."""
    table = _sessions(dataset)
    backwards = table.take([2, 1, 0])
    _write(warehouse, dataset, backwards, compression="zstd")
    assert _figures(warehouse, dataset).duplicates == 0
    _write(warehouse, dataset, pa.concat_tables([backwards, table.slice(0, 1)]), compression="zstd")
    figures = _figures(warehouse, dataset)
    assert figures.duplicates == 1 and figures.samples[checks.KEY_UNIQUE][0]["copies"] == 2
    assert not checks.day_result(dataset, figures)[0]


def test_keys_in_strict_order_are_distinct():
    keys = ["a", "b"]
    table = pa.table({"a": ["x", "x", "y"], "b": [1, 2, 1]})
    assert partition_file.is_sorted(table, keys, strict=True) and checks.keys_distinct(table, keys)
    tied = pa.table({"a": ["x", "x", "y"], "b": [1, 1, 2]})  # in order, one key twice
    assert partition_file.is_sorted(tied, keys) and not partition_file.is_sorted(tied, keys, strict=True)
    with_null = pa.table({"a": ["x", None, "y"], "b": [1, 2, 3]})
    assert not checks.keys_distinct(with_null, keys)
    assert checks.keys_distinct(pa.table({"a": ["y", "x", None]}), ["a"])
    assert not checks.keys_distinct(pa.table({"a": ["y", None, None]}), ["a"])
