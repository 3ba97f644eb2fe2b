"""Every table that feeds the datasets is watched.

- ``session_model_usage``: Hermes's own ``record_auxiliary_usage`` (hermes-agent
  0.19, the real writer) touches no other table; as the only write of a tick it
  must request its session's day on that tick.
- Schema 31 (Hermes v0.22.2, stores built in its layout by
  :mod:`tests.support.schema31`): tier 1 moves on ``pinned``, ``hidden``,
  ``auto_archived``, ``title_source`` and ``system_prompt_hash``, and when a
  ``system_prompts`` row appears for a hash a session names; tier 2 moves on
  every column of ``sessions``, on the text a hash resolves to and on every
  cell of the day's usage rows.
"""

from __future__ import annotations

import hashlib

import pytest

from hermes_assets.lib.changes import watch
from hermes_assets.lib.changes.fingerprint import Fingerprinter
from hermes_assets.lib.source.state_db import StoreReader
from hermes_assets.lib.source.stores import Store
from tests.sensor.harness import SensorDriver, checkpoint
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter
from tests.support.schema31 import SESSIONS_COLUMNS, Store31

A, B = "2026-06-01", "2026-06-02"
NOW_S = START_S + 10 * DAY_S


# --------------------------------------------------------------------------
# session_model_usage, written by Hermes 0.19's own record_auxiliary_usage
# --------------------------------------------------------------------------


@pytest.fixture
def usage_world(tmp_path, monkeypatch):
    monkeypatch.delenv("HERMES_STATE_DB", raising=False)
    home = tmp_path / "hermes-home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    db = home / "state.db"
    with HermesWriter(db, home=home) as w:
        a = w.session("a", "cli", model="main-model")
        w.msg(a, "user", "hello")
        w.update_token_counts(a, input_tokens=100, output_tokens=10, model="main-model", api_call_count=1)
        w.at(START_S + DAY_S)
        b = w.session("b", "telegram", model="main-model")
        w.msg(b, "user", "ping")
    sensor = SensorDriver(home)
    assert sensor.tick().days == [A, B]
    sensor.settle()
    return db, home, sensor


def _only_usage_moved(db, write) -> None:
    """Run ``write`` and check it changed session_model_usage and nothing else Hermes keeps."""
    with HermesWriter(db, home=db.parent) as w:
        before = [w.query(f"SELECT * FROM {t} ORDER BY rowid") for t in ("sessions", "messages")]
        usage = w.query("SELECT * FROM session_model_usage ORDER BY rowid")
        w.tick(30)
        write(w)
        assert [w.query(f"SELECT * FROM {t} ORDER BY rowid") for t in ("sessions", "messages")] == before
        assert w.query("SELECT * FROM session_model_usage ORDER BY rowid") != usage


def test_auxiliary_usage_alone_requests_its_day(usage_world):
    db, _, sensor = usage_world
    _only_usage_moved(
        db,
        lambda w: w.record_auxiliary_usage(
            "a", "title_generation", model="aux-model", input_tokens=40, output_tokens=8, estimated_cost_usd=0.0004
        ),
    )
    assert sensor.tick().days == [A]
    # the same task again: Hermes adds to the existing row (an upsert, same rowid)
    _only_usage_moved(
        db,
        lambda w: w.record_auxiliary_usage("a", "title_generation", model="aux-model", input_tokens=5, output_tokens=1),
    )
    assert sensor.tick().days == [A]
    # the other day, another task: that day only
    _only_usage_moved(
        db,
        lambda w: w.record_auxiliary_usage("b", "compression", model="aux-model", input_tokens=900, output_tokens=90),
    )
    assert sensor.tick().days == [B]
    assert sensor.tick().run_requests == []


def test_usage_rows_already_seen_are_not_requested_again(usage_world):
    """The marks re-read the rows of the last seconds (two writers' clocks): a tick whose files
    moved without a usage write (Hermes's checkpoint) requests nothing."""
    db, _, sensor = usage_world
    _only_usage_moved(db, lambda w: w.record_auxiliary_usage("a", "vision", model="aux", input_tokens=1))
    assert sensor.tick().days == [A]
    checkpoint(db)
    tick = sensor.tick()
    assert tick.run_requests == [] and tick.skip.startswith("no change: Hermes wrote to the Hermes store")


def test_main_loop_usage_of_an_old_day_is_requested(usage_world):
    """``update_token_counts`` on a session of an older day: its totals and its usage row move."""
    db, _, sensor = usage_world
    with HermesWriter(db, home=db.parent) as w:
        w.tick(60)
        w.update_token_counts("a", input_tokens=7, output_tokens=3, model="other-model", api_call_count=1)
    assert sensor.tick().days == [A]


