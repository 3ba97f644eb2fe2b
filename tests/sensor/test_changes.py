"""Change detection without Dagster (``hermes_assets.lib.changes.watch``), on real stores."""

from __future__ import annotations

import json

import pytest
import structlog

from hermes_assets.lib.changes import watch
from hermes_assets.lib.changes.cursor import CURSOR_VERSION
from hermes_assets.lib.changes.fingerprint import Fingerprinter
from hermes_assets.lib.source.state_db import StoreReader
from hermes_assets.lib.source.stores import Store
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

A, B = "2026-06-01", "2026-06-02"


def _all_days(day: str) -> bool:
    return True


def _plan(store: Store, cursor: str | None, is_partition=_all_days) -> watch.TickPlan:
    return watch.plan_tick([store], cursor, is_partition=is_partition)


def test_fingerprints_place_sessions_like_the_session_index(fixture_copy):
    """The sensor and the assets must agree on every session's day (SPEC §2)."""
    db = fixture_copy("small")
    with StoreReader(Store(str(db))) as reader:
        index = reader.session_index()
        fp = Fingerprinter(reader)
        placed = fp.days_of(list(index))
        tier1 = fp.tier1()
    assert placed == {sid: e.day for sid, e in index.items()}
    assert set(tier1.days) == {e.day for e in index.values()} and tier1.sessions == len(index)


def test_our_own_read_does_not_look_like_a_change(fixture_copy):
    """A store without -wal: opening it read-only makes SQLite create one; that is not a Hermes write."""
    db = fixture_copy("small")
    assert not db.with_name("state.db-wal").exists()
    store = Store(str(db))
    first = _plan(store, None)
    assert len(first.requests) == 14
    second = _plan(store, first.cursor_json)
    assert [s.status for s in second.scans] == [watch.ROTATED]  # files unchanged: only the rotation ran
    assert second.skip_reason.startswith("no change: nothing new in the Hermes store since the last check")


def test_messages_written_without_touching_the_session_are_seen_by_mid(tmp_path):
    """An importer that inserts rows without bumping ``message_count``: only ``mid > max_mid`` tells."""
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        a = w.session("a", "cli")
        w.msg(a, "user", "hi")
        w.at(START_S + DAY_S)
        b = w.session("b", "cli")
        w.msg(b, "user", "hi")
    store = Store(str(db))
    base = _plan(store, None)
    with HermesWriter(db, home=tmp_path / "home") as w:
        before = w.query("SELECT * FROM sessions WHERE id = 'a'")
        w.raw_sql(
            "INSERT INTO messages (session_id, role, content, timestamp, active) "
            "VALUES ('a', 'user', 'imported', ?, 1)",
            (START_S + 60,),
        )
        assert w.query("SELECT * FROM sessions WHERE id = 'a'") == before
    plan = _plan(store, base.cursor_json)
    assert [d for d, _ in plan.requests] == [A]
    assert plan.counts()["new_messages"] == 1


def test_pending_days_are_requested_once_they_become_partitions(tmp_path):
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        w.msg(w.session("a", "cli"), "user", "hi")
        w.at(START_S + DAY_S)
        w.msg(w.session("b", "cli"), "user", "hi")
    store = Store(str(db))
    only_a = _plan(store, None, is_partition=lambda d: d == A)
    assert [d for d, _ in only_a.requests] == [A]
    assert set(only_a.pending) == {B}
    # nothing changed in the store, but day B is a partition now (midnight passed)
    later = _plan(store, only_a.cursor_json)
    assert [s.status for s in later.scans] == [watch.ROTATED]  # the store itself: no change
    assert later.requests == [(B, only_a.pending[B])]
    assert later.pending == {}
    assert _plan(store, later.cursor_json).requests == []


def test_a_broken_cursor_starts_over(tmp_path):
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        w.msg(w.session("a", "cli"), "user", "hi")
    for cursor in ("not json", json.dumps({"version": 999}), json.dumps([1, 2])):
        plan = _plan(Store(str(db)), cursor)
        assert [d for d, _ in plan.requests] == [A]
        assert json.loads(plan.cursor_json)["version"] == CURSOR_VERSION


