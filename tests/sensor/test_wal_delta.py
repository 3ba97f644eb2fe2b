"""Tier 1 from the WAL's written pages (``hermes_assets.lib.changes.wal_delta``), on stores written by
Hermes's own ``SessionDB`` kept open across ticks, as a running Hermes keeps it.

Each write of the table in ``store_scan``'s docstring is made, then the tick is evaluated twice
from the same cursor: once through the delta (the map the last tick left) and once reading every
row (the map forgotten). The delta must be the path taken where it can be, request the day the
write is on, and give the same fingerprints and requests as the full pass, to the bit.
"""

from __future__ import annotations

import copy
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from hermes_assets.lib.changes import delta_map, wal_delta, watch
from hermes_assets.lib.changes.index_walk import walk_index
from hermes_assets.lib.changes.sqlite_pages import IndexTree
from hermes_assets.lib.source.stores import Store
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

DAYS = ["2026-06-01", "2026-06-02", "2026-06-03", "2026-06-04"]
LONG = "You are Hermes. " * 700  # ~11 KB: the row's later columns sit on overflow pages


def _all_days(day: str) -> bool:
    return True


class Ticks:
    """Ticks of one store, each evaluated through the delta and through the full pass."""

    def __init__(self, db: Path):
        self.store = Store(str(db))
        self.path = str(db)
        delta_map.forget()
        first = watch.plan_tick([self.store], None, is_partition=_all_days)
        assert first.scans[0].status == watch.NEW
        self.cursor = first.cursor_json
        assert self.path in delta_map._MAPS, "the first tick learned no map"

    def tick(self, *, delta: bool | None = True) -> watch.TickPlan:
        maps = copy.deepcopy(delta_map._MAPS)
        delta_map.forget()
        full = watch.plan_tick([self.store], self.cursor, is_partition=_all_days)
        delta_map._MAPS.clear()
        delta_map._MAPS.update(maps)
        plan = watch.plan_tick([self.store], self.cursor, is_partition=_all_days)
        scan = plan.scans[0]
        assert delta is None or scan.delta is delta, scan.full_reason
        assert not full.scans[0].delta
        # the same fingerprints, the same requests as the pass over every row
        assert scan.changed == full.scans[0].changed
        days = plan.cursor.stores[self.path].days
        assert {d: m.tier1 for d, m in days.items()} == {
            d: m.tier1 for d, m in full.cursor.stores[self.path].days.items()
        }
        assert _requested(plan) == _requested(full)
        # the usage marks read by the rowids written equal the pass over every usage row's
        assert plan.cursor.stores[self.path].usage == full.cursor.stores[self.path].usage
        # a rotation day whose tier 2 was kept (no page of it written) has the tier 2 computed
        assert days == full.cursor.stores[self.path].days
        self.cursor = plan.cursor_json
        return plan


def _store(tmp_path: Path) -> tuple[HermesWriter, Path]:
    db = tmp_path / "home" / "state.db"
    w = HermesWriter(db, home=tmp_path / "home")
    for i in range(len(DAYS)):
        w.at(START_S + i * DAY_S)
        for k in range(6):
            sid = w.session(f"s{i}{k}", "cli", system_prompt=LONG if k % 2 else "short", model="m1")
            w.msg(sid, "user", f"hello {i} {k}")
            w.msg(sid, "assistant", "hi")
    return w, db


def _requested(plan: watch.TickPlan) -> list[str]:
    return sorted(d for d, _ in plan.requests)


@pytest.fixture
def hermes(tmp_path):
    w, db = _store(tmp_path)
    try:
        yield w, db
    finally:
        w.close()


