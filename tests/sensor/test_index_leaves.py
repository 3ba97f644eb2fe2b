"""The index leaves written, by their entries (``hermes_assets.lib.changes.tier2_pages``).

A page of ``idx_messages_session_active`` written used to name every session in its range (the
dividers above it): a write to a leaf of a store whose ids sort the days apart (Hermes's
``cron_<job>_<date>`` sessions: one job's sessions on every day) named every day, and no day kept
its tier 2. A written leaf now names the sessions whose entries it gained or lost, read from the
page as of the WAL position against the entries read when it was last written; a leaf never read
(or not read whole) names its range, as before. ``Ticks.tick`` holds every tick's whole cursor
entry (every tier 2 kept) to the full pass's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hermes_assets.lib.changes import delta_map, index_walk, tier2_pages, wal_delta
from hermes_assets.lib.changes.index_walk import walk_index
from hermes_assets.lib.changes.sqlite_pages import IndexTree, Pages, record_key
from tests.sensor.test_wal_delta import DAYS, Ticks, _requested
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

JOBS = 12
SID = "cron_05_3b"  # the session the ticks append to: its id sorts among the 6th job's of every day


@pytest.fixture
def cron(tmp_path):
    """Cron sessions, one per job and day: their ids sort by job, so every leaf of the index holds
    (and its dividers bound) the sessions of every day. The session written (``cron_05_3b``, of
    the last day) is the last row of ``sessions``, after rows of its day only (a ``sessions``
    leaf written has every day of its rows digested again)."""
    db = tmp_path / "home" / "state.db"
    w = HermesWriter(db, home=tmp_path / "home")
    for i in range(len(DAYS)):
        w.at(START_S + i * DAY_S)
        for job in range(JOBS):
            sid = w.session(f"cron_{job:02d}_{i}", "cron", model="m1")
            for n in range(40):
                w.msg(sid, "user", f"run {n}")
    for n in range(40):
        w.session(f"idle_{n:02d}", "cli", model="m1")
    w.msg(w.session(SID, "cron", model="m1"), "user", "run")
    w.raw_sql("SELECT 1")  # the full-text triggers dropped now: a schema change, before the first tick
    w.at(START_S + 5 * DAY_S)
    yield w, db
    w.close()


def _append(w: HermesWriter, t: Ticks, sid: str = SID):
    w.append_message(sid, "user", "more")
    return t.tick()


def _day(key: bytes) -> str:
    """The day of a cron session of the fixture, by its id."""
    return DAYS[int(key.split(b"_")[2][:1])]


def _kept(db: Path) -> frozenset[str]:
    m = delta_map._MAPS[str(db)]
    return m.clean


def _fill(w: HermesWriter, t: Ticks, db: Path) -> None:
    """Append ticks until every day's tier 2 is kept (the rotation computes one day a tick)."""
    for _ in range(2 * len(DAYS)):
        _append(w, t)
        if _kept(db) == set(DAYS):
            return
    raise AssertionError(f"the kept set did not fill: {sorted(_kept(db))}")


def _leaf_of(db: Path, sid: str) -> tuple[int, frozenset[bytes]]:
    """The written leaf the map knows the entries of that holds ``sid``'s entries."""
    side = delta_map._MAPS[str(db)].side
    assert side is not None
    leaves = [(p, e) for p, e in side.index_leaves.items() if any(record_key(r) == sid.encode() for r in e)]
    assert leaves, sid
    return leaves[-1]


def test_a_write_to_a_leaf_of_every_day_keeps_the_other_days(cron):
    """Each append writes one leaf, whose range (and whose entries) hold sessions of every day:
    the day of the session appended to moves, the others keep their tier 2."""
    w, db = cron
    t = Ticks(db)
    _fill(w, t, db)
    _, entries = _leaf_of(db, SID)
    assert {_day(record_key(r)) for r in entries} == set(DAYS)  # the leaf holds sessions of every day
    scan = _append(w, t).scans[0]
    assert scan.delta and (scan.tier2_days, scan.tier2_kept) == (1, 1)  # the day written; the rotation's kept
    assert _kept(db) == set(DAYS)


