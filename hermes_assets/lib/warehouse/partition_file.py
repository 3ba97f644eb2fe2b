"""The bytes of a partition file: a day's table encoded (sorted, zstd), and decoded back (SPEC §2).

A file written by a run that redacted secrets records the redaction's version in its
key-value metadata (:data:`VERSION_KEY`); a file without it, or with another one, is
redacted again by the next run that redacts
(:mod:`~hermes_assets.lib.redaction.stored_files`).

A day's file is encoded once per write, from the whole day, and compared with
the file it would replace byte for byte (an unchanged day is never rewritten).
Decoding always uses the dataset's schema, so a column an older file lacks
reads as its default (:data:`schemas.ADDED_COLUMNS`) or as NULL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hermes_assets.lib.basics import schemas

if TYPE_CHECKING:
    from hermes_assets.lib.storage.interface import Pin

#: the Parquet key-value metadata key that records the redaction a file's cells went through
VERSION_KEY = b"hermes_assets.redaction_version"


def encode(dataset: str, table: pa.Table, redaction_version: str | None = None) -> pa.Buffer:
    """A day's table as the exact bytes of its partition file (sorted, zstd).

    Text columns may arrive dictionary-encoded (one system prompt per session);
    the file does not store the Arrow schema, so every reader sees the types of
    the Parquet schema itself: plain strings, UTC timestamps, JSON.
    """
    sort = schemas.sort_of(dataset)
    if not is_sorted(table, sort):
        table = table.sort_by([(c, "ascending") for c in sort])
    sink = pa.BufferOutputStream()
    if redaction_version is None:
        pq.write_table(table, sink, compression="zstd", row_group_size=256 * 1024, store_schema=False)
    else:  # the same bytes, and the version of the redaction its cells went through
        with pq.ParquetWriter(sink, table.schema, compression="zstd", store_schema=False) as writer:
            writer.write_table(table, row_group_size=256 * 1024)
            writer.add_key_value_metadata({VERSION_KEY.decode(): redaction_version})
    return sink.getvalue()


def redaction_version(source: pa.Buffer | pa.NativeFile) -> str | None:
    """The redaction version a partition file records (None: written without redaction,
    or before redaction existed)."""
    reader = pa.BufferReader(source) if isinstance(source, pa.Buffer) else source
    metadata = pq.read_metadata(reader).metadata or {}
    try:
        return metadata[VERSION_KEY].decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return None


def decode(dataset: str, data: pa.Buffer, columns: list[str] | None = None) -> pa.Table:
    """The rows of a partition file's bytes (``columns``: only those)."""
    return read(dataset, pa.BufferReader(data), columns)


def read(
    dataset: str, source: str | pa.NativeFile, columns: list[str] | None = None, schema: pa.Schema | None = None
) -> pa.Table:
    """The rows of a partition file (a path or an open file), in the dataset's schema
    (or ``schema``: the same columns, some maybe dictionary-encoded)."""
    schema = schema or schemas.schema_of(dataset)
    table = _read_as_written(source, columns, schema)
    if table is None:
        table = pq.read_table(source, columns=columns, schema=schema)
    return fill_added_columns(table)


def _read_as_written(source: str | pa.NativeFile, columns: list[str] | None, schema: pa.Schema) -> pa.Table | None:
    """The file's rows by its own reader, when its columns are ``schema``'s as they are (names,
    types, NULLs: every day's file this version writes) and ``columns`` names some of them, each
    once: the table :func:`pyarrow.parquet.read_table` gives, without the dataset scan that
    reconciles another schema (0.5-0.6 ms of CPU less a small file: 330 sightings files 0.60 to
    0.33 s). None otherwise (no column, dictionary reads, an older file's missing column, a list's
    item named otherwise): read as before."""
    if columns is not None and (
        not columns or len(set(columns)) != len(columns) or not set(columns) <= set(schema.names)
    ):
        return None
    with pq.ParquetFile(source, pre_buffer=True) as file:  # an object store's reads coalesced, as the scan's
        # as text: Schema.equals takes a list's item named ``element`` (Parquet's) for ``item``
        if _schema_text(file.schema_arrow) != _schema_text(schema):
            return None
        return file.read(columns=columns).replace_schema_metadata(schema.metadata)


def _schema_text(schema: pa.Schema) -> str:
    return schema.to_string(show_schema_metadata=False)


def fill_added_columns(table: pa.Table) -> pa.Table:
    """Columns a file written by an earlier version lacks read as NULL: give them their default."""
    for name, default in schemas.ADDED_COLUMNS.items():
        idx = table.schema.get_field_index(name)
        if idx >= 0 and table.column(idx).null_count:
            field = table.schema.field(idx)
            table = table.set_column(idx, field, pc.fill_null(table.column(idx), pa.scalar(default, field.type)))
    return table


def same_bytes(a: pa.Buffer, b: pa.Buffer) -> bool:
    return a.size == b.size and a.equals(b)


def is_sorted(table: pa.Table, keys: Sequence[str], *, strict: bool = False) -> bool:
    """Whether ``table`` is already in ``keys`` order (vectorized; nulls count as unsorted);
    ``strict``: and no two rows share their values of ``keys`` (each row's are after the last's).

    One store's rows come out of the projection in order, so the common case
    skips a sort (a full copy of the table).
    """
    if table.num_rows < 2:
        return True
    # per pair of neighbouring rows: the second after the first by the keys so far, or level with it
    ahead, tie = _neighbours(table, keys[0])
    for key in keys[1:]:
        less, equal = _neighbours(table, key)
        ahead = pc.or_(ahead, pc.and_(tie, less))
        tie = pc.and_(tie, equal)
    ordered = ahead if strict else pc.or_(ahead, tie)
    return ordered.null_count == 0 and pc.all(ordered).as_py()


def _neighbours(table: pa.Table, key: str) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """Per pair of neighbouring rows: whether the second's ``key`` is after the first's, and equal."""
    column = table.column(key)
    if isinstance(column.type, pa.ExtensionType):
        column = schemas.storage_of(column)
    a, b = column.slice(0, table.num_rows - 1), column.slice(1)
    return pc.less(a, b), pc.equal(a, b)


class DayFile:
    """A day's partition file as it was read: its bytes (read once), decoded on demand, and
    maybe a pin that proves later that the file is still the one read (:mod:`storage`).

    The columns decoded for one use serve the next that needs no more of them:
    the births of a day's ids (D15) and the keys retention compares (SPEC §6)
    come from one decoding.
    """

    def __init__(self, dataset: str, data: pa.Buffer, pin: Pin | None = None):
        self.dataset = dataset
        self.data = data
        self.pin = pin
        self._decoded: pa.Table | None = None
        self._whole = False

    def table(self, columns: list[str] | None = None) -> pa.Table:
        """The file's rows (``columns``: only those, in that order)."""
        held = self._decoded
        if held is not None and (self._whole or (columns is not None and set(columns) <= set(held.column_names))):
            return held if columns is None else held.select(columns)
        table = decode(self.dataset, self.data, columns)
        self._decoded, self._whole = table, columns is None
        return table