def test_every_write_is_requested_on_the_next_tick_through_the_delta(hermes):
    w, db = hermes
    t = Ticks(db)
    w.at(START_S + 5 * DAY_S)
    steps = [
        ("update_token_counts (same size, long prompt)", DAYS[0], lambda: w.update_token_counts("s01", input_tokens=1)),
        ("update_token_counts again", DAYS[0], lambda: w.update_token_counts("s01", input_tokens=1)),
        ("update_token_counts, short prompt", DAYS[1], lambda: w.update_token_counts("s10", output_tokens=7)),
        ("set_session_title", DAYS[2], lambda: w.set_session_title("s23", "first title")),
        ("set_session_title, same length", DAYS[2], lambda: w.set_session_title("s23", "first titlf")),
        ("end_session", DAYS[3], lambda: w.end_session("s31", "cli_close")),
        ("reopen_session", DAYS[3], lambda: w.reopen_session("s31")),
        ("set_session_archived", DAYS[1], lambda: w.set_session_archived("s13", True)),
        ("append_message", DAYS[0], lambda: w.append_message("s03", "user", "more")),
        ("record_auxiliary_usage", DAYS[2], lambda: w.record_auxiliary_usage("s21", "title", input_tokens=3)),
        ("update_session_model", DAYS[1], lambda: w.update_session_model("s11", "m2")),
        ("a new session", DAYS[3], lambda: (w.at(START_S + 3 * DAY_S + 600), w.create_session("s3new", "cli"))),
    ]
    for name, day, write in steps:
        write()
        plan = t.tick()
        assert day in _requested(plan), name


def test_a_rewind_and_its_undo_are_requested(hermes):
    w, db = hermes
    mids = w.mids("s21")
    t = Ticks(db)
    w.rewind_to_message("s21", mids[0])
    assert DAYS[2] in _requested(t.tick())
    # the undo flips messages.active back and writes no sessions cell: the inactive count tells
    w.restore_rewound("s21", mids[0])
    assert w.query("SELECT count(*) FROM messages WHERE session_id = 's21' AND active = 0") == [(0,)]
    assert _requested(t.tick()) == [DAYS[2]]


def test_compaction_replace_and_clear_are_requested(hermes):
    w, db = hermes
    t = Ticks(db)
    w.archive_and_compact("s12", [{"role": "user", "content": "summary"}])
    assert DAYS[1] in _requested(t.tick())
    w.replace_messages("s33", [{"role": "user", "content": "new"}])
    assert DAYS[3] in _requested(t.tick())
    w.clear_messages("s02")
    assert DAYS[0] in _requested(t.tick())


def test_a_deleted_session_is_requested(hermes):
    w, db = hermes
    lone = "2026-06-08"
    w.at(START_S + 7 * DAY_S)
    w.session("lone", "cli")
    t = Ticks(db)
    # its leaf's other rows are on its day: the delta digests the day again
    w.delete_session("s22")
    assert _requested(t.tick(delta=None)) == [DAYS[2]]
    # alone on its day: no row left on a written page names the day; the count of sessions tells
    w.delete_session("lone")
    plan = t.tick(delta=False)
    assert "deleted" in plan.scans[0].full_reason
    assert _requested(plan) == [lone]
    w.set_session_title("s20", "after the delete")
    assert _requested(t.tick()) == [DAYS[2]]  # and the next tick is a delta again


def _checkpoint(db: Path, mode: str) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(f"PRAGMA wal_checkpoint({mode})")
    finally:
        conn.close()


def test_a_checkpoint_and_the_wal_restarted_after_it_keep_the_delta(hermes):
    w, db = hermes
    _checkpoint(db, "TRUNCATE")  # the db file holds every page: the next checkpoint does not grow it
    w.set_session_title("s20", "a WAL with a header")
    t = Ticks(db)
    w.set_session_title("s00", "before the checkpoint")
    _checkpoint(db, "PASSIVE")
    assert os.stat(db).st_size == delta_map._MAPS[str(db)].db[1]
    # the pages copied into the db file are the WAL's: the frames after the position still name them
    assert _requested(t.tick()) == [DAYS[0]]
    # every frame was copied: the next write starts the WAL again (new salts), the db file untouched
    salts = delta_map._MAPS[str(db)].wal.salts
    w.set_session_title("s10", "in the restarted WAL")
    plan = t.tick()
    assert delta_map._MAPS[str(db)].wal.salts != salts
    assert _requested(plan) == [DAYS[1]]