def test_a_change_of_another_session_on_the_written_leaf_is_not_kept(cron):
    """A session of another day whose entries are on the leaf written moves with its own entries
    (a message made inactive, in the same tick as the append): its day is computed again and
    requested when the rotation reaches it."""
    w, db = cron
    t = Ticks(db)
    _fill(w, t, db)
    _, entries = _leaf_of(db, SID)
    on_leaf = Counter(record_key(r).decode() for r in entries if _day(record_key(r)) != DAYS[3])
    count = "SELECT count(*) FROM messages WHERE session_id = ?"
    other = min(s for s, n in on_leaf.items() if w.query(count, (s,)) == [(n,)])  # every entry of it on the leaf
    w.raw_sql(f"UPDATE messages SET active = 0 WHERE id = (SELECT max(id) FROM messages WHERE session_id = '{other}')")
    day = _day(other.encode())
    plan = _append(w, t)
    assert _kept(db) == set(DAYS) - {day} | plan.scans[0].digested  # computed again on this tick, or not kept
    seen = _requested(plan)
    for _ in range(len(DAYS)):
        seen += _requested(_append(w, t))
    assert sorted(set(seen) - {DAYS[3]}) == [day]


def test_a_leaf_whose_entries_are_not_read_names_its_range(cron, monkeypatch):
    """A written leaf whose entries do not parse whole (a record that overflows, a first column
    not text) names every session in its range, as a leaf never read does: here every day."""
    w, db = cron
    t = Ticks(db)
    _fill(w, t, db)
    monkeypatch.setattr(Pages, "index_entries", lambda self, page: None)
    scan = _append(w, t).scans[0]
    assert scan.delta and scan.tier2_kept == 0
    assert _kept(db) == scan.digested == {DAYS[3], *scan.digested} and len(scan.digested) == 2
    monkeypatch.undo()
    _append(w, t)  # the leaf not known: its range again; then known
    _fill(w, t, db)


def test_the_leaves_known_are_the_pages_as_read_now(cron):
    """After appends that split leaves (their parent written: its entries compared) and rewinds,
    every leaf whose entries the map keeps is a leaf of the index as walked from its root, with
    those entries, and the interior pages' entries are those of the walk."""
    w, db = cron
    t = Ticks(db)
    for n in range(300):
        w.append_message(f"cron_{n % JOBS:02d}_{n % len(DAYS)}", "user", f"later {n}")
        if n % 60 == 59:
            w.rewind_to_message("cron_03_1", w.mids("cron_03_1")[-2])
        if n % 25 == 24:
            t.tick()
    side = delta_map._MAPS[str(db)].side
    assert side is not None and side.index is not None and len(side.index_leaves) > 3
    with wal_delta.TickFiles(str(db), None, None) as files:
        pages = files._pages()
        fresh = IndexTree(side.index.root)
        walk_index(pages, fresh)
        leaves = set(fresh.bounds) - fresh.interior
        assert set(side.index_leaves) <= leaves
        assert all(pages.index_entries(p) == e for p, e in side.index_leaves.items())
    assert side.index.entries == fresh.entries


def test_a_split_of_the_written_leaf_keeps_the_other_days(cron):
    """Appends that split the leaf written (entries moved to a new leaf and to its siblings, one to
    the interior page above: every page written) name the session appended to only, once the
    pages' entries are known: an entry moved from one page written to another is no change. (The
    first burst rebalances siblings never read: their ranges are named.)"""
    w, db = cron
    t = Ticks(db)
    _fill(w, t, db)
    ticks = []
    for n in range(150):  # a tick every 25 appends: Hermes checkpoints every 50 writes, the WAL restarts after
        w.append_message(SID, "user", f"burst {n}")
        if n % 25 == 24:
            pages, kept = len(delta_map._MAPS[str(db)].side.index.bounds), _kept(db)
            assert _append(w, t).scans[0].delta
            ticks.append((len(delta_map._MAPS[str(db)].side.index.bounds) > pages, kept <= _kept(db)))
    assert any(split for split, _ in ticks[1:]), ticks
    assert all(kept for _, kept in ticks[1:]), ticks


