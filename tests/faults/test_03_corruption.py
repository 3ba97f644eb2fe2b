"""Fault 3: a corrupt store (SPEC §1 "Corrupt or replaced store", §9).

``state.db`` has been known to corrupt on laptops (power loss, a sync tool, a
disk that lies). The store is damaged in place after a good capture, with a
pending change waiting on the first day, so a run that read around the damage
would change that day's files.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.faults.helpers import (
    DAY1,
    DAY2,
    SESSIONS,
    assert_failed_with,
    assert_nothing_lost,
    assert_untouched,
    remove_sqlite_sidecars,
    tick_failure,
    write_scenario,
)
from tests.support.skips import unavailable

#: message bodies of ~1.5 kB: a leaf page of ``messages`` then holds two or three rows
PAD = "lorem ipsum " * 125


def _pages(db: Path, sql: str, *args) -> list:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _page_size(db: Path) -> int:
    with open(db, "rb") as f:
        header = f.read(100)
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def _zero_page(db: Path, pageno: int) -> None:
    size = _page_size(db)
    with open(db, "r+b") as f:
        f.seek((pageno - 1) * size)
        f.write(b"\x00" * size)


def corrupt(db: Path, how: str, day1_sids: list[str], day2_sids: list[str], scratch: Path) -> None:
    """Damage ``db`` in place the way ``how`` says."""
    if how == "garbage_header":
        with open(db, "r+b") as f:
            f.write(os.urandom(100))
    elif how == "truncated":
        # cut the file just before the root page of `messages` (the page count in the
        # header still claims the old size: a copy or download that stopped short)
        (root,) = _pages(db, "SELECT rootpage FROM sqlite_master WHERE name = 'messages'")[0]
        os.truncate(db, (root - 1) * _page_size(db))
    elif how == "zeroed_table_root":
        (root,) = _pages(db, "SELECT rootpage FROM sqlite_master WHERE name = 'messages'")[0]
        _zero_page(db, root)
    elif how == "zeroed_leaf_of_a_later_day":
        # the last leaf of `messages` in b-tree order holds the highest ids: the second
        # day's newest messages only; the first day's messages stay readable
        leaves = _pages(
            db, "SELECT path, pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf' ORDER BY path"
        )
        assert len(leaves) > 3, leaves
        pageno = leaves[-1][1]
        probe = scratch / "probe.db"
        shutil.copyfile(db, probe)
        _zero_page(probe, pageno)
        marks = lambda sids: ",".join("?" * len(sids))  # noqa: E731
        _pages(probe, f"SELECT * FROM messages WHERE session_id IN ({marks(day1_sids)})", *day1_sids)
        with pytest.raises(sqlite3.DatabaseError):
            _pages(probe, f"SELECT * FROM messages WHERE session_id IN ({marks(day2_sids)})", *day2_sids)
        _zero_page(db, pageno)
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", ["garbage_header", "truncated", "zeroed_table_root", "zeroed_leaf_of_a_later_day"])
def test_corrupt_store_is_store_corrupt_and_no_partition_changes(install, tmp_path, how):
    """Protects SPEC §1/§9 against a damaged store: a garbage header, a file cut short, a
    zeroed b-tree root and a zeroed leaf holding only the second day's messages all fail
    the run with ``store_corrupt`` naming the file, and the sensor's tick reports the same
    kind (cursor kept). No partition file changes, not even the first day's, whose read
    succeeds and has a pending change (every day is staged before any is written).
    After the store is restored, the next run succeeds and nothing captured is lost."""
    if how == "zeroed_leaf_of_a_later_day" and not _has_dbstat():
        unavailable("this Python's SQLite lacks the dbstat table (needed to find the leaf)")
    with install.writer() as w:
        days = write_scenario(w, 2, text=PAD)
    install.run(DAY1, DAY2).ok()
    install.sensor.tick()
    before = install.state()

    with install.writer() as w:  # Hermes renames a first-day session: a pending change
        w.set_session_title(days[DAY1][0], "renamed before the damage")
    healthy = install.store.read_bytes()
    remove_sqlite_sidecars(install.store)
    corrupt(install.store, how, days[DAY1], days[DAY2], tmp_path)
    cursor = install.sensor.cursor

    # (a) a typed error, from the run and from the sensor
    assert_failed_with(install.run(DAY1, DAY2), "store_corrupt", path=str(install.store))
    assert tick_failure(install.sensor, install.store) == "store_corrupt"
    assert install.sensor.cursor == cursor, "a failed tick advanced the cursor"
    # (b) no partition file changed or torn; (c) nothing lost (same files)
    assert_untouched(install.warehouse, before)

    # (d) the user restores the store: the next run succeeds
    install.store.write_bytes(healthy)
    install.run(DAY1, DAY2).ok()
    after = install.state()
    assert_nothing_lost(before, after, datasets=("ai_gateway_messages_hermes", "hermes_messages"))
    titles = {row["id"]: row["title"] for row in after.rows[SESSIONS].values()}
    assert titles[days[DAY1][0]] == "renamed before the damage"
    assert DAY1 in install.sensor.tick().days


def _has_dbstat() -> bool:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("SELECT * FROM dbstat").fetchall()
        return True
    except sqlite3.Error:
        return False
    finally:
        conn.close()