def test_a_restart_between_two_ticks_reads_the_old_frames_left_after_the_position(hermes):
    w, db = hermes
    _checkpoint(db, "TRUNCATE")
    w.set_session_title("s23", "title 0")
    for k in range(6):  # a position well into the file
        w.set_session_title("s20", f"a WAL with frames {k}")
    t = Ticks(db)
    # the same length on a long prompt's row: SQLite rewrites one overflow page, nothing else of the table
    w.set_session_title("s23", "title 1")
    _checkpoint(db, "PASSIVE")
    w.set_session_title("s10", "in the restarted WAL")
    m = delta_map._MAPS[str(db)]
    # the restarted WAL wrote fewer frames than the position: the old ones after it are still there
    plan = t.tick()
    assert delta_map._MAPS[str(db)].wal.seq == m.wal.seq + 1
    assert _requested(plan) == [DAYS[1], DAYS[2]]


def test_a_restart_that_wrote_over_the_old_frames_reads_every_row(hermes):
    w, db = hermes
    _checkpoint(db, "TRUNCATE")
    w.set_session_title("s20", "a short WAL")
    t = Ticks(db)
    w.set_session_title("s00", "copied, then written over")
    _checkpoint(db, "PASSIVE")
    for k in range(6):  # the restarted WAL goes past the position
        w.set_session_title("s10", f"in the restarted WAL {k}")
    plan = t.tick(delta=False)
    assert plan.scans[0].full_reason == "the WAL's salts changed (a checkpoint reset it)"
    assert _requested(plan) == [DAYS[0], DAYS[1]]


def test_a_wal_reset_falls_back_to_every_row(hermes):
    w, db = hermes
    _checkpoint(db, "TRUNCATE")
    w.set_session_title("s20", "a WAL with a header")
    t = Ticks(db)
    w.set_session_title("s00", "lost to the reset")
    _checkpoint(db, "TRUNCATE")  # the frame naming s00's page is gone
    w.set_session_title("s30", "in the new WAL")
    plan = t.tick(delta=False)
    assert plan.scans[0].full_reason.startswith("the WAL's salts changed")
    assert _requested(plan) == [DAYS[0], DAYS[3]]
    w.update_token_counts("s31", input_tokens=2)
    assert _requested(t.tick()) == [DAYS[3]]


def test_writes_while_the_wal_was_gone_read_every_row(hermes):
    w, db = hermes
    _checkpoint(db, "TRUNCATE")
    t = Ticks(db)  # learned with an empty WAL
    w.set_session_title("s00", "checkpointed and truncated away")
    _checkpoint(db, "TRUNCATE")
    plan = t.tick(delta=False)
    assert plan.scans[0].full_reason == "the db file changed while the WAL was empty"
    assert _requested(plan) == [DAYS[0]]


def test_a_replaced_store_is_read_whole(hermes, tmp_path):
    w, db = hermes
    t = Ticks(db)
    w.set_session_title("s00", "in the copy")
    copy_db = tmp_path / "copy.db"
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = sqlite3.connect(copy_db)
    src.backup(out)
    src.close()
    out.close()
    w.close()
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    shutil.move(copy_db, db)  # a new inode
    plan = t.tick(delta=False)
    assert plan.scans[0].status == watch.REPLACED
    assert _requested(plan) == DAYS


def test_a_map_left_by_another_cursor_is_not_used(hermes):
    w, db = hermes
    t = Ticks(db)
    stale = t.cursor
    w.set_session_title("s00", "one")
    t.tick()
    w.set_session_title("s10", "two")
    # a cursor this process did not leave last (e.g. an older one): every row is read
    t.cursor = stale
    plan = t.tick(delta=False)
    assert plan.scans[0].full_reason == "the cursor is not the one the map was left with"
    assert _requested(plan) == [DAYS[0], DAYS[1]]