def test_the_leaves_known_beyond_the_bound_are_dropped(cron, monkeypatch):
    """Past :data:`~hermes_assets.lib.changes.tier2_pages.MAX_LEAVES` leaves known, only those
    written on the tick stay known; the others are bounded by their ranges again."""
    w, db = cron
    monkeypatch.setattr(tier2_pages, "MAX_LEAVES", 1)
    t = Ticks(db)
    for n in range(4):
        for job in range(JOBS):
            w.append_message(f"cron_{job:02d}_{n}", "user", "more")
        t.tick()
        side = delta_map._MAPS[str(db)].side
        assert side is not None and 1 < len(side.index_leaves) <= JOBS
    _append(w, t)
    side = delta_map._MAPS[str(db)].side
    assert side is not None and len(side.index_leaves) == 1


def _depth(tree: IndexTree) -> int:
    page, depth = tree.root, 0
    while page in tree.interior:
        page, depth = tree.dividers[page][0][0], depth + 1
    return depth


def test_the_index_walked_again_where_written_is_the_walk_from_its_root(tmp_path, monkeypatch):
    """Long session ids: an index that grows from two levels to four, then shrinks. Every walk
    again (only the subtrees of the topmost interior pages written: a leaf split under a non-root
    page, a merge dropping leaves; the whole walk when the root was written, a root split raising
    the depth) is the walk from the root of the pages as of the tick, and ``before`` is untouched."""
    seen: list[tuple[str, int, bool | None]] = []
    rewalk, again = index_walk._rewalk, index_walk.walk_again

    def checked(pages: Pages, before: IndexTree, written: set[int]) -> IndexTree:
        copied = IndexTree(before.root, set(before.interior), dict(before.bounds), dict(before.dividers))
        outcome: list[bool] = []
        monkeypatch.setattr(index_walk, "_rewalk", lambda *a: (outcome.append(rewalk(*a)), outcome[-1])[1])
        after = again(pages, before, written)
        fresh = IndexTree(before.root)
        walk_index(pages, fresh)
        assert (after.interior, after.bounds, after.dividers, after.entries) == (
            fresh.interior,
            fresh.bounds,
            fresh.dividers,
            fresh.entries,
        )
        assert (copied.interior, copied.bounds, copied.dividers) == (before.interior, before.bounds, before.dividers)
        deeper = "deeper" if _depth(after) > _depth(before) else "root"
        case = deeper if before.root in written else "merge" if before.bounds.keys() - after.bounds.keys() else "split"
        seen.append((case, _depth(after), outcome[0] if outcome else None))
        return after

    monkeypatch.setattr(tier2_pages, "walk_again", checked)
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        sids = [w.session(f"{k:02d}" + "x" * 600, "cli") for k in range(16)]
        w.raw_sql("SELECT 1")  # the full-text triggers dropped before the first tick
        t = Ticks(db)
        for n in range(1200):
            w.msg(sids[(n * 5) % 16], "user", f"m {n}")
            if n % 40 == 39:
                t.tick(delta=None)
        for sid in sids[2:14]:
            w.clear_messages(sid)
            t.tick(delta=None)
    assert {"deeper", "split", "merge"} <= {case for case, _, _ in seen}, seen
    assert any(case == "split" and depth == 3 for case, depth, _ in seen), seen  # a split two levels below the root
    assert all(kept for case, _, kept in seen if case in ("split", "merge")), seen  # walked where written
