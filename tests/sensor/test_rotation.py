"""The tier-2 rotation: a change tier 1 does not compare is requested within 16 ticks (SPEC §8 step 2).

A system prompt edited in place (raw SQL, same length: no tier-1 column moves)
is the change only the rotation can see. The bound is proven for every day of
a store, for the day the rotation digested last (the worst case), and while
days appear and vanish during the rotation.
"""

from __future__ import annotations

import json
import math

import pytest

from hermes_assets.lib.changes import watch
from hermes_assets.lib.source.stores import Store
from tests.sensor.harness import SensorDriver
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

N_DAYS = 24
PROMPT = "You are Hermes, a helpful agent. " * 30


def _day(i: int) -> str:
    return f"2026-06-{i + 1:02d}" if i < 30 else f"2026-07-{i - 29:02d}"


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        for i in range(N_DAYS):
            w.at(START_S + i * DAY_S)
            sid = w.session(f"s{i:02d}", "cli", system_prompt=PROMPT)
            w.msg(sid, "user", f"question {i}")
            w.end(sid)
    return db


def _plan(db, cursor):
    return watch.plan_tick([Store(str(db))], cursor, is_partition=lambda day: True)


def _settle(db, cursor: str) -> str:
    for _ in range(watch.ROTATION_TICKS):
        plan = _plan(db, cursor)
        assert plan.requests == []
        cursor = plan.cursor_json
    plan = _plan(db, cursor)
    assert [s.status for s in plan.scans] == [watch.UNCHANGED]  # the rotation has stopped: no SQL
    return plan.cursor_json


def _edit_prompt(db, sid: str, k: int) -> None:
    """Rewrite one character of the prompt in place: same length, no other column moves."""
    with HermesWriter(db, home=db.parent) as w:
        (prompt,) = w.query("SELECT system_prompt FROM sessions WHERE id = ?", (sid,))[0]
        edited = prompt[:k] + ("#" if prompt[k] != "#" else "%") + prompt[k + 1 :]
        w.raw_sql("UPDATE sessions SET system_prompt = ? WHERE id = ?", (edited, sid))


def _ticks_until_requested(db, cursor: str, day: str, between=None) -> tuple[int, str]:
    for n in range(1, 3 * watch.ROTATION_TICKS):
        plan = _plan(db, cursor)
        cursor = plan.cursor_json
        requested = [d for d, _ in plan.requests]
        if day in requested:
            return n, cursor
        if between is not None:
            between(n)
    raise AssertionError(f"{day} never requested")


def test_a_prompt_edit_on_any_day_is_requested_within_16_ticks(store):
    first = _plan(store, None)
    assert len(first.requests) == N_DAYS
    cursor = _settle(store, first.cursor_json)
    share = json.loads(cursor)["stores"][str(store)]["rotation"]["share"]
    assert share == math.ceil(N_DAYS / watch.ROTATION_TICKS) == 2
    seen = {}
    for i in range(N_DAYS):
        _edit_prompt(store, f"s{i:02d}", i)
        plan = _plan(store, cursor)  # the tick that sees the files change: tier 1 finds nothing
        assert [s.status for s in plan.scans] == [watch.READ]
        cursor = plan.cursor_json
        n = 1
        if _day(i) not in [d for d, _ in plan.requests]:
            more, cursor = _ticks_until_requested(store, cursor, _day(i))
            n += more
        seen[_day(i)] = n
        cursor = _settle(store, cursor)
    assert max(seen.values()) <= watch.ROTATION_TICKS, seen
    # the rotation really goes round: the last day it reaches takes N_DAYS / share ticks
    assert max(seen.values()) == N_DAYS // share and min(seen.values()) == 1


def test_the_day_digested_last_is_the_worst_case_and_within_the_bound(store):
    cursor = _settle(store, _plan(store, None).cursor_json)
    days = json.loads(cursor)["stores"][str(store)]["days"]
    worst = max(days, key=lambda d: (days[d][2], d))  # most recently digested: last in the next round
    _edit_prompt(store, f"s{int(worst[-2:]) - 1:02d}", 5)
    n, _ = _ticks_until_requested(store, cursor, worst)
    assert 1 < n <= watch.ROTATION_TICKS


def test_the_bound_holds_while_days_appear_and_vanish(store):
    """During the 16 ticks, Hermes keeps writing: a session on a new day every tick
    (changed files restart the rotation, the new day is digested when it appears) and
    one old day deleted every other tick (the share never drops while it runs)."""
    cursor = _settle(store, _plan(store, None).cursor_json)
    days = json.loads(cursor)["stores"][str(store)]["days"]
    worst = max(days, key=lambda d: (days[d][2], d))
    victim = sorted(d for d in days if d != worst)
    _edit_prompt(store, f"s{int(worst[-2:]) - 1:02d}", 7)

    def hermes_carries_on(n: int) -> None:
        with HermesWriter(store, home=store.parent, start_s=START_S + (N_DAYS + n) * DAY_S) as w:
            w.msg(w.session(f"new{n:02d}", "cli", system_prompt=PROMPT), "user", "more")
            if n % 2:
                w.delete_session(f"s{int(victim[n][-2:]) - 1:02d}")

    n, _ = _ticks_until_requested(store, cursor, worst, between=hermes_carries_on)
    assert n <= watch.ROTATION_TICKS


def test_the_rotation_runs_16_ticks_after_a_change_then_stops(store):
    cursor = _settle(store, _plan(store, None).cursor_json)
    with HermesWriter(store, home=store.parent, start_s=START_S + 3 * DAY_S) as w:
        w.set_session_title("s03", "A title")
    statuses = []
    for _ in range(watch.ROTATION_TICKS + 2):
        plan = _plan(store, cursor)
        cursor = plan.cursor_json
        statuses.append(plan.scans[0].status)
    assert statuses == [watch.READ] + [watch.ROTATED] * (watch.ROTATION_TICKS - 1) + [watch.UNCHANGED] * 2


def test_through_the_sensor_a_prompt_change_is_requested_within_16_ticks(tmp_path, monkeypatch):
    """End to end through ``hermes_state_sensor``: Hermes's own ``update_system_prompt`` and
    a raw same-length edit are both requested within the bound, with fresh run keys."""
    monkeypatch.delenv("HERMES_STATE_DB", raising=False)
    monkeypatch.setenv("HERMES_ASSETS_SENSOR_MAX_RUNS", str(N_DAYS))  # one run per day: keys per day
    home = tmp_path / "hermes-home"
    with HermesWriter(home / "state.db", home=home) as w:
        for i in range(N_DAYS):
            w.at(START_S + i * DAY_S)
            w.msg(w.session(f"s{i:02d}", "cli", system_prompt=PROMPT), "user", "hello")
    sensor = SensorDriver(home)
    assert len(sensor.tick().days) == N_DAYS
    sensor.settle()
    for how in ("update_system_prompt", "raw"):
        with HermesWriter(home / "state.db", home=home) as w:
            if how == "raw":
                w.raw_sql("UPDATE sessions SET system_prompt = upper(system_prompt) WHERE id = 's05'")
            else:
                w.update_system_prompt("s17", PROMPT[::-1])
        day = _day(5) if how == "raw" else _day(17)
        for _ in range(1, watch.ROTATION_TICKS + 1):
            tick = sensor.tick()
            if tick.days:
                assert tick.days == [day]
                break
        else:
            pytest.fail(f"{how}: not requested within {watch.ROTATION_TICKS} ticks")
        sensor.settle()