def test_the_page_map_is_the_tree_sqlite_lists(hermes):
    """The map read from the pages (interior, leaves, overflow chains and their rows) is the
    ``sessions`` b-tree SQLite's own ``dbstat`` lists."""
    w, db = hermes
    for k in range(40):  # more rows: a tree of two levels at least
        w.session(f"more{k}", "cli", system_prompt=LONG if k % 3 == 0 else "short")
    Ticks(db)
    tree = delta_map._MAPS[str(db)].tree
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        pages = conn.execute("SELECT pageno, pagetype FROM dbstat WHERE name = 'sessions'").fetchall()
        long_rows = {r for (r,) in conn.execute("SELECT rowid FROM sessions WHERE length(system_prompt) > 4000")}
    finally:
        conn.close()
    assert tree.interior and tree.interior == {p for p, kind in pages if kind == "internal"}
    assert tree.leaves == {p for p, kind in pages if kind == "leaf"}
    assert set(tree.overflow) == {p for p, kind in pages if kind == "overflow"}
    assert set(tree.overflow.values()) == long_rows


def test_a_sessions_table_that_grows_a_level_is_walked_again(tmp_path):
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        w.session("first", "cli")
        t = Ticks(db)
        assert delta_map._MAPS[str(db)].tree.interior == set()  # the root is the one leaf
        w.at(START_S + DAY_S)
        for k in range(12):  # long rows: the root page splits, its rows move to new leaves
            w.session(f"grown{k}", "cli", system_prompt=LONG)
        plan = t.tick()
        assert _requested(plan) == [DAYS[1]]
        assert delta_map._MAPS[str(db)].tree.interior == {delta_map._MAPS[str(db)].tree.root}
        w.set_session_title("first", "found on its new leaf")
        assert _requested(t.tick()) == [DAYS[0]]


def _racing(monkeypatch, name: str, write) -> list[int]:
    """``wal_delta.<name>`` (a read of the pages) with ``write`` committed just before its first
    call: after the tick read the WAL's frames, before its statements' snapshot."""
    original = getattr(wal_delta, name)
    calls: list[int] = []

    def racing(*args):
        if not calls:
            write()
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(wal_delta, name, racing)
    return calls


def test_a_session_committed_after_the_frames_were_read_keeps_the_delta(hermes, monkeypatch):
    """A new session on another day, committed between the WAL read and the statements: the
    count of sessions disagrees with the days named; the WAL is read again and the delta run
    again (not the pass over every row, ~0.8 s on the 1M store), and its day is requested."""
    w, db = hermes
    t = Ticks(db)
    w.set_session_title("s00", "the tick's own change")
    calls = _racing(monkeypatch, "written_rows", lambda: (w.at(START_S + 2 * DAY_S + 60), w.session("raced", "cli")))
    plan = watch.plan_tick([t.store], t.cursor, is_partition=_all_days)
    assert plan.scans[0].delta, plan.scans[0].full_reason
    assert len(calls) == 2  # read again once
    assert _requested(plan) == [DAYS[0], DAYS[2]]
    t.cursor = plan.cursor_json
    monkeypatch.undo()
    assert _requested(t.tick()) == []  # nothing left behind: the map and the digests are the full pass's


def test_a_wal_restarted_while_its_pages_were_read_keeps_the_delta(hermes, monkeypatch):
    w, db = hermes
    _checkpoint(db, "TRUNCATE")
    for k in range(6):  # a position well into the file: the restarted WAL does not reach it
        w.set_session_title("s20", f"a WAL with frames {k}")
    t = Ticks(db)
    w.set_session_title("s00", "before the restart")
    salts = delta_map._MAPS[str(db)].wal.salts

    def restart():
        _checkpoint(db, "PASSIVE")
        w.set_session_title("s30", "in the restarted WAL")

    calls = _racing(monkeypatch, "written_rows", restart)
    plan = watch.plan_tick([t.store], t.cursor, is_partition=_all_days)
    assert plan.scans[0].delta, plan.scans[0].full_reason
    assert len(calls) == 2
    assert delta_map._MAPS[str(db)].wal.salts != salts
    assert _requested(plan) == [DAYS[0], DAYS[3]]
    t.cursor = plan.cursor_json
    monkeypatch.undo()
    w.set_session_title("s10", "after")
    assert _requested(t.tick()) == [DAYS[1]]


