"""The two tiers of the per-day session fingerprint (SPEC §8 step 2, D17), on real stores.

Tier 1 must move on the very next tick for every column Hermes rewrites after
creating a session, and must place every session on the day the assets place
it (SPEC §2), hostile ``started_at`` cells included; tier 2 must move for what
tier 1 does not compare (a prompt edited in place, same length).
"""

from __future__ import annotations

import pytest

from hermes_assets.lib.basics.timestamps import SANE_MIN_S
from hermes_assets.lib.changes.fingerprint import Fingerprinter
from hermes_assets.lib.source.state_db import StoreReader
from hermes_assets.lib.source.stores import Store
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

A, B, C = "2026-06-01", "2026-06-02", "2026-06-03"
#: the reader's clock: every edge of the sane window below is relative to it
NOW_S = START_S + 10 * DAY_S
PROMPT = "You are Hermes. " * 40  # a long-ish system prompt, like real ones


def _fingerprints(db, days=(A, B, C)):
    with StoreReader(Store(str(db)), now_s=NOW_S) as reader:
        fp = Fingerprinter(reader)
        return fp.tier1().days, fp.tier2(days)


@pytest.fixture
def store(tmp_path):
    """Three days, two sessions on day A (one ended, one rewound), one on B and C."""
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        a1 = w.session("a1", "cli", model="anthropic/claude-sonnet-4.6", system_prompt=PROMPT, cwd="/work/x")
        users = [w.msg(a1, "user", "hello"), w.msg(a1, "assistant", "hi"), w.msg(a1, "user", "again")]
        w.msg(a1, "assistant", "sure")
        w.rewind_to_message(a1, users[2])
        a2 = w.session("a2", "telegram", system_prompt=PROMPT)
        w.msg(a2, "user", "ping")
        w.update_token_counts(
            a2, input_tokens=100, output_tokens=20, model="openai/gpt-5", estimated_cost_usd=0.01, api_call_count=1
        )
        w.end(a2, "session_reset")
        w.set_session_title(a2, "Ping pong")
        w.at(START_S + DAY_S)
        w.msg(w.session("b1", "tui", system_prompt=PROMPT), "user", "build it")
        w.at(START_S + 2 * DAY_S)
        w.msg(w.session("c1", "cli", system_prompt=PROMPT), "user", "question")
    return db


# --------------------------------------------------------------------------
# placement (SPEC §2)
# --------------------------------------------------------------------------

#: started_at cells, each in a session of its own; the sane window is [2000-01-01, NOW + 1 day]
HOSTILE_STARTS = {
    "null": None,
    "negative": -5.0,
    "zero": 0,
    "before_2000": SANE_MIN_S - 1.0,
    "rounds_up_to_2000": SANE_MIN_S - 0.0004,  # floor(x * 1000 + 0.5) is the first sane ms
    "rounds_down_below_2000": SANE_MIN_S - 0.0006,
    "exactly_2000": SANE_MIN_S,
    "within_a_second_of_2000": SANE_MIN_S + 0.5,
    "integer_epoch": int(START_S + 3 * DAY_S),
    "last_sane_ms": NOW_S + DAY_S - 0.0004,
    "first_insane_ms": NOW_S + DAY_S + 0.0006,
    "within_a_second_of_tomorrow": NOW_S + DAY_S - 0.5,
    "far_future": 1e20,
    "huge": 1e300,
    "infinite": float("inf"),
    "text_number": str(START_S + DAY_S),
    "text_iso": "2026-06-02T10:00:00Z",
    "not_a_time": "not a time",
    "blob": b"\x00\x01",
    "half_ms_edge": START_S + 15 * 3600 - 0.0005,  # 23:59:59.9995 rounds up to the next day
}


def test_sql_placement_agrees_with_the_session_index_on_hostile_started_at(tmp_path):
    """Every odd ``started_at`` (NULL, text, blob, out of the sane window, on its edges,
    integer, infinite, half a millisecond before midnight): the fingerprint places each
    session exactly where :meth:`StoreReader.session_index` places it, the fallback to the
    earliest sane message and to ``ended_at`` included."""
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        w.allow_nulls("sessions", "started_at")
        for i, name in enumerate(HOSTILE_STARTS):
            w.at(START_S + (i % 5) * DAY_S + 60 * i)
            sid = w.session(name, "cli")
            if i % 3 == 0:
                w.msg(sid, "user", "a message with a sane time")
            elif i % 3 == 1:
                w.end(sid)
        w.session("no_time_at_all", "cli")
        for name, value in {**HOSTILE_STARTS, "no_time_at_all": None}.items():
            w.raw_sql("UPDATE sessions SET started_at = ? WHERE id = ?", (value, name))
    with StoreReader(Store(str(db)), now_s=NOW_S) as reader:
        index = {sid: e.day for sid, e in reader.session_index().items()}
        fp = Fingerprinter(reader)
        placed = fp.days_of(list(index))
        tier1 = fp.tier1()
    assert placed == index
    assert set(tier1.days) == {d for d in index.values() if d is not None}
    assert tier1.unplaced == sum(d is None for d in index.values()) >= 1
    assert tier1.sessions == len(index)
    # the edges really are where the assets put them (the test is not vacuous)
    assert index["rounds_up_to_2000"] == index["exactly_2000"] == "2000-01-01"
    assert index["half_ms_edge"] == "2026-06-02"
    assert index["integer_epoch"] == "2026-06-04"


