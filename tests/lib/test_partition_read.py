"""lib/warehouse/partition_file.py: a file read by its own reader when it holds the dataset's columns
as they are, else by pyarrow's dataset scan: the same table either way, metadata included."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import EXPOSURES, SESSIONS, SIGHTINGS
from hermes_assets.lib.warehouse import partition_file

UTC = dt.UTC


def sighting(marker: str, day: str) -> dict:
    return {
        "marker": marker,
        "kind": "github_pat",
        "prefix": "ghp_",
        "last4": "abcd",
        "store": None,
        "store_label": "s",
        "session_id": "a",
        "message_id": None,
        "field": "messages.content",
        "json_path": "",
        "channel": "cli",
        "seen_at": dt.datetime(2026, 6, 1, 12, tzinfo=UTC),
        "source_deleted": False,
        "host": "h",
        "day": day,
    }


def exposure(marker: str) -> dict:
    when = dt.datetime(2026, 6, 1, 12, tzinfo=UTC)
    return {
        "marker": marker,
        "kind": "github_pat",
        "prefix": "ghp_",
        "last4": "abcd",
        "still_in_store": True,
        "first_seen": when,
        "last_seen": when,
        "first_day": "2026-06-01",
        "last_day": "2026-06-01",
        "sessions": 1,
        "messages": 0,
        "sightings": 1,
        "channels": ["cli"],
        "stores": ["s"],
        "hosts": ["h"],
        "fields": ["messages.content"],
    }


def written(tmp_path, dataset: str, table: pa.Table, version: str | None = "v1") -> str:
    path = str(tmp_path / "part-0.parquet")
    with open(path, "wb") as f:
        f.write(partition_file.encode(dataset, table, version).to_pybytes())
    return path


def scanned(dataset: str, path: str, columns: list[str] | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """What a read gave before the file's own reader: pyarrow's dataset scan in the schema."""
    return partition_file.fill_added_columns(
        pq.read_table(path, columns=columns, schema=schema or schemas.schema_of(dataset))
    )


def same(a: pa.Table, b: pa.Table) -> bool:
    return a.equals(b) and a.schema.equals(b.schema, check_metadata=True)


@pytest.mark.parametrize(
    "columns", [None, ["day", "marker"], ["host", "seen_at", "kind"]], ids=["all", "two", "out_of_order"]
)
def test_a_file_as_written_is_read_by_its_own_reader_as_the_scan_reads_it(tmp_path, columns):
    table = schemas.table_of_rows(
        [sighting("m2", "2026-06-01"), sighting("m1", "2026-06-01")], schemas.schema_of(SIGHTINGS)
    )
    path = written(tmp_path, SIGHTINGS, table)  # its metadata records the redaction version
    assert partition_file._read_as_written(path, columns, schemas.schema_of(SIGHTINGS)) is not None
    got = partition_file.read(SIGHTINGS, pa.OSFile(path), columns)
    assert same(got, scanned(SIGHTINGS, path, columns))
    assert got.schema.metadata == schemas.schema_of(SIGHTINGS).metadata  # the dataset's, not the file's


@pytest.mark.parametrize("columns", [[], ["day", "day"], ["day", "nope"]], ids=["none", "twice", "unknown"])
def test_columns_the_own_reader_would_read_otherwise_go_to_the_scan(tmp_path, columns):
    table = schemas.table_of_rows([sighting("m1", "2026-06-01")], schemas.schema_of(SIGHTINGS))
    path = written(tmp_path, SIGHTINGS, table)
    assert partition_file._read_as_written(path, columns, schemas.schema_of(SIGHTINGS)) is None
    if columns == ["day", "nope"]:  # the scan refuses a column the schema lacks, as before
        with pytest.raises(pa.ArrowInvalid):
            partition_file.read(SIGHTINGS, path, columns)
    else:
        assert same(partition_file.read(SIGHTINGS, path, columns), scanned(SIGHTINGS, path, columns))


def test_a_list_column_parquet_names_otherwise_is_scanned_into_the_datasets_type(tmp_path):
    table = schemas.table_of_rows([exposure("m1")], schemas.schema_of(EXPOSURES))
    path = written(tmp_path, EXPOSURES, table, None)  # Parquet names a list's item `element`
    assert partition_file._read_as_written(path, None, schemas.schema_of(EXPOSURES)) is None
    with pa.OSFile(path) as f:  # the file the reader looked at stays open for the scan
        got = partition_file.read(EXPOSURES, f)
    assert got.schema.field("channels").type == pa.list_(pa.string()) and same(got, table)


def test_a_dictionary_read_and_an_older_file_without_a_column_are_scanned(tmp_path):
    table = schemas.table_of_rows([sighting("m1", "2026-06-01")], schemas.schema_of(SIGHTINGS))
    path = written(tmp_path, SIGHTINGS, table)
    wanted = pa.schema(
        [
            f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name == "kind" else f
            for f in schemas.schema_of(SIGHTINGS)
        ]
    )
    assert partition_file._read_as_written(path, None, wanted) is None
    got = partition_file.read(SIGHTINGS, path, schema=wanted)
    assert pa.types.is_dictionary(got.schema.field("kind").type) and same(got, scanned(SIGHTINGS, path, schema=wanted))
    older = str(tmp_path / "older.parquet")  # a sessions file from before `generation` and `replaced`
    sessions = partition_file.read(
        SESSIONS, written(tmp_path, SESSIONS, schemas.empty_table(schemas.schema_of(SESSIONS)))
    )
    pq.write_table(sessions.drop_columns(list(schemas.ADDED_COLUMNS)), older)
    assert partition_file._read_as_written(older, None, schemas.schema_of(SESSIONS)) is None
    assert partition_file.read(SESSIONS, older).schema == schemas.HERMES_SESSIONS