def test_a_wal_restarted_while_the_map_was_learned_leaves_a_map(hermes, monkeypatch):
    """The full pass's map read again from the restarted WAL: the next tick is a delta, and it
    still sees the write committed between the full pass and the restart."""
    w, db = hermes
    _checkpoint(db, "TRUNCATE")
    for k in range(6):
        w.set_session_title("s20", f"a WAL with frames {k}")
    delta_map.forget()

    def restart():
        w.set_session_title("s10", "after the full pass, before the restart")
        _checkpoint(db, "PASSIVE")
        w.set_session_title("s30", "in the restarted WAL")

    calls = _racing(monkeypatch, "map_pages", restart)
    first = watch.plan_tick([Store(str(db))], None, is_partition=_all_days)
    assert len(calls) == 2
    assert str(db) in delta_map._MAPS
    monkeypatch.undo()
    plan = watch.plan_tick([Store(str(db))], first.cursor_json, is_partition=_all_days)
    assert plan.scans[0].delta, plan.scans[0].full_reason
    assert _requested(plan) == [DAYS[1], DAYS[3]]


def test_the_usage_marks_of_a_delta_tick_read_the_rowids_written_only(hermes, monkeypatch):
    """Through the delta the usage rows are read by the rowids on the leaves written (a usage row
    written alone, ``record_auxiliary_usage``, among them), not by a pass over the table."""
    from hermes_assets.lib.changes import usage_marks

    w, db = hermes
    t = Ticks(db)
    w.record_auxiliary_usage("s21", "title", input_tokens=3)
    [(rowid,)] = w.query("SELECT rowid FROM session_model_usage WHERE session_id = 's21' AND task = 'title'")
    written: list[set[int] | None] = []
    original = usage_marks.usage_changes

    def spy(fp, marks, rowids=None):
        written.append(rowids)
        return original(fp, marks, rowids)

    monkeypatch.setattr(usage_marks, "usage_changes", spy)
    assert _requested(t.tick()) == [DAYS[2]]
    full, delta = written  # Ticks.tick: the pass over every row first, then the delta
    assert full is None
    assert delta is not None and rowid in delta


@pytest.fixture
def wide(hermes):
    """The store with enough messages that ``idx_messages_session_active`` has many leaves (on a
    one-page index every write is on every day's entries)."""
    w, db = hermes
    w.at(START_S + 4 * DAY_S)
    for i in range(len(DAYS)):
        for k in range(6):
            for n in range(40):
                w.msg(f"s{i}{k}", "user", f"filler {n}")
    w.raw_sql("SELECT 1")  # the full-text triggers dropped now: a schema change, before the first tick
    return w, db


def _last_day_tick(w: HermesWriter, t: Ticks) -> watch.TickPlan:
    """A write on the last day only, then a tick: the rotation's day is kept when clean."""
    w.append_message("s31", "user", "more")
    return t.tick()


def _rotate_all(w: HermesWriter, t: Ticks) -> None:
    """Change ticks until every day's tier 2 was computed on a tick no commit raced."""
    w.at(START_S + 5 * DAY_S)
    for _ in range(len(DAYS)):
        _last_day_tick(w, t)


