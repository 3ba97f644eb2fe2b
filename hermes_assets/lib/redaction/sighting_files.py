"""Where each secret was seen, kept: the sightings dataset, one file per day and host.

A capture writes, beside the day's three files, the day's sightings
(:class:`~hermes_assets.lib.redaction.sightings.Sighting`: never a secret) in
``hermes_secret_sightings/day=<day>/host=<label>/part-0.parquet``, one row per
marker, cell and JSON path, with the session's channel and when the cell was
written (the message's time, or the session's start for a session's own cells).
The file follows the datasets' rules: this host's own file, replaced atomically
under the day's lock, private, sorted, byte-identical when nothing changed, and
the stores' read marks beside it (no lost update).

Nothing is lost when Hermes deletes rows: a day's new sightings come from the
sessions the run read, and each sighting the file held before is judged as
retention judges a row (:mod:`~hermes_assets.lib.warehouse.retention`): its store
not read by this run, kept as it is; its session ignored by the usage policy,
dropped; its session or message gone from the store, kept and flagged
``source_deleted``; its session or message still there, dropped (the new read
says what the cells hold now). The pass over stored files
(:mod:`~.stored_files`) adds the markers it writes into old files the same
way, so the rows kept after Hermes deleted their source keep their sightings.
The canonical rows (``ai_gateway_messages_hermes``) are built from the same
cells as ``hermes_sessions`` and ``hermes_messages``: their sightings would
name the same secrets in the same sessions again, under other ids, and are left out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics.schemas import (
    GATEWAY,
    HERMES_SECRET_SIGHTINGS,
    MESSAGES,
    SECRETS,
    SESSIONS,
    SIGHTINGS,
    empty_table,
)
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.redaction.sightings import Sighting
from hermes_assets.lib.warehouse.datasets import EncodedDay, Warehouse, WriteResult

SCHEMA = HERMES_SECRET_SIGHTINGS
KEY = SECRETS[SIGHTINGS].key
#: the columns of a day's datasets a sighting's channel, time and flag come from
SESSION_COLUMNS = ["store_label", "id", "source", "started_at", "source_deleted"]
MESSAGE_COLUMNS = ["store_label", "session_id", "id", "timestamp", "source_deleted"]
#: fates of a sighting the file held that the new read did not make again
_KEEP, _DELETED = "keep", "source_deleted"


def rows(
    day: str,
    host: str,
    sightings: Iterable[Sighting],
    sessions: pa.Table | None,
    messages: pa.Table | None,
    stores: dict[str, str],
) -> pa.Table:
    """The sightings as rows of the dataset: ``sessions`` / ``messages`` (the day's rows, with
    :data:`SESSION_COLUMNS` / :data:`MESSAGE_COLUMNS`) give each its channel, its time and
    whether its row is flagged ``source_deleted``; ``stores``: store label -> path. Sightings in
    the canonical rows are left out (module docstring)."""
    seen = [s for s in sightings if not s.field.startswith(GATEWAY + ".") and s.session_id is not None]
    if not seen:
        return empty_table(SCHEMA)
    sids = {s.session_id for s in seen if s.session_id is not None}
    started = _by_key(sessions, "id", ("store_label", "id"), ("source", "started_at", "source_deleted"), sids)
    mids = {s.message_id for s in seen if s.message_id is not None}
    written = _by_key(
        messages, "session_id", ("store_label", "session_id", "id"), ("timestamp", "source_deleted"), sids, mids
    )
    out = []
    for s in seen:
        channel, at, deleted = started.get((s.store, s.session_id), (None, None, False))
        if s.message_id is not None:
            at, deleted = written.get((s.store, s.session_id, s.message_id), (at, deleted))
        out.append(
            {
                "marker": s.marker,
                "kind": s.kind,
                "prefix": s.prefix or None,
                "last4": s.last4 or None,
                "store": stores.get(s.store),
                "store_label": s.store,
                "session_id": s.session_id,
                "message_id": s.message_id,
                "field": s.field,
                "json_path": s.path,
                "channel": channel,
                "seen_at": at,
                "source_deleted": bool(deleted),
                "host": host,
                "day": day,
            }
        )
    return _table(out)


def _by_key(
    table: pa.Table | None,
    sid_column: str,
    key: tuple[str, ...],
    values: tuple[str, ...],
    sids: set[str],
    last_keys: set[str] | None = None,
) -> dict[tuple, tuple]:
    """``key columns -> value columns`` of the rows of ``table`` whose session is one of ``sids``
    and, with ``last_keys``, whose last key column is one of them (ids as text: a sighting names a
    message by its id's text); only those rows become Python values."""
    if table is None or table.num_rows == 0:
        return {}
    keep = _among(table, sid_column, sids)
    if last_keys is not None:
        keep = pc.and_(keep, _among(table, key[-1], last_keys))
    table = table.filter(keep)
    keys = zip(*(pc.cast(table.column(c), pa.string()).to_pylist() for c in key))
    return dict(zip(keys, zip(*(table.column(c).to_pylist() for c in values))))


def _among(table: pa.Table, column: str, wanted: set[str]) -> pa.ChunkedArray:
    return pc.is_in(pc.cast(table.column(column), pa.string()), value_set=pa.array(sorted(wanted), pa.string()))


def _key(row: dict) -> tuple:
    return tuple(row[c] for c in KEY)


def _table(items: list[dict]) -> pa.Table:
    """Rows as the dataset's table, each key once (the first), in the file's order."""
    unique: dict[tuple, dict] = {}
    for row in items:
        unique.setdefault(_key(row), row)
    # Arrow's order (nulls last): the encoder finds the rows sorted already
    ordered = sorted(unique.values(), key=lambda r: tuple((v is None, v or "") for v in _key(r)))
    return pa.Table.from_pylist(ordered, schema=SCHEMA)


def merge(
    new: pa.Table,
    others: Iterable[pa.Table | None],
    fresh: list[StoreFacts],
    labels: dict[str, str],
) -> pa.Table:
    """The day's sightings: ``new`` (made by this run's read of the stores in ``fresh``; the rows
    of another store are dropped: a later read wrote its own), and the rows of ``others`` (the
    file's, and those of the pass over stored files) the new ones do not replace, each judged
    by what its store holds now (module docstring). ``labels``: store path -> label."""
    by_label = {labels[f.path]: f for f in fresh if f.path in labels}
    paths = {f.path for f in fresh}
    kept = [row for row in new.to_pylist() if row["store"] in paths]
    keys = {_key(row) for row in kept}
    for table in others:
        for row in [] if table is None else table.to_pylist():
            fate = _fate(row, by_label)
            if fate is None or _key(row) in keys:
                continue
            keys.add(_key(row))
            kept.append({**row, "source_deleted": row["source_deleted"] or fate == _DELETED})
    return _table(kept)


def _fate(row: dict, by_label: dict[str, StoreFacts]) -> str | None:
    """None: drop the sighting; keep it as it is; keep it flagged ``source_deleted``."""
    facts = by_label.get(row["store_label"])
    if facts is None:  # a store this run did not read: not ours to judge
        return _KEEP
    sid, mid = row["session_id"], row["message_id"]
    if sid in facts.ignored:
        return None
    if sid not in facts.sessions:  # the whole session is gone from the store
        return _DELETED
    if mid is None:  # a session's own cell: the new read says what it holds
        return None
    if mid.isdigit() and (sid, int(mid)) in facts.messages_now:
        return None
    return _DELETED  # the message is gone (deleted, pruned, renumbered)


def write_day(
    warehouse: Warehouse,
    day: str,
    new: pa.Table | None,
    stored: Sequence[Sighting],
    facts: list[StoreFacts],
    read_at: float | None,
    stores: dict[str, str],
    encoded: str | None = None,
) -> WriteResult:
    """Merge the day's sightings into this host's file of the day (:func:`merge`), under the
    day's lock, atomically. ``new``: this run's rows (:func:`rows`), of the stores in ``facts``,
    read at ``read_at``; ``stored``: what the pass over the day's stored files saw (their channel
    and time read from this host's files of the day); ``stores``: store label -> path.
    ``encoded``: the file of ``new`` (staged when the day had no file: the merge's own order and
    form), put in place as it is when there are no stored sightings and the merge would keep
    every row of it (:meth:`Warehouse.merge_day`)."""
    found = rows(day, warehouse.host, stored, *_day_context(warehouse, day), stores) if stored else None
    labels = {path: label for label, path in stores.items()}
    staged = None
    if encoded is not None and new is not None and not stored:
        staged = EncodedDay(encoded, new, frozenset(pc.unique(new.column("store")).to_pylist()))
    new = empty_table(SCHEMA) if new is None else new
    return warehouse.merge_day(
        SIGHTINGS, day, facts, read_at, lambda old, fresh: merge(new, (found, old), fresh, labels), staged
    )


def _day_context(warehouse: Warehouse, day: str) -> tuple[pa.Table | None, pa.Table | None]:
    """The columns of this host's ``hermes_sessions`` / ``hermes_messages`` files of the day
    that give the sightings of a stored file their channel and time."""
    return (
        warehouse.read_own(SESSIONS, day, columns=SESSION_COLUMNS),
        warehouse.read_own(MESSAGES, day, columns=MESSAGE_COLUMNS),
    )


#: the days :func:`read_all` reads at once: each day's files are small, and much of a read is
#: pyarrow's, outside the GIL (the 1M store's 330 days: 0.85 s one after the other, 0.55 s four at a time)
READ_THREADS = 4


def read_all(warehouse: Warehouse) -> pa.Table:
    """Every host's sightings, every day (in the days' order, :data:`READ_THREADS` days at a time)."""
    days = warehouse.days(SIGHTINGS)
    with ThreadPoolExecutor(max(1, min(READ_THREADS, len(days)))) as threads:
        tables = [t for t in threads.map(functools.partial(warehouse.read, SIGHTINGS), days) if t is not None]
    return pa.concat_tables(tables) if tables else empty_table(SCHEMA)
