"""The one time parser (SPEC §5.1): REAL seconds, and TEXT that is a number or ISO-8601.

Hermes's own MCP server tests write ISO-8601 text timestamps; such cells are
times, not bad timestamps, in the projection, the day placement and the raw
datasets. Anything else stays a counted ``bad_timestamp``.
"""

from __future__ import annotations

import datetime as dt

import pytest

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.timestamps import epoch_ms, ms_day, sane_ms, session_start_ms
from tests.support.hermes_writer import START_S
from tests.support.project import NOW_S, project_store, rows

T = 1780304400.123456  # 2026-06-01T09:00:00.123456Z


def iso_ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000 + 0.5)


@pytest.mark.parametrize(
    "cell, expected",
    [
        (T, 1780304400123),
        (str(T), 1780304400123),
        ("1780304400", 1780304400000),
        (" 1780304400.0625 ", 1780304400063),  # half up, as for REAL
        ("1.7803044e9", 1780304400000),
        ("2026-06-01T09:00:00Z", 1780304400000),
        ("2026-06-01 09:00:00", 1780304400000),  # no zone means UTC
        ("2026-06-01T09:00:00.1234565Z", 1780304400123),  # 7 digits, rounded to ms half up
        ("2026-06-01T09:00:00.0005Z", 1780304400001),
        ("2026-06-01T11:00:00+02:00", 1780304400000),
        ("2026-06-01T04:30:00-04:30", 1780304400000),
        (b"2026-06-01T09:00:00Z", 1780304400000),
    ],
)
def test_text_that_is_a_number_or_iso_8601_is_a_time(cell, expected):
    assert epoch_ms(cell) == expected


@pytest.mark.parametrize(
    "cell",
    [
        "",
        "yesterday",
        "2026-06-01",
        "2026-06-01T09:00",
        "2026-13-01T09:00:00Z",
        "2026-02-30T09:00:00Z",
        "2026-06-01T09:00:00.1234567890Z",
        "2026-06-01T09:00:00+24:00",
        "nan",
        "inf",
        "1e999",
        "0x10",
        "2026-06-01T09:00:00Z trailing",
        None,
        True,
        [],
        b"\xff",
    ],
)
def test_anything_else_is_not_a_time(cell):
    assert epoch_ms(cell) is None


def test_sanity_window_and_day():
    assert sane_ms(epoch_ms("2000-01-01T00:00:00Z"), NOW_S)
    assert not sane_ms(epoch_ms("1999-12-31T23:59:59.999Z"), NOW_S)
    assert sane_ms(int((NOW_S + 86400) * 1000), NOW_S) and not sane_ms(int((NOW_S + 86400) * 1000) + 1, NOW_S)
    assert ms_day(epoch_ms("2026-06-01T23:59:59.9995Z")) == "2026-06-02"  # the rounded instant decides


def test_session_start_falls_back_in_order():
    assert session_start_ms("2026-06-01T09:00:00Z", [], None, NOW_S) == 1780304400000
    assert session_start_ms("garbage", ["x", "2026-06-02T00:00:00Z", START_S + 86400 * 3], None, NOW_S) == (
        iso_ms("2026-06-02T00:00:00Z")
    )
    assert session_start_ms(None, ["x"], "2026-06-05T00:00:00Z", NOW_S) == iso_ms("2026-06-05T00:00:00Z")
    assert session_start_ms(None, [], -5, NOW_S) is None


def test_text_timestamps_are_captured_in_all_three_datasets(hermes_db):
    """A session whose started_at, ended_at and message timestamps are ISO-8601
    TEXT (as Hermes's MCP server tests write them) is placed on its day and captured,
    with no bad_timestamp; a garbage text cell is still one counted bad_timestamp."""
    w = hermes_db
    w.session("iso", "cli")
    good = w.msg("iso", "user", "q")
    bad = w.msg("iso", "assistant", "a")
    w.end_session("iso", "cli_close")
    w.raw_sql(
        "UPDATE sessions SET started_at = '2026-06-03T10:00:00Z', ended_at = '2026-06-03 10:05:00' WHERE id = 'iso'"
    )
    w.raw_sql("UPDATE messages SET timestamp = '2026-06-03T10:01:00.5+00:00' WHERE id = ?", (good,))
    w.raw_sql("UPDATE messages SET timestamp = 'soon' WHERE id = ?", (bad,))
    proj = project_store(w.path)
    assert proj.days["2026-06-03"] == ["iso"]
    (session,) = rows(proj.sessions)
    assert session["started_at"] == iso_ms("2026-06-03T10:00:00Z")
    assert session["ended_at"] == iso_ms("2026-06-03T10:05:00Z")
    stamps = {r["id"]: r["timestamp"] for r in rows(proj.messages)}
    assert stamps == {good: iso_ms("2026-06-03T10:01:00.500Z"), bad: None}
    got = proj.session_rows("iso")
    assert got[0]["conversation_started_at"] == iso_ms("2026-06-03T10:00:00Z")
    assert [r["message_created_at"] for r in got] == [
        iso_ms("2026-06-03T10:01:00.500Z"),
        iso_ms("2026-06-03T10:00:00Z"),
        iso_ms("2026-06-03T10:05:00Z"),
    ]
    assert proj.tally.counts == {errors.BAD_TIMESTAMP: 1}
    assert proj.tallies["hermes_messages"].counts == {errors.BAD_TIMESTAMP: 1}
    assert proj.tallies["ai_gateway_messages_hermes"].counts == {errors.BAD_TIMESTAMP: 1}