@pytest.mark.parametrize(
    "name, day, edit",
    [
        # each a change only tier 2 compares, on a day whose pages nothing else writes
        ("a sessions cell", DAYS[1], "UPDATE sessions SET model_config = '{\"t\": 1}' WHERE id = 's12'"),
        ("a usage cell", DAYS[2], "UPDATE session_model_usage SET cost_source = 'edited' WHERE session_id = 's21'"),
        ("an inactive message", DAYS[0], "UPDATE messages SET active = 0 WHERE session_id = 's02'"),
        ("a usage row deleted", DAYS[2], "DELETE FROM session_model_usage WHERE session_id = 's21'"),
    ],
)
def test_a_change_only_tier_2_sees_is_not_kept(wide, name, day, edit):
    """The rotation keeps the tier 2 of a day no page of which was written since it was computed
    (``Ticks.tick`` holds every kept tier 2 to the one computed); a change on a page of the day
    (its sessions rows, the index entries of its messages, its usage rows) has it computed again
    and requested when the rotation reaches it, as without the map."""
    w, db = wide
    w.record_auxiliary_usage("s21", "title", input_tokens=3)
    t = Ticks(db)
    _rotate_all(w, t)
    kept = _last_day_tick(w, t).scans[0]
    assert (kept.tier2_days, kept.tier2_kept) == (1, 1)  # the day written; the rotation's day kept
    w.raw_sql(edit)
    seen = []
    for _ in range(len(DAYS)):
        seen += [d for d in _requested(_last_day_tick(w, t)) if d != DAYS[3]]
    assert seen == [day], name


def test_the_rotation_keeps_no_tier_2_after_a_commit_raced_the_tick(wide, monkeypatch):
    """A commit during the tick: the days digested on it are not kept later (their tier 2 may be
    of a later state than the pages read); the days kept before stay kept."""
    w, db = wide
    t = Ticks(db)
    _rotate_all(w, t)
    real = wal_delta.TickFiles.quiet
    monkeypatch.setattr(wal_delta.TickFiles, "quiet", lambda self: False)
    _last_day_tick(w, t)
    monkeypatch.setattr(wal_delta.TickFiles, "quiet", real)
    assert DAYS[3] not in delta_map._MAPS[str(db)].clean
    assert len(delta_map._MAPS[str(db)].clean) == len(DAYS) - 1


def test_an_undone_rewind_is_counted_again_by_the_index_pages_written(wide, monkeypatch):
    """On an index of many pages, tier 1 counts again the inactive messages of the sessions in the
    range of an index page written (and of the rows written) only: the undo of a rewind flips
    ``messages.active`` of its session's entries, and no ``sessions`` cell."""
    w, db = wide
    t = Ticks(db)
    w.rewind_to_message("s02", w.mids("s02")[0])
    w.rewind_to_message("s21", w.mids("s21")[0])
    assert _requested(t.tick()) == [DAYS[0], DAYS[2]]
    counted: list[int] = []
    delta, inactive = wal_delta.TickFiles._digest_days, wal_delta._inactive

    def digest_days(self, fp, *args):
        monkeypatch.setattr(
            wal_delta, "_inactive", lambda fp, rowids: (counted.extend(rowids), inactive(fp, rowids))[1]
        )
        try:
            return delta(self, fp, *args)
        finally:
            monkeypatch.setattr(wal_delta, "_inactive", inactive)

    monkeypatch.setattr(wal_delta.TickFiles, "_digest_days", digest_days)
    w.restore_rewound("s21", w.mids("s21")[0])
    assert _requested(t.tick()) == [DAYS[2]]
    rowid = dict(w.query("SELECT id, rowid FROM sessions WHERE id IN ('s02', 's21')"))
    assert rowid["s21"] in counted and rowid["s02"] not in counted  # the other day's index pages: not written