# --------------------------------------------------------------------------
# schema 31 (Hermes v0.22.2's layout)
# --------------------------------------------------------------------------

PROMPT = "You are Hermes v0.22. " * 20


@pytest.fixture
def store31(tmp_path):
    s = Store31(tmp_path / "home31" / "state.db")
    s.session("a1", START_S, prompt=PROMPT, title="first", title_source="auto")
    s.message("a1", "user", "hi", START_S + 1)
    s.session("a2", START_S + 60, prompt=PROMPT + "other")
    s.session("b1", START_S + DAY_S, prompt=PROMPT)
    s.sql(
        "INSERT INTO session_model_usage (session_id, model, task, input_tokens, last_seen) "
        "VALUES ('a1', 'model-31', '', 10, ?)",
        (START_S + 2,),
    )
    return s


def _tiers(store: Store31) -> tuple[dict, dict]:
    with StoreReader(Store(str(store.path)), now_s=NOW_S) as reader:
        fp = Fingerprinter(reader)
        return fp.tier1().days, fp.tier2([A, B])


@pytest.mark.parametrize(
    "cells",
    [
        {"pinned": 1},
        {"hidden": 1},
        {"auto_archived": 1},
        {"title_source": "user"},
        {"system_prompt_hash": "0" * 64},  # a hash with no prompt row (the session's prompt is now missing)
    ],
    ids=lambda c: next(iter(c)),
)
def test_tier1_moves_on_the_v022_columns(store31, cells):
    tier1, tier2 = _tiers(store31)
    store31.update("a1", **cells)
    tier1_after, tier2_after = _tiers(store31)
    assert tier1_after[A] != tier1[A] and tier1_after[B] == tier1[B]
    assert tier2_after[A] != tier2[A]


def test_tier1_moves_when_a_prompt_row_appears_for_a_hash(store31):
    """A session naming a hash whose row is missing (its prompt reads NULL, SPEC D19); the row
    then appears (an import, a repair): what the session resolves to changed, no sessions cell did.
    Tier 1 sees it (the next tick), and the sensor requests the day."""
    missing = "You were missing. " * 10
    digest = hashlib.sha256(missing.encode()).hexdigest()
    store31.update("b1", system_prompt_hash=digest)
    store = Store(str(store31.path))
    plan = watch.plan_tick([store], None, is_partition=lambda d: True, now_s=NOW_S)
    for _ in range(watch.ROTATION_TICKS + 1):
        plan = watch.plan_tick([store], plan.cursor_json, is_partition=lambda d: True, now_s=NOW_S)
    assert plan.requests == []
    tier1 = _tiers(store31)[0]
    store31.sql("INSERT INTO system_prompts (hash, prompt) VALUES (?, ?)", (digest, missing))
    after = _tiers(store31)[0]
    assert after[B] != tier1[B] and after[A] == tier1[A]
    plan = watch.plan_tick([store], plan.cursor_json, is_partition=lambda d: True, now_s=NOW_S)
    assert [d for d, _ in plan.requests] == [B]


_VALUES = {"TEXT": "changed", "REAL": 1780300000.5, "INTEGER": 7}


@pytest.mark.parametrize("column", [n for n, d in SESSIONS_COLUMNS if n not in ("id", "started_at")])
def test_tier2_covers_every_sessions_column(store31, column):
    declared = dict(SESSIONS_COLUMNS)[column].split()[0]
    before = _tiers(store31)[1]
    store31.update("a2", **{column: _VALUES[declared]})
    assert _tiers(store31)[1][A] != before[A]


def test_tier2_covers_the_resolved_prompt_and_the_usage_rows(store31):
    before = _tiers(store31)[1]
    # the text of a hash rewritten in place (no Hermes API does it; tier 2 must still see it)
    store31.sql("UPDATE system_prompts SET prompt = prompt || '!' WHERE prompt = ?", (PROMPT + "other",))
    edited = _tiers(store31)[1]
    assert edited[A] != before[A] and edited[B] == before[B]
    store31.sql("UPDATE session_model_usage SET cost_status = 'estimated'")
    assert _tiers(store31)[1][A] != edited[A]


def test_a_v022_store_is_captured_after_a_v019_one(store31):
    """Older stores lack the v0.22 columns and system_prompts: the same code selects by name."""
    tier1, tier2 = _tiers(store31)
    assert set(tier1) == set(tier2) == {A, B}
