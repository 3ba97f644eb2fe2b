"""Stores fail alone (SPEC §8 step 4, D18): one bad store never stops the others' capture.

Three stores under one ``HERMES_STATE_DB`` folder, written by the real Hermes
writer, each on its own day. One of them goes bad mid-way (pages overwritten
with garbage, replaced by garbage, replaced by another program's SQLite file,
or held by an exclusive lock). The other two keep being captured: their
changed days are requested and their cursor entries advance, tick after tick.
The bad store is named, with its ``error_kind``, in the skip reason (when
nothing else is requested), in the tick's structlog events and in the tick's
Dagster log; its cursor entry stays as it was. Repaired, it catches up: the
change committed just before it went bad is requested.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import dagster as dg
import pytest
import structlog

from tests.ecosystem.conftest import captured_logs, parse_json_lines
from tests.sensor.harness import SensorDriver, checkpoint
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

DAYS = {"alpha": "2026-06-01", "bravo": "2026-06-02", "charlie": "2026-06-03"}
BAD = "bravo"


class Stores:
    def __init__(self, root: Path):
        self.root = root
        self.db = {name: root / name / "state.db" for name in DAYS}
        self.sensor = SensorDriver(state_db=root, busy_timeout_ms=300)
        self.n = 0

    def writer(self, name: str) -> HermesWriter:
        i = list(DAYS).index(name)
        return HermesWriter(self.db[name], home=self.db[name].parent, start_s=START_S + i * DAY_S + 3600 + self.n)

    def build(self) -> None:
        for name in DAYS:
            with self.writer(name) as w:
                sid = w.session(f"{name}-1", "cli", system_prompt="You are Hermes.")
                w.msg(sid, "user", f"hello from {name}")

    def grow(self, name: str) -> int:
        """Hermes writes one more message in the store (and a late title): the day changes."""
        self.n += 1
        with self.writer(name) as w:
            mid = w.msg(f"{name}-1", "assistant", f"answer {self.n}")
            w.set_session_title(f"{name}-1", f"{name} title {self.n}")
        return mid

    def entry(self, name: str) -> dict:
        return self.sensor.state["stores"][str(self.db[name])]

    def tick(self):
        with structlog.testing.capture_logs() as events:
            tick = self.sensor.tick()
        return tick, events


def _checkpointed(db: Path) -> None:
    """Fold the WAL into the file and drop the sidecars (as Hermes does when it exits)."""
    checkpoint(db)
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)


def _page_size(db: Path) -> int:
    size = int.from_bytes(db.read_bytes()[16:18], "big")
    return 65536 if size == 1 else size


def _rootpage(db: Path, table: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    finally:
        conn.close()


def _garbage_pages(db: Path) -> None:
    """Overwrite the root pages of ``messages`` and ``sessions`` with garbage (a disk that lies)."""
    size = _page_size(db)
    pages = [_rootpage(db, t) for t in ("messages", "sessions")]
    with open(db, "r+b") as f:
        for page in pages:
            f.seek((page - 1) * size)
            f.write(bytes((i * 37 + 11) % 256 for i in range(size)))


def _foreign(db: Path) -> None:
    db.unlink()
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('x');")
    conn.close()


class _Locked:
    """Another process's exclusive lock on a rollback-journal store (SQLite emulates it in-process)."""

    def __init__(self, db: Path):
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.close()
        self.conn = sqlite3.connect(db, isolation_level=None)
        self.conn.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.close()


