"""lib/plan/generations.py: a reused id with another birth gets the next generation; nothing captured is lost (D15)."""

from __future__ import annotations

import pyarrow as pa

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.plan.generations import MESSAGE_BIRTH_COLUMNS, SESSION_BIRTH_COLUMNS, Births, Generations
from hermes_assets.lib.source.state_db import SessionBundle
from hermes_assets.lib.source.stores import Store

STORE, OTHER = "/a/state.db", "/b/state.db"
T0 = 1780304400.0  # 2026-06-01T09:00:00Z


def birth_tables(sessions: list[tuple], messages: list[tuple]) -> tuple[pa.Table, pa.Table]:
    """Captured rows (the birth columns only): ``(store, sid, generation, started_at s)`` and
    ``(store, sid, mid, generation, role, timestamp s)``."""
    ts = pa.timestamp("ms", tz="UTC")
    as_ms = lambda s: None if s is None else int(s * 1000)  # noqa: E731
    s_rows = [dict(zip(SESSION_BIRTH_COLUMNS, (st, sid, g, as_ms(t)))) for st, sid, g, t in sessions]
    m_rows = [dict(zip(MESSAGE_BIRTH_COLUMNS, (st, sid, mid, g, r, as_ms(t)))) for st, sid, mid, g, r, t in messages]
    s_schema = pa.schema(
        [
            schemas.HERMES_SESSIONS.field(c).with_type(ts) if c == "started_at" else schemas.HERMES_SESSIONS.field(c)
            for c in SESSION_BIRTH_COLUMNS
        ]
    )
    m_schema = pa.schema([schemas.HERMES_MESSAGES.field(c) for c in MESSAGE_BIRTH_COLUMNS])
    return pa.Table.from_pylist(s_rows, s_schema), pa.Table.from_pylist(m_rows, m_schema)


def bundle(sid: str, started: float | None, messages: list[tuple]) -> SessionBundle:
    messages = [{"id": mid, "role": r, "timestamp": t} for mid, r, t in messages]
    return SessionBundle(Store(STORE), sid, "2026-06-01", {"id": sid, "started_at": started}, messages, [])


def test_births_are_read_per_store_from_the_days_files():
    sessions, messages = birth_tables(
        [(STORE, "s", 1, T0), (OTHER, "s", 1, T0 + 5)],
        [(STORE, "s", 7, 1, "user", T0 + 1), (STORE, "s", 7, 2, "assistant", T0 + 9), (OTHER, "s", 7, 1, "tool", None)],
    )
    births = Births.from_tables(sessions, messages, STORE)
    assert births.sessions == {"s": [(1, int(T0 * 1000))]}
    assert births.messages == {("s", 7): [(1, "user", int((T0 + 1) * 1000)), (2, "assistant", int((T0 + 9) * 1000))]}
    assert Births.from_tables(None, None, STORE) == Births()


def test_a_never_captured_key_is_generation_one_and_the_ids_stay_plain():
    gens = Generations()
    session, by_mid = gens.assign(Births(), bundle("s", T0, [(1, "user", T0 + 1), (2, "assistant", T0 + 2)]))
    assert (session, by_mid) == (1, None)  # None: every message is generation 1
    assert gens.sessions == {"s": 1} and gens.messages == {("s", 1): 1, ("s", 2): 1} and gens.reborn == 0


def test_the_same_birth_keeps_its_generation_and_another_birth_gets_the_next_one():
    sessions, messages = birth_tables(
        [(STORE, "s", 1, T0)],
        [
            (STORE, "s", 1, 1, "user", T0 + 1),
            (STORE, "s", 2, 1, "assistant", T0 + 2),
            (STORE, "s", 2, 2, "user", T0 + 8),
        ],
    )
    births = Births.from_tables(sessions, messages, STORE)
    gens = Generations()
    stored = bundle("s", T0, [(1, "user", T0 + 1), (2, "user", T0 + 8), (3, "user", T0 + 9)])
    session, by_mid = gens.assign(births, stored)
    assert session == 1 and by_mid == {1: 1, 2: 2, 3: 1} and gens.reborn == 0
    restored = bundle("s", T0 + 3600, [(1, "assistant", T0 + 4000), (2, None, None)])
    again = Generations()
    session, by_mid = again.assign(births, restored)
    # the session was started at another time: generation 2; mid 1 too; mid 2 matches any (NULL birth)
    assert session == 2 and by_mid == {1: 2, 2: 2} and again.reborn == 2


def test_a_day_without_a_file_counts_generations_without_recording_every_id():
    """``record_ids=False`` (a day with no file: retention reads nothing of it): the same
    generations and the same count of reused ids, no id kept."""
    sessions, messages = birth_tables([(STORE, "s", 1, T0)], [(STORE, "s", 1, 1, "user", T0 + 1)])
    births = Births.from_tables(sessions, messages, STORE)
    restored = bundle("s", T0 + 3600, [(1, "assistant", T0 + 4000), (2, "user", T0 + 4001)])
    recorded, counted = Generations(), Generations(record_ids=False)
    assert recorded.assign(births, restored) == counted.assign(births, restored) == (2, {1: 2, 2: 1})
    assert recorded.reborn == counted.reborn == 2
    assert recorded.messages and not counted.messages and not counted.sessions
    first = bundle("t", T0, [(5, "user", T0 + 1)])
    assert Generations(record_ids=False).assign(Births(), first) == Generations().assign(Births(), first) == (1, None)
