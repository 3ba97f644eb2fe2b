"""The session index from the store's indexes (SPEC §2): the same entries as the scan of the
table's rows, the facts read only for the run's sessions and their ancestors, and the scan
of the rows where the schema lacks the indexes."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_assets.lib.source.state_db import StoreReader
from hermes_assets.lib.source.stores import Store
from tests.sensor.test_fingerprint import HOSTILE_STARTS
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter
from tests.support.project import NOW_S


@pytest.fixture
def hostile_store(tmp_path):
    """Sessions on five days, each ``started_at`` of :data:`HOSTILE_STARTS` among them, the
    fallbacks to a message's time and to ``ended_at`` included, and a chain of parents across days."""
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        w.allow_nulls("sessions", "started_at")
        for i in range(10):
            w.at(START_S + (i % 5) * DAY_S + 60 * i)
            w.session(f"plain{i}", "cli" if i % 2 else "telegram")
            w.raw_sql("UPDATE sessions SET cwd = ? WHERE id = ?", (f"/work/p{i}", f"plain{i}"))
            if i:  # each session's parent is the one before it, a day earlier
                w.raw_sql("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (f"plain{i - 1}", f"plain{i}"))
        for i, name in enumerate(HOSTILE_STARTS):
            w.at(START_S + (i % 5) * DAY_S + 60 * i)
            w.session(name, "cli")
            if i % 3 == 0:
                w.msg(name, "user", "a message with a sane time")
            elif i % 3 == 1:
                w.end(name)
        for name, value in HOSTILE_STARTS.items():
            w.raw_sql("UPDATE sessions SET started_at = ? WHERE id = ?", (value, name))
        w.raw_sql("UPDATE sessions SET parent_session_id = 'null' WHERE id = 'plain0'")
    return db


def entries(index: dict, facts_of=None) -> list[tuple]:
    return [
        (sid, e.raw_id, e.day, *((e.source, e.cwd, e.parent) if facts_of is None or sid in facts_of else ()))
        for sid, e in index.items()
    ]


def lineage(index: dict, day: str) -> set[str]:
    """The sessions of ``day`` and all their ancestors."""
    todo, seen = [sid for sid, e in index.items() if e.day == day], set()
    while todo:
        sid = todo.pop()
        if sid in index and sid not in seen:
            seen.add(sid)
            todo += [index[sid].parent] if index[sid].parent else []
    return seen


def test_a_days_index_is_the_rows_scans_and_reads_only_its_lineages_facts(hostile_store):
    with StoreReader(Store(str(hostile_store)), now_s=NOW_S) as reader:
        whole = reader.session_index()
    days = sorted({e.day for e in whole.values() if e.day is not None})
    assert len(days) >= 5 and any(e.day is None for e in whole.values())
    for day in days:
        with StoreReader(Store(str(hostile_store)), now_s=NOW_S) as reader:
            index = reader.session_index({day})
            statements = reader.statements
        needed = lineage(whole, day)
        assert entries(index, needed) == entries(whole, needed)  # every day, in the same order
        assert statements["session_days"] == statements["sessions_scan"] == 1  # two index-only scans
        assert all(index[sid].source is None for sid in set(index) - needed)  # no other session's row read
    last = lineage(whole, max(e.day for sid, e in whole.items() if sid.startswith("plain")))
    assert {"plain0", "plain4", "null"} <= last  # the chain reaches back across days


def test_a_store_without_the_indexes_is_read_from_its_rows(hostile_store):
    with StoreReader(Store(str(hostile_store)), now_s=NOW_S) as reader:
        expected = entries(reader.session_index())
    conn = sqlite3.connect(hostile_store)  # no index of started_at left: an older schema's
    indexes = conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'sessions' AND sql LIKE '%INDEX%'")
    for (name,) in indexes.fetchall():
        conn.execute(f"DROP INDEX {name}")
    conn.commit()
    conn.close()
    with StoreReader(Store(str(hostile_store)), now_s=NOW_S) as reader:
        day = next(e.day for e in reader.session_index().values() if e.day)
        assert entries(reader.session_index({day})) == expected  # every session's facts
        assert "session_days" not in reader.statements