FAULTS = {
    "garbage pages": ("store_corrupt", _garbage_pages),
    "replaced by garbage": ("store_corrupt", lambda db: db.write_bytes(b"not a database, sorry " * 2000)),
    "another program's SQLite file": ("not_a_hermes_store", _foreign),
    "locked by a writer": ("store_busy", _Locked),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_bad_store_is_named_and_the_others_keep_being_captured(tmp_path, monkeypatch, fault):
    monkeypatch.delenv("HERMES_HOME", raising=False)
    kind, damage = FAULTS[fault]
    s = Stores(tmp_path / "stores")
    s.build()
    assert s.tick()[0].days == sorted(DAYS.values())
    s.sensor.settle()
    bad_db = s.db[BAD]

    # Hermes renames the bad store's session, then the store goes bad before any tick saw it
    s.grow(BAD)
    _checkpointed(bad_db)
    healthy = bad_db.read_bytes()
    bad_entry = s.entry(BAD)
    lock = damage(bad_db)

    try:
        for _ in range(3):  # tick after tick, the others are captured and the bad one is named
            mids = {name: s.grow(name) for name in ("alpha", "charlie")}
            tick, events = s.tick()
            assert tick.days == [DAYS["alpha"], DAYS["charlie"]]
            for name in ("alpha", "charlie"):
                assert s.entry(name)["max_mid"] == mids[name]
            assert s.entry(BAD) == bad_entry
            (failed,) = [e for e in events if e["event"] == "hermes.sensor.store_failed"]
            assert (failed["path"], failed["store"], failed["error_kind"]) == (str(bad_db), BAD, kind)
            (summary,) = [e for e in events if e["event"] == "hermes.sensor.tick"]
            assert summary["stores_failed"] == 1 and summary["stores_read"] == 2
            assert summary["failed"] == [{"store": BAD, "path": str(bad_db), "error_kind": kind}]
            assert summary["runs_requested"] == 2 and summary["days_requested"] == 2

        # nothing else to request: the skip reason names the bad store and its kind
        tick, _ = s.tick()
        assert tick.run_requests == []
        assert f"{bad_db} could not be read ({kind})" in tick.skip
        assert s.entry(BAD) == bad_entry
    finally:
        if isinstance(lock, _Locked):
            lock.release()

    # repaired (restored from the copy taken just before the damage): it catches up
    for suffix in ("-wal", "-shm", "-journal"):
        Path(str(bad_db) + suffix).unlink(missing_ok=True)
    bad_db.write_bytes(healthy)
    tick, events = s.tick()
    assert tick.days == [DAYS[BAD]]
    assert not [e for e in events if e["event"] == "hermes.sensor.store_failed"]
    assert s.entry(BAD)["max_mid"] > bad_entry["max_mid"]


def test_the_tick_log_names_the_bad_store_in_dagster_too(tmp_path, monkeypatch, capfd):
    """The tick's Dagster log (what the UI shows for the tick) carries the error as well; the
    console shows it once, as our own line (Dagster's console logger does not repeat it)."""
    monkeypatch.delenv("HERMES_HOME", raising=False)
    s = Stores(tmp_path / "stores")
    s.build()
    s.tick()
    s.db[BAD].write_bytes(b"garbage " * 4096)
    for suffix in ("-wal", "-shm"):
        Path(str(s.db[BAD]) + suffix).unlink(missing_ok=True)
    s.grow("alpha")
    capfd.readouterr()
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance, captured_logs("json") as buf:
        tick = s.sensor.tick(logged=instance)
    assert tick.days == [DAYS["alpha"]]
    errors = [message for level, message in tick.log if level == "ERROR"]
    assert len(errors) == 1
    name, _, fields = errors[0].partition(" ")
    assert name == "hermes.sensor.store_failed"
    assert (json.loads(fields)["path"], json.loads(fields)["error_kind"]) == (str(s.db[BAD]), "store_corrupt")
    printed = [e["event"] for e in parse_json_lines(buf.getvalue())]
    assert printed.count("hermes.sensor.store_failed") == 1, printed
    console = capfd.readouterr()
    assert "hermes.sensor." not in console.out + console.err  # Dagster's console logger repeats none of it


def test_cursor_entries_of_stores_that_vanish_or_fail_are_kept_verbatim(tmp_path, monkeypatch):
    """The cursor is one JSON document: a failed store's entry must come out byte-identical."""
    monkeypatch.delenv("HERMES_HOME", raising=False)
    s = Stores(tmp_path / "stores")
    s.build()
    s.tick()
    before = json.dumps(s.entry(BAD), sort_keys=True)
    os.truncate(s.db[BAD], 1000)
    for suffix in ("-wal", "-shm"):
        Path(str(s.db[BAD]) + suffix).unlink(missing_ok=True)
    s.grow("charlie")
    tick, _ = s.tick()
    assert tick.days == [DAYS["charlie"]]
    assert json.dumps(s.entry(BAD), sort_keys=True) == before


def test_a_store_named_in_hermes_state_db_that_does_not_exist_is_a_named_failure(tmp_path):
    """SPEC §1: a typo in HERMES_STATE_DB must not look like success: the tick skips naming
    the path and `store_missing`, where a missing default store is the quiet idle case."""
    from hermes_assets.lib.changes import watch
    from hermes_assets.lib.source.stores import discover_stores

    typo = tmp_path / "typo" / "state.db"
    plan = watch.plan_tick(discover_stores(str(typo)), None, is_partition=lambda day: True)
    assert plan.requests == [] and [s.failure.error_kind for s in plan.failures] == ["store_missing"]
    assert str(typo) in plan.skip_reason and "store_missing" in plan.skip_reason
    idle = watch.plan_tick(discover_stores(None, str(tmp_path / "no-hermes")), None, is_partition=lambda day: True)
    assert idle.failures == [] and idle.skip_reason.startswith("no Hermes installation at")
