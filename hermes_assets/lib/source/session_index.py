"""The session index of a store (SPEC §2): the day of every session, and the facts that scope
the run's sessions (``source``, ``cwd``, ``parent_session_id``).

Read at every capture run, over every session of the store, so read the cheap way where the
schema allows it: Hermes's indexes hold ``id`` (the primary key's) and ``started_at``
(``idx_sessions_started``) with each row's rowid, so two index-only scans joined on the rowid
place every session without reading a row of the table, and the facts are read by rowid only
for the sessions of the run's days and their ancestors. A store whose schema lacks those
indexes (older Hermes) is read as before: one scan of the table's rows, every session's facts
with it. Both give the same entries, in the same (rowid) order.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hermes_assets.lib.basics.timestamps import DAY_MS, day_number_sql, sane_interior_s
from hermes_assets.lib.source.text_cells import text_or_none

if TYPE_CHECKING:
    from hermes_assets.lib.source.state_db import StoreReader

#: rowids per ``IN (...)`` statement of :func:`_read_facts`
FACTS_CHUNK = 200
FACT_COLUMNS = ("source", "cwd", "parent_session_id")
IDS_SQL = "SELECT rowid, id FROM sessions"


@dataclass
class SessionIndexEntry:
    """What the index scan knows of a session: enough to place it and classify it. The facts
    (``source``, ``cwd``, ``parent``) are read only for the sessions the index was asked for
    (:func:`read_index`'s ``days``): None for the others."""

    raw_id: object
    day: str | None  # None: no sane time at all
    source: str | None = None
    cwd: str | None = None
    parent: str | None = None

    def set_facts(self, source: object, cwd: object, parent: object) -> None:
        self.source, self.cwd = text_or_none(source), text_or_none(cwd)
        self.parent = None if parent is None else str(parent) or None


def read_index(reader: StoreReader, days: Collection[str] | None) -> dict[str, SessionIndexEntry]:
    """``sid -> entry`` for every session of the store, the facts of the sessions of ``days``
    and of their ancestors (None: of every session). SQLite places each session whose
    ``started_at`` is a number well inside the sane window (:func:`day_number_sql`, the sensor's
    placement); :meth:`StoreReader.place_session` the others (NULL, text, on an edge: few)."""
    bounds = sane_interior_s(reader.clock_s)
    days_sql = f"SELECT rowid, {day_number_sql('started_at')} FROM sessions"
    if days is None or not _index_only(reader, ((IDS_SQL, ()), (days_sql, bounds))):
        return _from_rows(reader, bounds)
    with reader.snapshot():
        ids = dict(reader._query(IDS_SQL, what="sessions_scan"))
        day_numbers = dict(reader._query(days_sql, bounds, what="session_days"))
        index: dict[str, SessionIndexEntry] = {}
        rowids: dict[str, int] = {}
        names: dict[int, str] = {}
        for rowid in sorted(ids):  # the table's order, as the scan of its rows gives
            raw_id, day_number, sid = ids[rowid], day_numbers[rowid], str(ids[rowid])
            if day_number is None:
                times = reader._query(
                    f"SELECT started_at, {_cells(reader, ('ended_at',))} FROM sessions WHERE rowid = ?",
                    (rowid,),
                    what="session_times",
                )
                day = reader.place_session(raw_id, *times[0])
            else:
                day = names.get(day_number) or names.setdefault(day_number, reader._day_of(day_number * DAY_MS))
            index[sid] = SessionIndexEntry(raw_id, day)
            rowids[sid] = rowid
        _read_facts(reader, index, rowids, set(days))
    return index


def _index_only(reader: StoreReader, statements: tuple[tuple[str, tuple], ...]) -> bool:
    """Whether SQLite answers each statement from a covering index alone (its plan says so)."""
    return all(
        any("COVERING INDEX" in str(row[-1]) for row in reader._query(f"EXPLAIN QUERY PLAN {sql}", params))
        for sql, params in statements
    )


def _cells(reader: StoreReader, names: tuple[str, ...]) -> str:
    """The select list of the named ``sessions`` columns, NULL for those the store lacks."""
    return ", ".join(c if c in reader.columns["sessions"] else "NULL" for c in names)


def _from_rows(reader: StoreReader, bounds: tuple[float, float]) -> dict[str, SessionIndexEntry]:
    """One statement over the table's rows, every session's facts with it."""
    rows = reader._query(
        f"SELECT id, started_at, {_cells(reader, ('ended_at', *FACT_COLUMNS))}, {day_number_sql('started_at')} FROM sessions",
        bounds,
        what="sessions_scan",
    )
    index: dict[str, SessionIndexEntry] = {}
    for raw_id, started, ended_at, source, cwd, parent, day_number in rows:
        entry = index[str(raw_id)] = SessionIndexEntry(
            raw_id,
            reader.place_session(raw_id, started, ended_at)
            if day_number is None
            else reader._day_of(day_number * DAY_MS),
        )
        entry.set_facts(source, cwd, parent)
    return index


def _read_facts(
    reader: StoreReader, index: dict[str, SessionIndexEntry], rowids: dict[str, int], days: set[str]
) -> None:
    """The facts of the sessions of ``days`` and of all their ancestors, by rowid: one
    statement per :data:`FACTS_CHUNK` sessions of each generation."""
    todo = [sid for sid, entry in index.items() if entry.day in days]
    done: set[str] = set()
    while todo:
        batch = [sid for sid in dict.fromkeys(todo) if sid not in done and sid in index]
        done.update(batch)
        todo = []
        for start in range(0, len(batch), FACTS_CHUNK):
            chunk = batch[start : start + FACTS_CHUNK]
            rows = reader._query(
                f"SELECT rowid, {_cells(reader, FACT_COLUMNS)} FROM sessions WHERE rowid IN ({','.join('?' * len(chunk))})",
                [rowids[sid] for sid in chunk],
                what="session_facts",
            )
            facts = {rowid: cells for rowid, *cells in rows}
            for sid in chunk:
                entry = index[sid]
                entry.set_facts(*facts[rowids[sid]])
                if entry.parent:
                    todo.append(entry.parent)
