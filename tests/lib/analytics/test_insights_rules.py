"""The rules of the analytics that answer what ``hermes insights`` answers, one by one, on small tables.

Their figures over whole stores are held against Hermes's own report in
``tests/fidelity/test_hermes_insights.py``; these pin the cases a fixture may
not hold: a skill edit, a call whose arguments name no skill, a copy, a deleted
row, a tie, a session that holds only one kind of tool row.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa

from hermes_assets.lib.analytics import activity, hermes_prices, hermes_tool_calls, skills, top_sessions
from hermes_assets.lib.analytics.day_sessions import Session, Share, hermes_cost, model_shares, usage_entries

DAY = "2026-06-03"  # a Wednesday
T0 = dt.datetime(2026, 6, 3, 9, 30, tzinfo=dt.UTC)


def _call(name: str, arguments) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": args}}


def _messages(rows: list[dict]) -> pa.Table:
    base = {
        "host": "box",
        "store": "/h/state.db",
        "session_id": "s1",
        "role": "assistant",
        "tool_name": None,
        "tool_calls": None,
        "timestamp": T0,
        "source_deleted": False,
        "copy_of": None,
    }
    return pa.Table.from_pylist(
        [{**base, **r} for r in rows],
        schema=pa.schema(
            [
                ("host", pa.string()),
                ("store", pa.string()),
                ("session_id", pa.string()),
                ("role", pa.string()),
                ("tool_name", pa.string()),
                ("tool_calls", pa.string()),
                ("timestamp", pa.timestamp("ms", tz="UTC")),
                ("source_deleted", pa.bool_()),
                ("copy_of", pa.string()),
            ]
        ),
    )


def test_skills_count_loads_and_edits_as_hermes_does():
    later = T0 + dt.timedelta(minutes=5)
    messages = _messages(
        [
            {"tool_calls": json.dumps([_call("skill_view", {"name": "git"}), _call("skill_manage", {"name": "git"})])},
            {"tool_calls": json.dumps([_call("skill_view", {"name": "git"})]), "timestamp": later, "copy_of": "m1"},
            {"tool_calls": json.dumps([_call("skill_view", {"name": "  "})])},  # a blank name: not a skill
            {"tool_calls": json.dumps([_call("skill_view", "not json")])},
            {"tool_calls": json.dumps([_call("skill_view", {"name": "gone"})]), "source_deleted": True},
            {"role": "tool", "tool_calls": json.dumps([_call("skill_view", {"name": "git"})])},  # not assistant
        ]
    )
    (row,) = skills.daily_skills(DAY, messages).table.to_pylist()
    # the copy counts, as in Hermes's report (every stored row); the deleted row does not
    assert (row["skill"], row["loads"], row["edits"], row["actions"], row["sessions"]) == ("git", 2, 1, 3, 1)
    assert row["last_used_at"] == later


def test_hermes_tool_calls_take_the_larger_kind_per_session():
    messages = _messages(
        [
            {"tool_calls": json.dumps([_call("terminal", {}), _call("terminal", {})])},
            {"role": "tool", "tool_name": "terminal"},
            # another session holds only named tool rows: its calls count too (Hermes v0.22, #9814)
            {"session_id": "s2", "role": "tool", "tool_name": "terminal"},
            {"session_id": "s2", "role": "tool", "tool_name": "read_file"},
            {"session_id": "s3", "tool_calls": "[not json"},
        ]
    )
    assert hermes_tool_calls.hermes_calls(messages) == {"terminal": 3, "read_file": 1}


def _session(sid: str, *, tokens: int = 0, messages: int = 0, start: dt.datetime = T0, end=None) -> Session:
    share = Share(
        "m",
        {
            "api_calls": 1,
            "input_tokens": tokens,
            **dict.fromkeys(("output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"), 0),
        },
        None,
        None,
        0.0,
        True,
    )
    counters = dict.fromkeys(
        ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"), 0
    )
    return Session("box", "/h/state.db", "", sid, "cli", "m", None, start, end, [share], messages, 0, counters)


def test_top_sessions_break_ties_by_the_later_start_and_keep_ten():
    sessions = [_session(f"s{i:02d}", tokens=100, start=T0 + dt.timedelta(minutes=i)) for i in range(12)]
    sessions.append(_session("big", tokens=500))
    sessions.append(_session("none", tokens=0))
    ranked = top_sessions.ranked(sessions, top_sessions.RANKINGS["tokens"])
    assert [s.id for s in ranked] == ["big", "s11", "s10", "s09", "s08", "s07", "s06", "s05", "s04", "s03"]


def test_activity_counts_sessions_by_utc_hour_on_the_days_weekday():
    sessions = [
        _session("a", tokens=10),
        _session("b", tokens=5, start=T0 + dt.timedelta(minutes=20)),
        _session("c", start=T0.replace(hour=22)),
    ]
    rows = activity.activity(DAY, sessions).table.to_pylist()
    assert [(r["weekday"], r["weekday_name"], r["hour"], r["sessions"], r["total_tokens"]) for r in rows] == [
        (3, "Wed", 9, 2, 15),
        (3, "Wed", 22, 1, 0),
    ]


def test_a_sessions_own_counters_beyond_its_usage_rows_count_under_its_own_model():
    row = {
        "model": "own",
        "usage_by_model": json.dumps(
            [{"model": "aux", "input_tokens": 30, "api_call_count": 1, "cost_status": "ok", "estimated_cost_usd": 0.5}]
        ),
        "api_call_count": 3,
        "input_tokens": 100,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "estimated_cost_usd": 0.25,
        "actual_cost_usd": None,
    }
    aux, own = model_shares(row)
    assert (aux.model, aux.counts["input_tokens"], aux.hermes_cost_usd) == ("aux", 30, 0.5)
    assert (own.model, own.counts["input_tokens"], own.counts["api_calls"], own.estimated_cost_usd) == (
        "own",
        70,
        2,
        0.0,
    )


def test_a_usage_row_whose_names_are_not_text_is_priced_at_nothing_not_a_failed_day():
    tokens = {"input_tokens": 1_000_000, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0}
    priced = {"model": "claude-sonnet-4-6", "billing_provider": "anthropic", **tokens}
    assert hermes_cost(priced) == 3.0
    for name, odd in (("model", ["claude-sonnet-4-6"]), ("billing_provider", {"a": 1}), ("billing_base_url", [1])):
        row = {**priced, name: odd}
        assert hermes_cost(row) == (3.0 if name == "billing_base_url" else 0.0), name
    session = {
        "model": "own",
        "usage_by_model": json.dumps([{**priced, "model": {"id": "claude"}, "api_call_count": 1}]),
        "api_call_count": 1,
        **tokens,
        "reasoning_tokens": 0,
        "estimated_cost_usd": None,
        "actual_cost_usd": None,
    }
    (share,) = model_shares(session)
    assert (share.model, share.counts["input_tokens"], share.hermes_cost_usd) == (None, 1_000_000, 0.0)


def test_usage_rows_nested_deeper_than_json_reads_are_none_not_a_failed_day():
    deep = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError, not ValueError
    assert usage_entries(deep) == []
    assert usage_entries("[{") == []
    assert usage_entries('[{"model": "m"}, 3]') == [{"model": "m"}]


def test_hermes_prices_routes():
    assert hermes_prices.route("gpt-x", "openrouter", None) is None  # priced from a list fetched online
    assert hermes_prices.route("anthropic/claude-sonnet-4.6", None, None) == ("anthropic", "claude-sonnet-4.6")
    # a dotted Anthropic version finds its dashed row
    assert hermes_prices.rates("anthropic", "claude-sonnet-4.6") == hermes_prices.rates(
        "anthropic", "claude-sonnet-4-6"
    )
    tokens = {"input_tokens": 1_000_000, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0}
    assert hermes_prices.row_cost("claude-sonnet-4-6", "anthropic", None, tokens) == 3.0
    assert hermes_prices.row_cost("no-such-model", "anthropic", None, tokens) == 0.0
