"""A day's new partition file: its new rows merged with what retention keeps of the old file.

:func:`merge` is the whole rule (SPEC §6): the new rows of every store read,
and the rows of the old file retention keeps (flagged); the day's file is
encoded from that table, and replaced only when its bytes differ.

The stage step of a run already holds the old file (it read it for the births
of the day's ids, D15), so it merges there and then (:func:`prepare`), and
hands the write step a :class:`PreparedWrite`: the new file staged beside the
day's other staged files, and a pin of the old file. The write step puts it in
place when, under the day's lock, the old file is still the one pinned and the
same stores are to be written; otherwise it merges again from the staged rows.
One run reads an existing day file once.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.storage.interface import Pin, Storage
from hermes_assets.lib.storage.local_files import open_private
from hermes_assets.lib.warehouse import partition_file, staging
from hermes_assets.lib.warehouse.partition_file import DayFile
from hermes_assets.lib.warehouse.retention import CarriedOver, carry_over, count_source_deleted

log = get_logger()


@dataclass(frozen=True)
class PreparedWrite:
    """A day's file merged by the stage step, for the write step to put in place."""

    #: the stores whose rows (and facts) the merge took: the same must be written
    stores: frozenset[str]
    #: the old file the merge read
    pin: Pin
    rows: int
    retained: int
    dropped: int
    replaced: int
    #: size of the new file (the old one's when unchanged)
    bytes: int
    changed: bool
    #: the staged new file (None: no rows, or the same bytes as the old file)
    file: str | None


def merge(
    dataset: str, inputs: list[pa.Table | str], old: DayFile | None, facts: list[StoreFacts]
) -> tuple[pa.Table, CarriedOver]:
    """The day's new rows (tables, or encoded partition files) and what retention keeps of
    the ``old`` file: the table its new file is encoded from."""
    schema = schemas.DATASETS[dataset].schema
    tables = [partition_file.read(dataset, t) if isinstance(t, str) else t for t in inputs]
    tables = [t for t in tables if t.num_rows]
    if len({t.schema for t in tables}) > 1:  # e.g. one store's staged day was scrubbed by a purge
        tables = [t.cast(schema) for t in tables]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    if old is None:
        return table, CarriedOver()
    carried = carry_over(dataset, old, table, facts)
    if carried.kept is not None and carried.kept.num_rows:
        table = pa.concat_tables([table.cast(schema), carried.kept.cast(schema)])
    return table, carried


def prepare(
    dataset: str,
    new: dict[str, pa.Table],
    old: DayFile,
    fresh: list[StoreFacts],
    stage_as: str,
    mode: int,
    redaction_version: str | None = None,
) -> PreparedWrite | None:
    """Merge now (:func:`merge`); the new file is staged at ``stage_as`` when it differs
    from the old one. None when the old file has no pin (nothing could prove it unchanged)."""
    if old.pin is None:
        return None
    table, carried = merge(dataset, [new[f.path] for f in fresh if f.path in new], old, fresh)
    stores = frozenset(f.path for f in fresh)
    if table.num_rows == 0:
        return PreparedWrite(stores, old.pin, 0, 0, carried.dropped, carried.replaced, 0, True, None)
    data = partition_file.encode(dataset, table, redaction_version)
    changed = not partition_file.same_bytes(old.data, data)
    if changed:
        with staging.reporting_full_disk(stage_as), open_private(stage_as, mode) as f:
            f.write(memoryview(data))
    retained = count_source_deleted(dataset, table)
    return PreparedWrite(
        stores,
        old.pin,
        table.num_rows,
        retained,
        carried.dropped,
        carried.replaced,
        data.size,
        changed,
        stage_as if changed else None,
    )


@dataclass
class WriteResult:
    dataset: str
    day: str
    path: str
    rows: int
    retained: int  # rows kept with source_deleted (this write and earlier ones)
    dropped: int  # previously written rows removed (fewer parts, policy ignore, moved)
    bytes: int
    changed: bool
    #: the file was already written from a newer read of every store: left alone
    superseded: bool = False
    #: rows this write found replaced by another generation of their id (a restored store, D15)
    replaced: int = 0

    def metadata(self) -> dict:
        return {
            "superseded_by_newer_read": self.superseded,
            "rows_written": self.rows,
            "rows_retained_source_deleted": self.retained,
            "rows_replaced": self.replaced,
            "rows_dropped": self.dropped,
            "bytes": self.bytes,
            "path": self.path,
            "file_changed": self.changed,
        }


def commit(
    storage: Storage, dataset: str, day: str, path: str, location: str, prepared: PreparedWrite
) -> WriteResult | None:
    """Put a prepared file of ``dataset``'s ``day`` in place at ``path`` (the caller holds the
    day's lock and checked that the file is still the one the merge read); None when it was
    removed meanwhile."""
    if prepared.rows == 0:
        storage.delete(path)
        return WriteResult(dataset, day, location, 0, 0, prepared.dropped, 0, True, replaced=prepared.replaced)
    if prepared.file is not None:
        try:
            storage.put_file(path, prepared.file)
        except FileNotFoundError:  # removed by a purge meanwhile: merge again
            return None
    log.debug(  # one per day and dataset: printed at HERMES_ASSETS_LOG_LEVEL=debug
        "hermes.warehouse.day_written",
        dataset=dataset,
        day=day,
        rows=prepared.rows,
        retained=prepared.retained,
        dropped=prepared.dropped,
        changed=prepared.changed,
    )
    return WriteResult(
        dataset,
        day,
        location,
        prepared.rows,
        prepared.retained,
        prepared.dropped,
        prepared.bytes,
        prepared.changed,
        replaced=prepared.replaced,
    )
