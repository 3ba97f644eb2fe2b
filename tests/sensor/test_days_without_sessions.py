"""Every partition day reads as captured once the sensor has seen it, sessions or not
(``hermes_assets.lib.changes.watch`` without Dagster, on stores the real Hermes writer wrote).

A partition day no store holds a session on, never requested before, is requested once, in a run
of its span of consecutive such days; never again once covered, never while a store cannot be
read, never when there is no Hermes at all. A cursor of version 3 (before ``covered``) keeps
everything it knew, and its days without sessions are requested once.
"""

from __future__ import annotations

import datetime as dt
import json

import structlog

from hermes_assets.lib.changes import watch
from hermes_assets.lib.changes.cursor import CURSOR_VERSION, Spans, load_cursor
from hermes_assets.lib.source.stores import Store
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

#: a ten-day span: the writer's first day (2026-06-01) and the nine after it
SPAN = [(dt.date(2026, 6, 1) + dt.timedelta(days=i)).isoformat() for i in range(10)]


def _store(tmp_path, days: list[int]) -> Store:
    """A store with one session on each of ``days`` (1-based days of :data:`SPAN`)."""
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        for n in days:
            w.at(START_S + (n - 1) * DAY_S)
            sid = w.session(f"s{n}", "cli")
            w.msg(sid, "user", f"day {n}")
    return Store(str(db))


def _plan(stores: list[Store], cursor: str | None, *, max_runs: int = 14, days=SPAN, **kw) -> watch.TickPlan:
    return watch.plan_tick(
        stores,
        cursor,
        is_partition=lambda d: d in days,
        max_runs=max_runs,
        partition_days=days,
        now_s=START_S + 30 * DAY_S,
        **kw,
    )


def _runs(plan: watch.TickPlan) -> list[list[str]]:
    return sorted(days for days, _ in plan.runs)


def test_days_without_sessions_are_requested_once_in_a_run_per_span(tmp_path):
    store = _store(tmp_path, [1, 2, 9])
    first = _plan([store], None)
    assert sorted(d for d, _ in first.requests) == [SPAN[0], SPAN[1], SPAN[8]]
    assert first.empty == [*SPAN[2:8], SPAN[9]]
    # one run per day with sessions, one per span of days without
    assert _runs(first) == sorted([[SPAN[0]], [SPAN[1]], [SPAN[8]], SPAN[2:8], [SPAN[9]]])
    keys = dict((days[0], key) for days, key in first.runs)
    assert keys[SPAN[2]].startswith(f"{SPAN[2]}...{SPAN[7]}@") and keys[SPAN[9]].startswith(f"{SPAN[9]}@")
    assert first.counts()["days_without_sessions"] == 7
    cursor = json.loads(first.cursor_json)
    assert cursor["version"] == CURSOR_VERSION and cursor["covered"] == [[SPAN[0], SPAN[-1]]]
    assert set(cursor["attempts"]) == set(SPAN)  # each followed to its end, like any other day
    # covered: never requested again, whatever the number of ticks
    second = _plan([store], first.cursor_json)
    assert second.runs == [] and second.empty == []


def test_a_new_day_is_requested_when_it_begins_and_a_session_on_it_later_requests_it_again(tmp_path):
    store = _store(tmp_path, [1])
    first = _plan([store], None, days=SPAN[:3])
    assert first.empty == SPAN[1:3]
    # midnight: the fourth day is a partition now, with no session yet
    fourth = _plan([store], first.cursor_json, days=SPAN[:4])
    assert fourth.empty == [SPAN[3]] and _runs(fourth) == [[SPAN[3]]]
    # Hermes starts a session on a day captured without sessions: a change like any other
    with HermesWriter(store.path) as w:
        w.at(START_S + 2 * DAY_S)
        w.msg(w.session("late", "cli"), "user", "hi")
    later = _plan([store], fourth.cursor_json, days=SPAN[:4])
    assert [d for d, _ in later.requests] == [SPAN[2]] and later.empty == []


def test_more_spans_than_the_runs_allowed_are_one_ranged_run(tmp_path):
    store = _store(tmp_path, [1, 3, 5, 7, 9])
    plan = _plan([store], None, max_runs=4)
    assert plan.empty == [SPAN[1], SPAN[3], SPAN[5], SPAN[7], SPAN[9]]
    # five days with sessions in one ranged run, the five days without in another (five spans)
    assert _runs(plan) == [SPAN[0::2], plan.empty]


def test_none_while_a_store_cannot_be_read_nor_without_any_store(tmp_path):
    good = _store(tmp_path / "a", [1])
    bad = tmp_path / "b" / "state.db"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a database at all" * 100)
    with structlog.testing.capture_logs():
        failing = _plan([good, Store(str(bad))], None)
    assert [s.status for s in failing.scans] == [watch.NEW, watch.FAILED]
    assert failing.empty == [] and _runs(failing) == [[SPAN[0]]]
    # no Hermes installed: the idle case stays idle
    idle = _plan([Store(str(tmp_path / "nowhere" / "state.db"))], None)
    assert idle.runs == [] and idle.empty == []
    assert idle.skip_reason.startswith("no Hermes installation at")


def test_a_day_that_loses_every_session_is_requested_for_that_change_only(tmp_path):
    store = _store(tmp_path, [1, 2])
    first = _plan([store], None, days=SPAN[:2])
    assert first.empty == []
    with HermesWriter(store.path) as w:
        w.delete_session("s2")
    gone = _plan([store], first.cursor_json, days=SPAN[:2])
    assert [d for d, _ in gone.requests] == [SPAN[1]] and gone.empty == []
    # its run succeeds: it is covered, not a day to request again as one without sessions
    done = _plan([store], gone.cursor_json, days=SPAN[:2], outcomes=lambda keys: dict.fromkeys(keys, "succeeded"))
    assert done.runs == [] and done.empty == []


def test_a_version_3_cursor_keeps_what_it_knew_and_requests_its_days_without_sessions_once(tmp_path):
    store = _store(tmp_path, [1, 2, 9])
    first = _plan([store], None, outcomes=lambda keys: {})
    captured = _plan([store], first.cursor_json, outcomes=lambda keys: dict.fromkeys(keys, "succeeded"))
    assert captured.runs == [] and json.loads(captured.cursor_json)["attempts"] == {}
    old = json.loads(captured.cursor_json)
    del old["covered"]
    old["version"] = 3
    with structlog.testing.capture_logs() as events:
        migrated = _plan([store], json.dumps(old))
    assert not [e for e in events if e["event"] == "hermes.sensor.cursor_reset"]
    assert migrated.requests == []  # the days with sessions were captured: nothing to do
    assert migrated.empty == [*SPAN[2:8], SPAN[9]]
    assert json.loads(migrated.cursor_json)["version"] == CURSOR_VERSION
    before, after = load_cursor(captured.cursor_json), load_cursor(migrated.cursor_json)
    assert {p: {d: m.captured for d, m in s.days.items()} for p, s in after.stores.items()} == {
        p: {d: m.captured for d, m in s.days.items()} for p, s in before.stores.items()
    }  # the days captured stay captured


def test_spans_merge_days_that_touch():
    spans = Spans()
    spans.add(["2026-06-03", "2026-06-01", "2026-06-02", "2026-06-05"])
    assert spans.spans == [["2026-06-01", "2026-06-03"], ["2026-06-05", "2026-06-05"]]
    spans.add(["2026-06-04"])
    assert spans.spans == [["2026-06-01", "2026-06-05"]] and spans.days() == 5
    assert "2026-06-04" in spans and "2026-06-06" not in spans and "2026-05-31" not in spans
