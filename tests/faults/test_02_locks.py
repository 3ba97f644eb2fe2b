"""Fault 2: locks held by Hermes (SPEC §1 "Busy and locked").

Hermes writes in WAL mode, where a writer never blocks readers; on a network
filesystem it falls back to a rollback journal, where a writer does. Every
lock here is held by another process, as Hermes holds it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.faults.conftest import BUSY_BUDGET_MS
from tests.faults.helpers import (
    DAY1,
    DAY2,
    GATEWAY,
    MESSAGES,
    SESSIONS,
    HermesProcess,
    assert_failed_with,
    assert_nothing_lost,
    assert_untouched,
    tick_failure,
    write_scenario,
)
from tests.faults.hermes_process import UNCOMMITTED


def _texts(state) -> list[str]:
    return [r["content"] or "" for r in state.rows[MESSAGES].values()] + [
        r["title"] or "" for r in state.rows[SESSIONS].values()
    ]


def _rollback_journal_store(install) -> None:
    with install.writer() as w:
        write_scenario(w, 2)
    conn = sqlite3.connect(install.store)
    assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    conn.close()


def test_hermes_mid_write_in_wal_mode_does_not_disturb_reads(install):
    """Protects SPEC §1 in the normal case: while a real SessionDB in another process holds
    BEGIN IMMEDIATE with an uncommitted message (Hermes mid-write), a backfill and a sensor
    tick succeed at once (well inside the busy budget) and see only committed rows; once
    Hermes commits, the sensor requests the day and the next run captures the message."""
    with install.writer() as w:
        write_scenario(w, 2)
    with HermesProcess("hold-immediate", install.store) as hermes:
        out = install.run(DAY1, DAY2).ok()
        assert install.sensor.tick().days == [DAY1, DAY2]
        state = install.state()
        assert len(state.rows[MESSAGES]) == 14
        assert not any(UNCOMMITTED in t for t in _texts(state))
        hermes.finish()
    assert install.sensor.tick().days == [DAY1]
    install.run(DAY1).ok()
    assert any(UNCOMMITTED in t for t in _texts(install.state()))
    assert out.seconds < 30


def test_exclusive_lock_on_a_rollback_journal_store_is_store_busy_then_heals(install):
    """Protects SPEC §1 "Busy and locked": a rollback-journal store under BEGIN EXCLUSIVE
    (another process) for longer than the retry budget fails the run with store_busy after
    retrying for the budget (not at once, not forever); the sensor tick skips cleanly (the
    lock holder has committed nothing, so the store files did not move: no SQL runs), cursor
    kept. No partition file changes. When the writer commits, the next
    run succeeds, captures its change and loses nothing."""
    _rollback_journal_store(install)
    install.run(DAY1, DAY2).ok()
    install.sensor.tick()
    install.sensor.settle()  # the rotation stops: an unchanged store is then not opened at all
    before = install.state()
    cursor = install.sensor.cursor
    with HermesProcess("exclusive", install.store) as hermes:
        out = install.run(DAY1, DAY2)
        assert_failed_with(out, "store_busy", path=str(install.store))
        assert out.seconds >= BUSY_BUDGET_MS / 1000, "store_busy without retrying for the budget"
        # the tick stats the files, finds nothing committed since the cursor: a clean skip, no SQL
        tick = install.sensor.tick()
        assert tick.run_requests == [] and tick.skip.startswith("no change"), tick.skip
        assert install.sensor.cursor == cursor
        assert_untouched(install.warehouse, before)
        hermes.finish()
    install.run(DAY1, DAY2).ok()
    after = install.state()
    assert_nothing_lost(before, after, datasets=(GATEWAY, MESSAGES))
    assert "committed after the lock" in {r["title"] for r in after.rows[SESSIONS].values()}
    assert install.sensor.tick().days == [DAY1]


def test_hot_journal_is_store_busy_and_never_read_around(install):
    """Protects SPEC §1 "hot rollback journal": a rollback-journal writer killed mid-
    transaction leaves a hot journal and a db file already holding uncommitted pages. The
    run fails with store_busy (saying so), the sensor tick reports it (D18, cursor kept); nothing of
    the uncommitted write reaches any file. Once Hermes opens the store again (rolling the
    journal back), the next run succeeds and writes exactly the files it wrote before."""
    _rollback_journal_store(install)
    install.run(DAY1, DAY2).ok()
    install.sensor.tick()
    before = install.state()
    cursor = install.sensor.cursor
    HermesProcess("hot-journal", install.store).kill9()
    journal = Path(str(install.store) + "-journal")
    assert journal.stat().st_size > 0
    assert UNCOMMITTED.encode() in install.store.read_bytes(), "the killed write did not reach the db file"

    out = install.run(DAY1, DAY2)
    assert_failed_with(out, "store_busy", path=str(install.store))
    assert all("hot rollback journal" in f.message for f in out.failures)
    assert tick_failure(install.sensor, install.store) == "store_busy"
    assert install.sensor.cursor == cursor
    assert_untouched(install.warehouse, before)

    conn = sqlite3.connect(install.store)  # Hermes starts again: its first read rolls the journal back
    conn.execute("SELECT count(*) FROM sessions").fetchone()
    conn.close()
    assert not journal.exists()
    install.run(DAY1, DAY2).ok()
    assert install.state().files == before.files
    assert not any(UNCOMMITTED in t for t in _texts(install.state()))