def test_cursor_is_compact(fixture_copy):
    """Per store: identity, two marks, the rotation and per day two short fingerprints, a
    tick and the fingerprint last captured; never per session."""
    db = fixture_copy("small")
    plan = _plan(Store(str(db)), None)
    entry = json.loads(plan.cursor_json)["stores"][str(db)]
    assert set(entry) == {"label", "files", "max_mid", "seq", "days", "rotation", "usage"}
    assert entry["rotation"] == {"tick": 1, "hot": watch.ROTATION_TICKS - 1, "share": 1}
    assert len(entry["days"]) == 14
    for tier1, tier2, tick, captured in entry["days"].values():
        assert len(tier1) == len(tier2) == 16 and tick == 1
        assert captured is None  # requested, not yet captured
    assert len(json.dumps(entry, separators=(",", ":"))) < 1800


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_cursor_is_reset_by_requesting_every_day_once(fixture_copy, version):
    """Fingerprints of cursor versions 1 and 2 cannot be compared with version 3 and 4's (more columns and
    tables watched): the store is read as new (every day requested once, one warning), pending days
    are kept."""
    db = fixture_copy("small")
    old = {
        "version": version,
        "pending": {"2030-01-01": "abcdefabcdef"},
        "stores": {
            str(db): {
                "label": "",
                "files": watch.file_identity(str(db)),
                "max_mid": 1,
                "seq": 1,
                "days": {},
                "rotation": {"tick": 1, "hot": 0, "share": 1},
            }
        },
    }
    with structlog.testing.capture_logs() as events:
        plan = _plan(Store(str(db)), json.dumps(old), is_partition=lambda d: d < "2030")
    assert [s.status for s in plan.scans] == [watch.NEW]
    assert len(plan.requests) == 14 and plan.pending == {"2030-01-01": "abcdefabcdef"}
    cursor_events = [(e["event"], e["log_level"]) for e in events if e["event"].startswith("hermes.sensor.cursor")]
    assert cursor_events == [("hermes.sensor.cursor_reset", "warning")]
    assert json.loads(plan.cursor_json)["version"] == CURSOR_VERSION == 4


def _three_days(tmp_path):
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        for n in range(3):
            w.at(START_S + n * DAY_S)
            w.msg(w.session(f"s{n}", "cli"), "user", "hi")
    return Store(str(db))


def test_history_older_than_the_first_partition_is_requested_at_once_in_one_run(tmp_path):
    """Days before the first partition that a run can capture (the first day follows the history)
    are requested on the tick that sees them, all in one run of their own (ranged from the oldest
    to the newest), apart from the other days' runs and never kept pending; days after the last
    partition still wait."""
    store = _three_days(tmp_path)
    C = "2026-06-03"
    plan = watch.plan_tick([store], None, is_partition=lambda d: d == C, before_first=lambda d: d < C, max_runs=2)
    assert [d for d, _ in plan.requests] == [C, B, A] and plan.early == [A, B]
    assert sorted(days for days, _ in plan.runs) == [[A, B], [C]]
    keys = dict((tuple(days), key) for days, key in plan.runs)
    assert keys[(A, B)].startswith(f"{A}...{B}@") and keys[(C,)].startswith(C + "@")
    assert plan.pending == {} and plan.counts()["days_before_first_partition"] == 2
    # the same tick without it (HERMES_ASSETS_START_DATE set): kept pending, as before
    kept = watch.plan_tick([store], None, is_partition=lambda d: d == C)
    assert [d for d, _ in kept.requests] == [C] and set(kept.pending) == {A, B} and kept.early == []


def test_older_days_past_max_runs_are_still_one_run_of_that_tick(tmp_path):
    """However many older days a tick finds, they make one run at once (no day waits a tick):
    a run per day would wait its turn in the queue behind every other."""
    store = _three_days(tmp_path)
    first = watch.plan_tick([store], None, is_partition=lambda d: False, before_first=lambda d: True, max_runs=2)
    assert first.early == [A, B, "2026-06-03"] and first.pending == {}
    assert [days for days, _ in first.runs] == [[A, B, "2026-06-03"]]
    # one day alone: a run of that day
    alone = watch.plan_tick([store], None, is_partition=lambda d: d != A, before_first=lambda d: d == A, max_runs=2)
    assert [days for days, _ in alone.runs if A in days] == [[A]]