def test_the_side_maps_are_the_trees_sqlite_lists(wide):
    """The index's pages and the usage leaves read from the pages are the b-trees SQLite's own
    ``dbstat`` lists, the index pages' ranges run from no bound to no bound, and each usage
    leaf's sessions are those of its rows."""
    w, db = wide
    w.record_auxiliary_usage("s21", "title", input_tokens=3)
    t = Ticks(db)
    w.at(START_S + 5 * DAY_S)
    for n in range(200):  # index pages split: the pages written walked again, the others' dividers kept
        w.msg(f"s{n % 4}{n % 6}", "user", f"later {n}")
        if n % 20 == 19:
            t.tick()
    side = delta_map._MAPS[str(db)].side
    assert side is not None and side.index is not None and side.usage is not None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        pages = conn.execute("SELECT name, pageno, pagetype FROM dbstat").fetchall()
        usage = {i.encode() for (i,) in conn.execute("SELECT session_id FROM session_model_usage")}
    finally:
        conn.close()
    index = {p: kind for name, p, kind in pages if name == "idx_messages_session_active"}
    assert len(index) > 2 and set(side.index.bounds) == set(index)
    assert side.index.interior == {p for p, kind in index.items() if kind == "internal"}
    leaves = sorted(
        (lo or b"", hi or b"\xff") for p, (lo, hi) in side.index.bounds.items() if p not in side.index.interior
    )
    assert leaves[0][0] == b"" and leaves[-1][1] == b"\xff"  # the first and the last leaf: open ends
    assert all(lo <= hi for lo, hi in leaves) and all(a[1] == b[0] for a, b in zip(leaves, leaves[1:]))
    assert set(side.usage.leaves) == {p for name, p, kind in pages if name == "session_model_usage" and kind == "leaf"}
    assert set().union(*side.usage_sessions.values()) == usage


def test_an_index_of_three_levels_is_walked_again_where_written(tmp_path):
    """Long session ids: ``idx_messages_session_active`` of three levels. After writes, the
    index the map keeps (its written interior pages read again, the others' dividers kept) is
    the one a walk from its root reads."""
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        sids = [w.session(f"{k:02d}" + "x" * 300, "cli") for k in range(12)]
        for n in range(240):
            w.msg(sids[n % 12], "user", f"m {n}")
        w.raw_sql("SELECT 1")  # the full-text triggers dropped before the first tick
        t = Ticks(db)
        for n in range(120):
            w.msg(sids[(n * 5) % 12], "user", f"later {n}")
            if n % 15 == 14:
                t.tick()
        kept = delta_map._MAPS[str(db)].side
        assert kept is not None and kept.index is not None
        with wal_delta.TickFiles(str(db), None, None) as files:
            fresh = IndexTree(kept.index.root)
            walk_index(files._pages(), fresh)
        assert len(fresh.interior) > 1 and max(len(d) for d in fresh.dividers.values()) > 1
        assert (kept.index.bounds, kept.index.dividers) == (fresh.bounds, fresh.dividers)


@pytest.mark.parametrize(
    "reorder",
    [
        "CREATE TABLE u2 AS SELECT model, session_id, task, input_tokens, last_seen FROM session_model_usage; "
        "DROP TABLE session_model_usage; ALTER TABLE u2 RENAME TO session_model_usage",
        "DROP INDEX idx_messages_session_active; "
        "CREATE INDEX idx_messages_session_active ON messages(active, session_id)",
    ],
    ids=["usage rows without session_id first", "index without session_id first"],
)
def test_a_store_whose_pages_do_not_hold_the_session_id_first_keeps_no_tier_2(hermes, tmp_path, reorder):
    """The pages name the days by the session id they hold first; where that is not the id (another
    schema than Hermes's), no tree is mapped and every tier 2 is computed."""
    from hermes_assets.lib.changes.fingerprint import Fingerprinter
    from hermes_assets.lib.changes.tier2_pages import side_roots
    from hermes_assets.lib.source.state_db import StoreReader

    w, db = hermes
    w.update_token_counts("s01", input_tokens=1)  # a usage row
    w.close()
    other = tmp_path / "other" / "state.db"
    other.parent.mkdir()
    shutil.copy(db, other)
    with sqlite3.connect(other) as conn:
        conn.executescript(reorder)
    for path, mapped in ((db, True), (other, False)):
        with StoreReader(Store(str(path), "default")) as reader:
            roots = side_roots(Fingerprinter(reader))
        assert (roots is not None) is mapped, path