# --------------------------------------------------------------------------
# tier 1: every column Hermes rewrites, seen at once
# --------------------------------------------------------------------------

TIER1_WRITES = {
    # name: (day, what Hermes does); each keeps every other day's rows as they were
    "title, same length": (A, lambda w: w.set_session_title("a2", "Pong ping")),
    "title set on another session": (B, lambda w: w.set_session_title("b1", "Build")),
    "model switch": (A, lambda w: w.update_session_model("a2", "openai/gpt-6")),
    "end": (B, lambda w: w.end_session("b1", "tui_close")),
    "reopen": (A, lambda w: w.reopen_session("a2")),
    "token totals after the end": (A, lambda w: w.update_token_counts("a2", input_tokens=1, output_tokens=0)),
    "archived": (C, lambda w: w.set_session_archived("c1", True)),
    "handoff state": (C, lambda w: w.request_handoff("c1", "telegram")),
    "rewind": (B, lambda w: w.rewind_to_message("b1", w.mids("b1")[0])),
    "undo of a rewind (active flags only)": (A, lambda w: w.restore_rewound("a1", w.mids("a1")[2])),
    "session deleted": (A, lambda w: w.delete_session("a2")),
    "estimated cost only (raw SQL)": (
        A,
        lambda w: w.raw_sql("UPDATE sessions SET estimated_cost_usd = 0.0100001 WHERE id = 'a2'"),
    ),
    "ended_at by a millisecond (raw SQL)": (
        A,
        lambda w: w.raw_sql("UPDATE sessions SET ended_at = ended_at + 0.001 WHERE id = 'a2'"),
    ),
    "title moved to the other session of the day": (
        A,
        lambda w: (w.set_session_title("a2", ""), w.set_session_title("a1", "Ping pong")),
    ),
}


@pytest.mark.parametrize("name", list(TIER1_WRITES))
def test_tier1_moves_on_the_day_of_every_rewrite_and_only_there(store, name):
    day, write = TIER1_WRITES[name]
    before, _ = _fingerprints(store)
    with HermesWriter(store, home=store.parent, start_s=START_S + 5 * DAY_S) as w:
        write(w)
    after, _ = _fingerprints(store)
    changed = {d for d in before.keys() | after.keys() if before.get(d) != after.get(d)}
    assert changed == {day}


def test_tier1_does_not_read_a_prompt_tier2_does(store):
    """A same-length in-place edit of a system prompt (raw SQL: Hermes's
    ``update_system_prompt`` writes the same column) is tier 2's: tier 1 stays, tier 2 of
    that day moves, the other days' tier 2 stays."""
    t1_before, t2_before = _fingerprints(store)
    edited = "You are HERMES. " + PROMPT[len("You are Hermes. ") :]
    assert len(edited) == len(PROMPT)
    with HermesWriter(store, home=store.parent) as w:
        w.raw_sql("UPDATE sessions SET system_prompt = ? WHERE id = 'b1'", (edited,))
    t1_after, t2_after = _fingerprints(store)
    assert t1_after == t1_before
    assert {d for d in t2_before if t2_before[d] != t2_after[d]} == {B}


@pytest.mark.parametrize(
    "column, value",
    [
        ("model_config", '{"max_iterations": 91}'),
        ("cwd", "/work/y"),
        ("end_reason", "cli_close"),
        ("billing_mode", "subscription"),
    ],
)
def test_tier2_covers_the_columns_tier1_leaves_out(store, column, value):
    _, t2_before = _fingerprints(store)
    with HermesWriter(store, home=store.parent) as w:
        w.raw_sql(f"UPDATE sessions SET {column} = ? WHERE id = 'a1'", (value,))
    _, t2_after = _fingerprints(store)
    assert {d for d in t2_before if t2_before[d] != t2_after[d]} == {A}


def test_fingerprints_are_stable_when_nothing_changes(store):
    assert _fingerprints(store) == _fingerprints(store)
