"""One test per rule of SPEC §5 (and the decisions D1-D14 it cites), mostly on
scenario stores written by the real Hermes writer; hostile cells (SPEC §9) are
written with raw SQL on top of such a store.

Each test names the rule it checks; each asserts the rule's observable output so
that breaking the rule fails the test.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.timestamps import epoch_ms, ms_day
from hermes_assets.lib.plan import policy
from hermes_assets.lib.projection.content import decode_content
from hermes_assets.lib.projection.context import GitResolver, strip_credentials
from hermes_assets.lib.projection.header import normalize_provider
from hermes_assets.lib.projection.parts import parse_tool_calls
from hermes_assets.lib.source.jsonutil import dumps, loads
from hermes_assets.lib.source.stores import Store
from tests.support.hermes_writer import DAY_S, START_S, flat_call, openai_call
from tests.support.project import NOW_S, USER_HOME, column_text, default_ctx, project_store, rows

STRIPPED = "<stripped>"


def project(w, **kwargs):
    return project_store(w.path, **kwargs)


def parts(rows_):
    return [(r["part_type"], r["provider_subtype"], r["content_text"]) for r in rows_]


def text_rows(table, name, session_id):
    """The stored text of column ``name`` (JSON as written) for one session's rows, in canonical order."""
    sids = table.column("session_id").to_pylist()
    texts = column_text(table, name)
    return [t for s, t in zip(sids, texts) if s == session_id]


# --------------------------------------------------------------------------
# §5.2 expansion and identity
# --------------------------------------------------------------------------


def test_expansion_order_is_reasoning_then_tool_calls_then_body(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    mid = w.msg(
        "s",
        "assistant",
        "done",
        reasoning="let me think",
        tool_calls=[openai_call("c1", "terminal", {"cmd": "ls"}), openai_call("c2", "read_file", {"path": "a.py"})],
    )
    got = project(w).session_rows("s")
    assert parts(got) == [
        ("reasoning", "thinking", "let me think"),
        ("tool_call", "tool_use", None),
        ("tool_call", "tool_use", None),
        ("text", "text", "done"),
    ]
    assert [r["tool_call_id"] for r in got] == [None, "c1", "c2", None]
    assert [r["message_id"] for r in got] == [f"hermes-s-{mid}-{k}" for k in range(4)]
    assert {r["role"] for r in got} == {"assistant"}


def test_message_id_part_id_and_provider_uuid_format(hermes_db):
    w = hermes_db
    w.session("20260601_090001_abc123", "cli")
    w.msg("20260601_090001_abc123", "user", "hi")
    w.msg("20260601_090001_abc123", "assistant", "yo", tool_calls=[openai_call("c", "t", {})])
    w.end("20260601_090001_abc123")
    got = project(w).session_rows("20260601_090001_abc123")
    assert len(got) == 4
    for r in got[:-1]:
        assert re.fullmatch(r"hermes-20260601_090001_abc123-(\d+)-(\d+)", r["message_id"])
        mid, _k = r["message_id"].rsplit("-", 2)[1:]
        assert r["provider_uuid"] == mid
        assert r["part_id"] == r["message_id"] + "#0" and r["part_index"] == 0
    end = got[-1]
    assert end["message_id"] == "hermes-20260601_090001_abc123-session_end"
    assert end["part_id"] == "hermes-20260601_090001_abc123-session_end#0"
    assert end["provider_uuid"] is None and end["part_index"] == 0
    assert [r["message_id"].rsplit("-", 1)[1] for r in got[1:3]] == ["0", "1"]


def test_message_index_is_0_to_n_minus_1_and_partless_messages_use_no_index(hermes_db):
    w = hermes_db
    w.session("s", "telegram")
    a = w.msg("s", "user", "hello")
    w.msg("s", "session_meta", None)  # gateway metadata: no part
    w.msg("s", "user", "")  # empty user content: no part
    w.msg("s", "assistant", None)  # nothing at all: no part
    b = w.msg("s", "tool", "", tool_call_id="c9")  # tool result: always a part, even ''
    c = w.msg("s", "tool", None, tool_call_id="c10")  # ... even NULL
    d = w.msg("s", "assistant", "bye")
    w.end("s")
    got = project(w).session_rows("s")
    assert [r["message_index"] for r in got] == list(range(5))
    assert [r["provider_uuid"] for r in got] == [str(a), str(b), str(c), str(d), None]
    assert parts(got)[1:3] == [("tool_result", "tool_result", ""), ("tool_result", "tool_result", "")]


def test_previous_message_id_chains_parts_with_empty_array_first(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "q")
    w.msg("s", "assistant", "a", reasoning="r", tool_calls=[openai_call("c", "t", {})])
    w.msg("s", "tool", "out", tool_call_id="c")
    w.end("s")
    proj = project(w)
    got = proj.session_rows("s")
    assert got[0]["previous_message_id"] == []
    for prev, row in zip(got, got[1:]):
        assert row["previous_message_id"] == [prev["message_id"]]
    raw = text_rows(proj.gateway, "previous_message_id", "hermes-s")
    assert raw[0] == "[]" and raw[1] == json.dumps([got[0]["message_id"]], separators=(",", ":"))


def test_a_session_is_projected_whole_in_mid_order_not_timestamp_order(hermes_db):
    """Hermes orders transcripts by messages.id; a clock step back changes nothing."""
    w = hermes_db
    w.session("s", "cli")
    first = w.msg("s", "user", "first")
    w.tick(-3600)  # clock regression
    second = w.msg("s", "assistant", "second")
    got = project(w).session_rows("s")
    assert [r["provider_uuid"] for r in got] == [str(first), str(second)]
    assert got[1]["message_created_at"] < got[0]["message_created_at"]


def test_ids_are_interleaved_global_mids_of_concurrent_sessions(hermes_db):
    w = hermes_db
    w.session("a", "cli")
    w.session("b", "cli")
    a1, b1, a2 = w.msg("a", "user", "a1"), w.msg("b", "user", "b1"), w.msg("a", "assistant", "a2")
    proj = project(w)
    assert [r["message_id"] for r in proj.session_rows("a")] == [f"hermes-a-{a1}-0", f"hermes-a-{a2}-0"]
    assert [r["message_index"] for r in proj.session_rows("a")] == [0, 1]
    assert [r["message_id"] for r in proj.session_rows("b")] == [f"hermes-b-{b1}-0"]


# --------------------------------------------------------------------------
# §5.2 carrier rule and finish reasons
# --------------------------------------------------------------------------


def test_carrier_rule_usage_and_finish_reason_only_on_last_part(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    mid = w.msg(
        "s",
        "assistant",
        "answer",
        reasoning="hmm",
        tool_calls=[openai_call("c", "t", {})],
        token_count=42,
        finish_reason="end_turn",
    )
    got = project(w).session_rows("s")
    assert [r["attributes"].get("usage") for r in got] == [None, None, {"total_tokens": 42}]
    assert [r["status"] for r in got] == [None, None, {"finish_reason": "stop"}]
    assert all(r["provider_uuid"] == str(mid) for r in got)


def test_message_without_token_count_carries_no_usage(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "assistant", "answer", finish_reason="stop")
    (row,) = project(w).session_rows("s")
    assert "usage" not in row["attributes"]
    assert row["status"] == {"finish_reason": "stop"}


@pytest.mark.parametrize(
    "stored, mapped",
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("pause_turn", "pause"),
        ("stop", "stop"),
        ("tool_calls", "tool_calls"),
        ("length", "length"),
        ("content_filter", "content_filter"),
    ],
)
def test_finish_reason_mapping(hermes_db, stored, mapped):
    w = hermes_db
    w.session("s", "cli")
    w.msg(
        "s",
        "assistant",
        None,
        tool_calls=[openai_call("c1", "t", {}), openai_call("c2", "t", {})],
        finish_reason=stored,
    )
    got = project(w).session_rows("s")
    assert [r["status"] for r in got] == [None, {"finish_reason": mapped}]


def test_finish_reason_is_carried_by_assistant_rows_only_usage_by_any_role(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "q", finish_reason="stop", token_count=7)
    w.msg("s", "tool", "out", tool_call_id="c", finish_reason="stop", token_count=9)
    user, tool = project(w).session_rows("s")
    assert user["status"] is None and user["attributes"]["usage"] == {"total_tokens": 7}
    assert tool["status"] == {"tool_status": "success"} and tool["attributes"]["usage"] == {"total_tokens": 9}


# --------------------------------------------------------------------------
# §5.2 the session-end row (D4, D12)
# --------------------------------------------------------------------------


def test_session_end_row(hermes_db):
    w = hermes_db
    w.session("s", "cli", model="m1")
    w.msg("s", "user", "q")
    w.msg("s", "assistant", "a")
    w.db.update_token_counts(
        "s",
        input_tokens=100,
        output_tokens=20,
        cache_read_tokens=5,
        cache_write_tokens=3,
        reasoning_tokens=2,
        estimated_cost_usd=0.25,
        api_call_count=1,
        model="m1",
        billing_provider="anthropic",
        billing_base_url="https://api.anthropic.com",
    )
    w.tick(DAY_S)  # ends on the next UTC day
    ended_at = w.end("s", "cli_close")
    got = project(w).session_rows("s")
    end = got[-1]
    assert end["message_index"] == len(got) - 1 == 2
    assert end["previous_message_id"] == [got[-2]["message_id"]]
    assert (end["role"], end["part_type"], end["provider_subtype"]) == ("system", "status", "status")
    assert end["content_text"] is None and end["status"] is None and end["tool_name"] is None
    assert end["message_created_at"] == epoch_ms(ended_at)
    assert end["date"] == ms_day(epoch_ms(ended_at)) == "2026-06-02"
    hermes = end["attributes"]["hermes"]
    assert hermes["session_end"] is True and hermes["end_reason"] == "cli_close"
    assert hermes["estimated_cost_usd"] == 0.25 and hermes["api_call_count"] == 1
    assert "actual_cost_usd" not in hermes  # NULL: omitted
    assert hermes["source"] == "cli"
    assert end["attributes"]["usage"] == {
        "input_tokens": 100,
        "output_tokens": 20,
        "cache_read_tokens": 5,
        "cache_write_tokens": 3,
        "reasoning_tokens": 2,
    }
    assert all("session_end" not in r["attributes"]["hermes"] for r in got[:-1])


def test_end_row_carries_the_current_totals_after_a_post_end_update(hermes_db):
    """D4: totals changed after the end (late accounting) show on the end row."""
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "q")
    w.db.update_token_counts(
        "s",
        input_tokens=10,
        output_tokens=1,
        api_call_count=1,
        estimated_cost_usd=0.5,
        model="m",
        billing_provider="openrouter",
    )
    w.end("s")
    first = project(w).session_rows("s")[-1]["attributes"]
    w.tick()
    w.db.update_token_counts(
        "s",
        input_tokens=90,
        output_tokens=9,
        api_call_count=2,
        estimated_cost_usd=1.0,
        actual_cost_usd=1.25,
        model="m",
        billing_provider="openrouter",
    )
    now = project(w).session_rows("s")[-1]["attributes"]
    assert first["usage"]["input_tokens"] == 10 and first["hermes"]["api_call_count"] == 1
    assert now["usage"]["input_tokens"] == 100 and now["usage"]["output_tokens"] == 10
    assert now["hermes"]["api_call_count"] == 3
    assert now["hermes"]["estimated_cost_usd"] == 1.5 and now["hermes"]["actual_cost_usd"] == 1.25


def test_no_end_row_while_open_reopened_or_ended_at_zero(hermes_db):
    w = hermes_db
    w.session("open", "cli")
    w.msg("open", "user", "q")
    w.session("reopened", "cli")
    w.msg("reopened", "user", "q")
    w.end("reopened")
    w.tick()
    w.db.reopen_session("reopened")
    w.session("zero", "cli")
    w.msg("zero", "user", "q")
    w.end("zero")
    w.raw_sql("UPDATE sessions SET ended_at = 0 WHERE id = 'zero'")
    proj = project(w)
    for sid in ("open", "reopened", "zero"):
        assert [r["part_type"] for r in proj.session_rows(sid)] == ["text"], sid


def test_reopened_then_ended_again_has_one_end_row_at_the_new_end(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "q")
    w.end("s", "cli_close")
    w.db.reopen_session("s")
    w.msg("s", "user", "more")
    second = w.end("s", "idle")
    got = project(w).session_rows("s")
    assert [r["part_type"] for r in got] == ["text", "text", "status"]
    assert got[-1]["message_created_at"] == epoch_ms(second)
    assert got[-1]["attributes"]["hermes"]["end_reason"] == "idle"


def test_usage_by_model_rides_the_end_row_and_hermes_sessions(hermes_db):
    """D12: every session_model_usage column but session_id, sorted by first_seen, model, ..."""
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "q")
    w.db.update_token_counts(
        "s",
        input_tokens=10,
        output_tokens=2,
        api_call_count=1,
        estimated_cost_usd=2.0,
        model="claude",
        billing_provider="anthropic",
        billing_base_url="https://api.anthropic.com",
    )
    w.tick()
    w.db.update_token_counts(
        "s",
        input_tokens=5,
        output_tokens=1,
        api_call_count=1,
        estimated_cost_usd=0.5,
        model="gpt",
        billing_provider="openrouter",
        billing_base_url="https://openrouter.ai/api/v1",
    )
    w.tick()
    w.db.record_auxiliary_usage("s", "title_generation", model="small", billing_provider="openrouter", input_tokens=3)
    w.tick()
    w.db.update_token_counts(
        "s",
        input_tokens=1,
        api_call_count=1,
        model="claude",
        billing_provider="anthropic",
        billing_base_url="https://api.anthropic.com",
    )
    w.end("s")
    proj = project(w)
    models = proj.session_rows("s")[-1]["attributes"]["hermes"]["usage_by_model"]
    assert [(u["model"], u["task"], u["api_call_count"], u["input_tokens"]) for u in models] == [
        ("claude", "", 2, 11),
        ("gpt", "", 1, 5),
        ("small", "title_generation", 1, 3),
    ]
    first_seen = [u["first_seen"] for u in models]
    assert first_seen == sorted(first_seen)
    assert models[0]["last_seen"] > models[0]["first_seen"]
    assert set(models[0]) == {
        c
        for c in (
            "model",
            "billing_provider",
            "billing_base_url",
            "billing_mode",
            "task",
            "api_call_count",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "estimated_cost_usd",
            "actual_cost_usd",
            "cost_status",
            "cost_source",
            "first_seen",
            "last_seen",
        )
    }
    assert models[0]["estimated_cost_usd"] == 2 and isinstance(models[0]["estimated_cost_usd"], int)  # 2.0 -> 2
    (session,) = [r for r in rows(proj.sessions) if r["id"] == "s"]
    assert session["usage_by_model"] == models
    assert all("usage_by_model" not in r["attributes"]["hermes"] for r in proj.session_rows("s")[:-1])


def test_no_usage_by_model_without_usage_rows(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.end("s")
    proj = project(w)
    (end,) = proj.session_rows("s")
    assert "usage_by_model" not in end["attributes"]["hermes"]
    assert rows(proj.sessions)[0]["usage_by_model"] is None


# --------------------------------------------------------------------------
# §5.3 tool calls and results (D1)
# --------------------------------------------------------------------------


def test_tool_call_rows_read_the_openai_shape(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg(
        "s",
        "assistant",
        None,
        tool_calls=[
            openai_call("call_1", "terminal", {"command": "pytest -q", "timeout": 300}, response_item_id="fc_1"),
        ],
    )
    (row,) = project(w).session_rows("s")
    assert (row["part_type"], row["tool_name"], row["tool_call_id"]) == ("tool_call", "terminal", "call_1")
    assert row["tool_args"] == {"command": "pytest -q", "timeout": 300}
    assert row["content_text"] is None and row["tool_result_for"] is None and row["status"] is None


def test_tool_call_rows_read_the_legacy_flat_shape(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg(
        "s",
        "assistant",
        None,
        tool_calls=[
            flat_call("search_files", {"pattern": "TODO"}),
            flat_call("read_file", '{"path": "a.py"}', call_id="c2"),
            {"name": "patch", "input": {"diff": "-a\n+b"}},
        ],
    )
    got = project(w).session_rows("s")
    assert [(r["tool_name"], r["tool_call_id"], r["tool_args"]) for r in got] == [
        ("search_files", None, {"pattern": "TODO"}),
        ("read_file", "c2", {"path": "a.py"}),
        ("patch", None, {"diff": "-a\n+b"}),
    ]


@pytest.mark.parametrize(
    "call, want_id, want_args",
    [
        (openai_call("c", "t", "ls -la"), "c", "ls -la"),  # unparseable string: kept raw
        (openai_call("c", "t", '{"a": [1, 2.0]}'), "c", {"a": [1, 2]}),  # JSON string: parsed
        (openai_call("c", "t", ""), "c", ""),
        ({"id": "c", "type": "function", "function": {"name": "t"}}, "c", None),  # absent: JSON null
        ({"call_id": "only_call_id", "function": {"name": "t", "arguments": "{}"}}, "only_call_id", {}),
        ({"id": "", "call_id": "fallback", "function": {"name": "t", "arguments": "{}"}}, "fallback", {}),
        ({"id": 7, "function": {"name": "t", "arguments": "{}"}}, None, {}),  # non-string id: omitted
    ],
)
def test_tool_call_id_and_args_rules(hermes_db, call, want_id, want_args):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "assistant", None, tool_calls=[call])
    proj = project(w)
    (row,) = proj.session_rows("s")
    assert row["tool_call_id"] == want_id
    assert row["tool_name"] == "t"
    assert row["tool_args"] == want_args
    (raw,) = text_rows(proj.gateway, "tool_args", "hermes-s")
    assert raw == json.dumps(want_args, ensure_ascii=False, separators=(",", ":"))  # never SQL NULL


def test_tool_result_rows(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "assistant", None, tool_calls=[openai_call("c1", "terminal", {})])
    w.msg("s", "tool", '{"output": "ok"}', tool_call_id="c1", tool_name="something_else")
    w.msg("s", "tool", "orphan result", tool_call_id="c_unknown", tool_name="web_search")
    w.msg("s", "tool", "late", tool_call_id="c_late", tool_name="from_message")
    w.msg("s", "assistant", None, tool_calls=[openai_call("c_late", "defined_after", {})])
    got = project(w).session_rows("s")
    results = [r for r in got if r["part_type"] == "tool_result"]
    assert [(r["role"], r["tool_call_id"], r["tool_result_for"], r["tool_name"]) for r in results] == [
        ("tool", "c1", "c1", "terminal"),  # the earlier call's name wins
        ("tool", "c_unknown", "c_unknown", "web_search"),  # else messages.tool_name
        ("tool", "c_late", "c_late", "from_message"),  # a LATER call does not count
    ]
    assert all(r["status"] == {"tool_status": "success"} and r["provider_subtype"] == "tool_result" for r in results)
    assert results[0]["content_text"] == '{"output": "ok"}'
    assert all(r["tool_args"] is None for r in results)


def test_tool_result_name_lookup_is_per_session(hermes_db):
    w = hermes_db
    w.session("a", "cli")
    w.session("b", "cli")
    w.msg("a", "assistant", None, tool_calls=[openai_call("shared", "from_a", {})])
    w.msg("b", "tool", "x", tool_call_id="shared", tool_name="own")
    (row,) = project(w).session_rows("b")
    assert row["tool_name"] == "own"


def test_malformed_tool_calls_yield_no_tool_parts_keep_the_body_and_are_counted(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "q")
    bad = w.msg("s", "assistant", "body survives", tool_calls=[openai_call("c", "t", {})])
    w.msg("s", "assistant", "next", tool_calls=[openai_call("c2", "t", {})])
    w.raw_sql("UPDATE messages SET tool_calls = ? WHERE id = ?", ('[{"id": "c", "function": {"name": "t"', bad))
    proj = project(w)
    got = proj.session_rows("s")
    assert parts(got) == [
        ("text", "text", "q"),
        ("text", "text", "body survives"),
        ("tool_call", "tool_use", None),
        ("text", "text", "next"),
    ]
    assert [r["message_index"] for r in got] == [0, 1, 2, 3]
    assert proj.tally.counts[errors.BAD_TOOL_CALLS] == 1
    (sample,) = [s for s in proj.tally.samples if s.error_kind == errors.BAD_TOOL_CALLS]
    assert (sample.session_id, sample.mid) == ("s", bad)


@pytest.mark.parametrize("raw", ["not json", '{"id": "c"}', "[1, 2]", '"a string"', "[NaN]", '[{"id": "c"}, 5]', "["])
def test_parse_tool_calls_rejects_malformed_text(raw):
    assert parse_tool_calls(raw) is None


@pytest.mark.parametrize("raw", [None, "", "null", "[]"])
def test_parse_tool_calls_absent_or_empty(raw):
    assert parse_tool_calls(raw) == []


# --------------------------------------------------------------------------
# §5.4 content (D5)
# --------------------------------------------------------------------------


def test_envelope_content_is_decoded_text_joined_images_dropped(hermes_db):
    w = hermes_db
    w.session("s", "telegram")
    content = [
        {"type": "text", "text": "Grüß dich"},
        {"type": "image_url", "image_url": {"url": "https://cdn.example.com/p.jpg"}},
        {"type": "input_text", "text": "zweite Zeile"},
    ]
    mid = w.msg("s", "user", content)
    proj = project(w)
    (row,) = proj.session_rows("s")
    assert row["content_text"] == "Grüß dich\nzweite Zeile"
    (raw,) = [r for r in rows(proj.messages) if r["id"] == mid]
    assert raw["content"].startswith("\x00json:")  # kept as stored
    assert raw["content_text"] == "Grüß dich\nzweite Zeile"
    assert raw["content_json"] == content


def test_image_only_envelope_still_yields_its_body_part(hermes_db):
    w = hermes_db
    w.session("s", "telegram")
    w.msg("s", "user", [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}])
    w.msg("s", "assistant", {"type": "text", "text": "a dict, not a list"})
    got = project(w).session_rows("s")
    assert parts(got) == [("text", "text", ""), ("text", "text", "a dict, not a list")]


def test_malformed_envelope_keeps_raw_text_keeps_its_part_and_is_counted(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    mid = w.msg("s", "user", "placeholder")
    w.raw_sql('UPDATE messages SET content = char(0) || \'json:[{"type": "text", "te\' WHERE id = ?', (mid,))
    proj = project(w)
    (row,) = proj.session_rows("s")
    assert row["content_text"] == '\x00json:[{"type": "text", "te'
    assert proj.tally.counts[errors.BAD_ENVELOPE] == 1
    (sample,) = [s for s in proj.tally.samples if s.error_kind == errors.BAD_ENVELOPE]
    assert (sample.session_id, sample.mid) == ("s", mid)
    (raw,) = rows(proj.messages)
    assert raw["content_json"] is None


def test_envelope_surrogate_escapes_become_replacement_characters(hermes_db):
    """Hermes json.dumps(ensure_ascii) writes a lone surrogate as a \\ud800 escape."""
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", [{"type": "text", "text": "a\ud800b"}])
    w.msg("s", "assistant", None, tool_calls=[openai_call("c", "t", {"q": "x\udc00y"})])
    proj = project(w)
    user, call = proj.session_rows("s")
    assert user["content_text"] == "a\ufffdb"
    assert call["tool_args"] == {"q": "x\ufffdy"}


@pytest.mark.parametrize(
    "text, want",
    [
        ("see data:image/png;base64,iVBORw0KGgoAAAANSUhEUg== ok", f"see data:image/png;base64,{STRIPPED} ok"),
        ("data:;base64,AAAA", f"data:application/octet-stream;base64,{STRIPPED}"),
        ('{"url": "data:audio/wav;base64,UklGRg+/="}', f'{{"url": "data:audio/wav;base64,{STRIPPED}"}}'),
        (
            "two data:a/b;base64,AA and data:c/d;base64,BB",
            f"two data:a/b;base64,{STRIPPED} and data:c/d;base64,{STRIPPED}",
        ),
        ("data:text/plain,not base64", "data:text/plain,not base64"),
    ],
)
def test_data_uri_payloads_are_stripped(hermes_db, text, want):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", text)
    w.msg("s", "tool", text, tool_call_id="c")
    got = project(w).session_rows("s")
    assert [r["content_text"] for r in got] == [want, want]


def test_nul_characters_are_kept_never_truncated(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    mid = w.msg("s", "user", "before\x00after")
    w.msg("s", "tool", "\x00leading nul", tool_call_id="c")
    proj = project(w)
    assert [r["content_text"] for r in proj.session_rows("s")] == ["before\x00after", "\x00leading nul"]
    assert [r["content"] for r in rows(proj.messages) if r["id"] == mid] == ["before\x00after"]


def test_ten_megabyte_cell_is_kept_whole_and_counted_as_a_warning(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    mid = w.msg("s", "tool", "x", tool_call_id="c")
    w.msg("s", "user", "after")
    big = ("0123456789abcdef" * (10 * 1024 * 1024 // 16 - 1)) + "END"
    w.raw_sql("UPDATE messages SET content = ? WHERE id = ?", (big, mid))
    proj = project(w)
    got = proj.session_rows("s")
    assert got[0]["content_text"] == big and len(got[0]["content_text"]) > 10_000_000
    assert got[1]["content_text"] == "after"
    tally = proj.tally
    assert tally.counts[errors.OVERSIZED_CELL] == 1 and tally.warnings == 1 and tally.errors == 0
    (sample,) = tally.samples
    assert (sample.error_kind, sample.session_id, sample.mid) == ("oversized_cell", "s", mid)


def test_ten_thousand_tool_calls_in_one_message(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    calls = [openai_call(f"c{i}", "terminal", {"i": i}) for i in range(10_000)]
    mid = w.msg("s", "assistant", "done", tool_calls=calls, token_count=5, finish_reason="stop")
    got = project(w).session_rows("s")
    assert len(got) == 10_001
    assert [r["message_index"] for r in got] == list(range(10_001))
    assert got[9_999]["message_id"] == f"hermes-s-{mid}-9999" and got[9_999]["tool_args"] == {"i": 9_999}
    assert got[-1]["content_text"] == "done" and got[-1]["attributes"]["usage"] == {"total_tokens": 5}
    assert sum(1 for r in got if "usage" in r["attributes"]) == 1


def test_decode_content_handles_non_strings():
    assert decode_content(None) == (None, None)
    assert decode_content(b"bytes") == (None, None)
    assert decode_content("plain") == ("plain", None)


# --------------------------------------------------------------------------
# §5.2 reasoning (D6)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reasoning, reasoning_content, want",
    [
        ("primary", "fallback", "primary"),
        (None, "fallback", "fallback"),
        ("", "fallback", "fallback"),
        (None, "   \n", None),  # blank fallback: no part
        (None, None, None),
    ],
)
def test_reasoning_content_is_the_fallback_for_empty_reasoning(hermes_db, reasoning, reasoning_content, want):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "assistant", "answer", reasoning=reasoning, reasoning_content=reasoning_content)
    got = project(w).session_rows("s")
    expected = ([("reasoning", "thinking", want)] if want else []) + [("text", "text", "answer")]
    assert parts(got) == expected


# --------------------------------------------------------------------------
# §5.5 attributes, §5.7 cwd and channels (D7), store labels (D14)
# --------------------------------------------------------------------------


def test_session_level_columns_on_every_row(hermes_db):
    w = hermes_db
    w.session("parent", "cli")
    w.session(
        "child",
        "subagent",
        model="claude-x",
        system_prompt="You are Hermes.",
        parent_session_id="parent",
        cwd="/work/repo",
    )
    started = w.now
    w.msg("child", "user", "q")
    w.msg("child", "assistant", "a")
    w.end("child")
    proj = project(w)
    got = proj.session_rows("child")
    store_hash = hashlib.sha256(str(w.path).encode()).hexdigest()[:16]
    for r in got:
        assert (r["gateway_id"], r["schema_version"], r["conversation_source"], r["client_name"]) == (
            "hypaware-local",
            7,
            "hermes",
            "hermes",
        )
        assert r["session_id"] == "hermes-child" and r["parent_thread_id"] == "hermes-parent"
        assert (r["model"], r["system_text"], r["entrypoint"], r["cwd"]) == (
            "claude-x",
            "You are Hermes.",
            "subagent",
            "/work/repo",
        )
        assert r["conversation_started_at"] == epoch_ms(started)
        assert r["attributes"]["client"] == {"name": "hermes"}
        assert r["attributes"]["gateway"] == {
            "source": "backfill",
            "source_path_hash": store_hash,
            "native_id": "child",
        }
        for col in (
            "conversation_id",
            "user_id",
            "tools",
            "head_sha",
            "client_version",
            "user_type",
            "permission_mode",
            "is_sidechain",
            "agent_id",
            "parent_uuid",
            "request_id",
            "prompt_id",
            "provider_type",
            "caller_type",
            "thinking_signature",
            "attachment_type",
            "hook_event",
            "is_error",
            "compact_metadata",
            "raw_frame",
        ):
            assert r[col] is None, col
    assert proj.session_rows("parent") == []


def test_empty_model_and_system_prompt_are_null(hermes_db):
    w = hermes_db
    w.session("s", "cli", model="", system_prompt="")
    w.msg("s", "user", "q")
    (row,) = project(w).session_rows("s")
    assert row["model"] is None and row["system_text"] is None


def test_message_date_is_its_own_day_while_the_partition_is_the_session_day(hermes_db):
    w = hermes_db
    w.at(START_S + 14.9 * 3600)  # 23:54 UTC on 2026-06-01
    w.session("s", "cli")
    w.msg("s", "user", "before")
    w.tick(3600)
    after = w.msg("s", "assistant", "after")
    proj = project(w)
    assert [r["date"] for r in proj.session_rows("s")] == ["2026-06-01", "2026-06-02"]
    assert {r["day"] for r in rows(proj.messages)} == {"2026-06-01"}
    assert [r["day"] for r in rows(proj.sessions)] == ["2026-06-01"]
    assert [r["timestamp"] for r in rows(proj.messages) if r["id"] == after] == [epoch_ms(w.now)]


def test_message_created_at_rounds_half_up(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.at(1780300000.0125)
    w.db.append_message("s", "user", "q")
    (row,) = project(w).session_rows("s")
    assert row["message_created_at"] == 1780300000013


@pytest.mark.parametrize("source", ["matrix", "feishu", "telegram", "api_server", "webhook", "some_future_platform"])
def test_channel_sessions_get_a_channel_cwd_and_real_cwd(hermes_db, source):
    w = hermes_db
    w.session("with_cwd", source)
    w.db.update_session_cwd("with_cwd", "/srv/hermes", git_branch="main", git_repo_root="/srv")
    w.msg("with_cwd", "user", "q")
    w.session("no_cwd", source)
    w.msg("no_cwd", "user", "q")
    proj = project(w, ctx=default_ctx(git=ExplodingGit()))
    channel = f"{USER_HOME}/.hermes/channels/{source}"
    (a,) = proj.session_rows("with_cwd")
    (b,) = proj.session_rows("no_cwd")
    assert a["cwd"] == b["cwd"] == channel
    assert a["attributes"]["hermes"]["real_cwd"] == "/srv/hermes"
    assert "real_cwd" not in b["attributes"]["hermes"]
    assert a["repo_root"] is None and a["git_remote"] is None  # git only for interactive sessions
    assert {r["scope_path"] for r in rows(proj.sessions)} == {channel}


@pytest.mark.parametrize("source", sorted(policy.INTERACTIVE_SOURCES))
def test_interactive_sessions_keep_their_cwd_and_empty_is_null(hermes_db, source):
    w = hermes_db
    w.session("with_cwd", source, cwd="/home/dev/proj")
    w.msg("with_cwd", "user", "q")
    w.session("empty_cwd", source, cwd="")
    w.msg("empty_cwd", "user", "q")
    proj = project(w)
    (a,) = proj.session_rows("with_cwd")
    (b,) = proj.session_rows("empty_cwd")
    assert a["cwd"] == "/home/dev/proj" and b["cwd"] is None
    assert "real_cwd" not in a["attributes"]["hermes"]
    assert a["attributes"]["hermes"]["source"] == source


def test_store_label_scopes_every_id_and_is_an_attribute(hermes_db):
    w = hermes_db
    w.session("p", "cli")
    w.session("c", "subagent", parent_session_id="p")
    mid = w.msg("c", "user", "q")
    w.end("c")
    proj = project_store(w.path, store=Store(str(w.path), label="work"))
    got = proj.session_rows("c", label="work")
    assert [r["message_id"] for r in got] == [f"hermes-work:c-{mid}-0", "hermes-work:c-session_end"]
    assert [r["part_id"] for r in got] == [f"hermes-work:c-{mid}-0#0", "hermes-work:c-session_end#0"]
    assert got[1]["previous_message_id"] == [f"hermes-work:c-{mid}-0"]
    assert all(r["parent_thread_id"] == "hermes-work:p" for r in got)
    assert all(r["attributes"]["hermes"]["store"] == "work" for r in got)
    assert all(r["attributes"]["gateway"]["native_id"] == "c" for r in got)
    assert all("profile" not in r["attributes"]["hermes"] for r in got)
    assert {(r["store_label"], r["profile"]) for r in rows(proj.sessions)} == {("work", None)}


def test_profile_comes_from_discovery_never_from_profile_name(hermes_db):
    w = hermes_db
    w.session("s", "telegram", profile_name="from-hermes-row")
    w.msg("s", "user", "q")
    (default_row,) = project(w).session_rows("s")
    assert "profile" not in default_row["attributes"]["hermes"] and "store" not in default_row["attributes"]["hermes"]
    proj = project_store(w.path, store=Store(str(w.path), label="coder", profile="coder"))
    (row,) = proj.session_rows("s", label="coder")
    assert row["attributes"]["hermes"]["profile"] == "coder"
    (session,) = rows(proj.sessions)
    assert session["profile"] == "coder" and session["profile_name"] == "from-hermes-row"


def test_local_only_sessions_are_marked(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "q")
    w.end("s")
    proj = project(w, policy_classes={"s": policy.LOCAL_ONLY})
    assert all(r["attributes"]["hermes"]["policy"] == "local-only" for r in proj.session_rows("s"))
    assert rows(proj.sessions)[0]["policy_class"] == "local-only"
    full = project(w)
    assert all("policy" not in r["attributes"]["hermes"] for r in full.session_rows("s"))


# --------------------------------------------------------------------------
# §5.6 provider (D8)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url, billing_provider, want",
    [
        ("https://api.openai.com/v1", "openai-api", "openai"),
        ("https://chatgpt.com/backend-api/codex", "openai-codex", "openai"),
        ("https://openrouter.ai/api/v1", "openrouter", "openrouter"),
        ("https://api.anthropic.com", "anthropic", "anthropic"),
        ("https://generativelanguage.googleapis.com/v1beta", "gemini", "google"),
        ("https://inference-api.nousresearch.com/v1", "nous", "nous"),
        ("https://other.nousresearch.com", None, "nous"),
        ("HTTPS://API.Example.COM:8443/v1", "custom", "api.example.com"),  # lowercase, port dropped
        ("http://[2001:db8::1]:8080/v1", "custom", "[2001:db8::1]"),  # IPv6 in brackets
        ("http://localhost:11434/v1", "ollama", "ollama"),  # loopback -> billing_provider
        ("http://127.0.0.1:8000", "custom", "custom"),
        ("http://[::1]:1234/v1", "lmstudio", "lmstudio"),
        ("http://localhost:11434/v1", None, "unknown"),
        ("localhost:11434/v1", "ollama", "ollama"),  # no scheme: not a URL
        ("api.openai.com/v1", None, "unknown"),
        ("", "anthropic", "anthropic"),
        (None, "anthropic", "anthropic"),
        (None, "", "unknown"),
        (None, None, "unknown"),
        ("http:///nohost", "x", "x"),
        ("not a url at all", None, "unknown"),
    ],
)
def test_provider_normalization(base_url, billing_provider, want):
    assert normalize_provider(base_url, billing_provider) == want


@pytest.mark.parametrize(
    "base_url, billing_provider",
    [
        (None, "hermes"),
        ("http://localhost:8080", "hermes"),
        ("http://hermes:8080/v1", None),
        ("http://HERMES/v1", "custom"),
    ],
)
def test_provider_is_never_hermes(base_url, billing_provider):
    assert normalize_provider(base_url, billing_provider) != "hermes"


def test_provider_is_a_session_value_on_every_row(hermes_db):
    w = hermes_db
    w.session("s", "cli", model="hermes-4")
    w.msg("s", "user", "q")
    w.db.update_session_billing_route("s", provider="nous", base_url="https://inference-api.nousresearch.com/v1")
    w.msg("s", "assistant", "a")
    w.end("s")
    assert {r["provider"] for r in project(w).session_rows("s")} == {"nous"}


# --------------------------------------------------------------------------
# §5.8 git (D11)
# --------------------------------------------------------------------------


class FakeGit(GitResolver):
    """Answers git look-ups from dicts and records every call."""

    def __init__(self, toplevels=None, remotes=None):
        super().__init__()
        self.toplevels, self.remotes, self.calls = toplevels or {}, remotes or {}, []

    def _run(self, cwd, args):
        self.calls.append((cwd, args[-1]))
        return (self.toplevels if args[-1] == "--show-toplevel" else self.remotes).get(cwd)


class ExplodingGit(GitResolver):
    def _run(self, cwd, args):
        raise AssertionError(f"no git look-up expected (cwd={cwd!r})")


def test_git_branch_and_repo_root_come_from_hermes_first(hermes_db):
    w = hermes_db
    w.session("recorded", "cli")
    w.db.update_session_cwd("recorded", "/work/repo/sub", git_branch="feat/x", git_repo_root="/work/repo")
    w.msg("recorded", "user", "q")
    w.session("looked_up", "tui")
    w.db.update_session_cwd("looked_up", "/work/other")
    w.msg("looked_up", "user", "q")
    w.session("again", "cli", cwd="/work/other")
    w.msg("again", "user", "q")
    w.session("no_cwd", "cli")
    w.msg("no_cwd", "user", "q")
    git = FakeGit(
        toplevels={"/work/repo/sub": "/WRONG", "/work/other": "/work/other"},
        remotes={
            "/work/repo/sub": "https://user:s3cret@github.com/a/repo.git",
            "/work/other": "git@github.com:a/other.git",
        },
    )
    proj = project(w, ctx=default_ctx(git=git))
    (rec,) = proj.session_rows("recorded")
    assert (rec["git_branch"], rec["repo_root"], rec["git_remote"]) == (
        "feat/x",
        "/work/repo",
        "https://github.com/a/repo.git",
    )
    (look,) = proj.session_rows("looked_up")
    assert (look["git_branch"], look["repo_root"], look["git_remote"]) == (
        None,
        "/work/other",
        "git@github.com:a/other.git",
    )
    (nocwd,) = proj.session_rows("no_cwd")
    assert (nocwd["repo_root"], nocwd["git_remote"]) == (None, None)
    assert ("/work/repo/sub", "--show-toplevel") not in git.calls  # Hermes recorded it
    assert sorted(git.calls) == sorted(set(git.calls)), "git look-ups are cached per (cwd, run)"
    assert all(cwd is not None for cwd, _ in git.calls)


@pytest.mark.parametrize(
    "remote, want",
    [
        ("https://tok@github.com/a/b.git", "https://github.com/a/b.git"),
        ("https://user:pass@github.com/a/b.git", "https://github.com/a/b.git"),
        ("https://github.com/a/b.git", "https://github.com/a/b.git"),
        ("git@host:a/b.git", "git@host:a/b.git"),
        ("  https://x:y@gitlab.example.com:8443/g/p.git\n", "https://gitlab.example.com:8443/g/p.git"),
        ("", None),
        (None, None),
    ],
)
def test_strip_credentials(remote, want):
    assert strip_credentials(remote) == want


# --------------------------------------------------------------------------
# D2 rewinds, compactions, observed; D13-adjacent rewrites
# --------------------------------------------------------------------------


def test_rewound_rows_are_flagged_inactive(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    keep = w.msg("s", "user", "keep")
    w.msg("s", "assistant", "kept answer")
    target = w.msg("s", "user", "take back")
    w.msg("s", "assistant", "undone answer")
    w.db.rewind_to_message("s", target)
    w.msg("s", "user", "new question")
    proj = project(w)
    got = proj.session_rows("s")
    flags = [
        (r["content_text"], r["attributes"]["hermes"].get("active"), r["attributes"]["hermes"].get("compacted"))
        for r in got
    ]
    assert flags == [
        ("keep", None, None),
        ("kept answer", None, None),
        ("take back", False, None),
        ("undone answer", False, None),
        ("new question", None, None),
    ]
    assert [r["message_index"] for r in got] == list(range(5))
    raw = {r["id"]: r for r in rows(proj.messages)}
    assert raw[target]["active"] == 0 and raw[keep]["active"] == 1 and len(raw) == 5  # inactive rows included
    assert rows(proj.sessions)[0]["rewind_count"] == 1


@pytest.mark.parametrize("summary", ["[CONTEXT COMPACTION] earlier turns were summarised", "[CONTEXT SUMMARY]: legacy"])
def test_compaction_archives_rows_and_flags_the_summary(hermes_db, summary):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "old question")
    w.msg("s", "assistant", "old answer")
    w.tick()
    w.db.archive_and_compact(
        "s",
        [
            {"role": "user", "content": summary},
            {"role": "assistant", "content": "old answer"},  # the retained tail, written again
        ],
    )
    w.msg("s", "user", "next")
    got = project(w).session_rows("s")
    assert [
        (
            r["content_text"],
            r["attributes"]["hermes"].get("active"),
            r["attributes"]["hermes"].get("compacted"),
            r["is_compact_summary"],
        )
        for r in got
    ] == [
        ("old question", False, True, None),
        ("old answer", False, True, None),
        (summary, None, None, True),
        ("old answer", None, None, None),
        ("next", None, None, None),
    ]


def test_compact_summary_prefix_must_be_at_the_start(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "quoted: [CONTEXT COMPACTION] not a summary")
    w.msg("s", "user", "[context compaction] lower case")
    w.msg("s", "user", "[CONTEXT SUMMARY] the legacy prefix has a colon")
    assert [r["is_compact_summary"] for r in project(w).session_rows("s")] == [None, None, None]


def test_observed_group_messages_are_user_rows_flagged_observed(hermes_db):
    w = hermes_db
    w.session("s", "telegram")
    w.msg("s", "user", "lol", observed=True)
    w.msg("s", "user", "@hermes help")
    got = project(w).session_rows("s")
    assert [(r["role"], r["attributes"]["hermes"].get("observed")) for r in got] == [("user", True), ("user", None)]


def test_replace_messages_renumbers_and_old_ids_are_gone(hermes_db):
    w = hermes_db
    w.session("s", "tui")
    old = [w.msg("s", "user", "draft"), w.msg("s", "assistant", "reply")]
    w.tick()
    w.db.replace_messages("s", [{"role": "user", "content": "edited"}, {"role": "assistant", "content": "reply 2"}])
    got = project(w).session_rows("s")
    assert [r["content_text"] for r in got] == ["edited", "reply 2"]
    assert not {str(m) for m in old} & {r["provider_uuid"] for r in got}
    assert [r["message_index"] for r in got] == [0, 1]


def test_deleted_session_has_no_rows(hermes_db):
    w = hermes_db
    w.session("gone", "cli")
    w.msg("gone", "user", "q")
    w.session("kept", "cli")
    w.msg("kept", "user", "q")
    w.db.delete_session("gone")
    proj = project(w)
    assert {r["session_id"] for r in proj.rows()} == {"hermes-kept"}
    assert [r["id"] for r in rows(proj.sessions)] == ["kept"]


# --------------------------------------------------------------------------
# §5.5 JSON rules
# --------------------------------------------------------------------------


def test_json_columns_are_compact_raw_utf8_with_integral_floats_as_integers(hermes_db):
    w = hermes_db
    w.session("s", "telegram")
    w.db.update_session_cwd("s", "/home/ü/проект")
    w.msg(
        "s", "assistant", None, tool_calls=[openai_call("c", "t", '{"n": 2.0, "f": 0.5, "e": 1e2, "s": "é 中文 🚀"}')]
    )
    w.db.update_token_counts(
        "s", input_tokens=1, api_call_count=1, estimated_cost_usd=3.0, model="m", billing_provider="x"
    )
    w.end("s")
    proj = project(w)
    (args,) = [t for t in text_rows(proj.gateway, "tool_args", "hermes-s") if t]
    assert args == '{"n":2,"f":0.5,"e":100,"s":"é 中文 🚀"}'
    for text in text_rows(proj.gateway, "attributes", "hermes-s"):
        assert "\\u" not in text and ", " not in text and '": ' not in text
        assert '"real_cwd":"/home/ü/проект"' in text
    end_attrs = text_rows(proj.gateway, "attributes", "hermes-s")[-1]
    assert '"estimated_cost_usd":3,' in end_attrs
    assert '"usage_by_model":[{' in end_attrs and '"estimated_cost_usd":3.0' not in end_attrs


def test_json_helpers():
    assert loads('{"a": 1.0, "b": [2.50, -0.0]}') == {"a": 1, "b": [2.5, 0]}
    assert dumps({"a": 1.0, "b": "ü", "c": [2.0]}) == '{"a":1,"b":"ü","c":[2]}'
    for bad in ("NaN", "[Infinity]", "[1e400]"):
        with pytest.raises(ValueError):
            loads(bad)


# --------------------------------------------------------------------------
# §2, §5.1, §9 bad timestamps and insane sessions
# --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, -1.0, 1e20, "yesterday", NOW_S + 3 * DAY_S])
def test_bad_message_timestamp_falls_back_to_conversation_start_and_is_counted(hermes_db, bad):
    w = hermes_db
    w.allow_nulls("messages", "timestamp")
    w.session("s", "cli")
    started = w.now
    w.tick(DAY_S)
    mid = w.msg("s", "user", "bad time")
    good = w.msg("s", "assistant", "good time")
    w.raw_sql("UPDATE messages SET timestamp = ? WHERE id = ?", (bad, mid))
    proj = project(w)
    first, second = proj.session_rows("s")
    assert first["message_created_at"] == first["conversation_started_at"] == epoch_ms(started)
    assert first["date"] == ms_day(epoch_ms(started))
    assert second["message_created_at"] == epoch_ms(w.now)
    assert proj.tally.counts[errors.BAD_TIMESTAMP] == 1
    (sample,) = [s for s in proj.tally.samples if s.error_kind == errors.BAD_TIMESTAMP]
    assert (sample.session_id, sample.mid) == ("s", mid)
    raw = {r["id"]: r for r in rows(proj.messages)}
    assert raw[mid]["timestamp"] is None and raw[good]["timestamp"] == epoch_ms(w.now)


@pytest.mark.parametrize("bad", [None, -5.0, 1e20, "not a time"])
def test_insane_started_at_falls_back_to_the_earliest_sane_message(hermes_db, bad):
    w = hermes_db
    w.allow_nulls("sessions", "started_at")
    w.session("s", "cli")
    w.tick(DAY_S)
    first = w.msg("s", "user", "q")
    first_at = w.now
    w.msg("s", "assistant", "a")
    w.end("s")
    w.raw_sql("UPDATE sessions SET started_at = ? WHERE id = 's'", (bad,))
    proj = project(w)
    got = proj.session_rows("s")
    assert len(got) == 3
    assert {r["conversation_started_at"] for r in got} == {epoch_ms(first_at)}
    assert got[0]["provider_uuid"] == str(first)
    assert proj.tally.counts[errors.BAD_TIMESTAMP] == 1
    (session,) = rows(proj.sessions)
    assert session["started_at"] is None and session["day"] == ms_day(epoch_ms(first_at))


def test_session_with_no_sane_time_at_all_is_reported_not_projected(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    mid = w.msg("s", "user", "q")
    w.session("fine", "cli")
    w.msg("fine", "user", "q")
    w.raw_sql("UPDATE sessions SET started_at = -1 WHERE id = 's'")
    w.raw_sql("UPDATE messages SET timestamp = 1e20 WHERE id = ?", (mid,))
    proj = project(w)
    assert proj.days[None] == ["s"]
    assert proj.session_rows("s") == []
    assert len(proj.session_rows("fine")) == 1
    assert proj.tally.counts[errors.OUT_OF_RANGE_SESSION] == 1
    (sample,) = [s for s in proj.tally.samples if s.error_kind == errors.OUT_OF_RANGE_SESSION]
    assert sample.session_id == "s"


def test_bad_ended_at_keeps_the_end_row_at_the_start_and_is_counted(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    started = w.now
    w.msg("s", "user", "q")
    w.end("s")
    w.raw_sql("UPDATE sessions SET ended_at = 'never' WHERE id = 's'")
    proj = project(w)
    end = proj.session_rows("s")[-1]
    assert end["part_type"] == "status" and end["message_created_at"] == epoch_ms(started)
    assert proj.tally.counts[errors.BAD_TIMESTAMP] == 1


# --------------------------------------------------------------------------
# §9: one bad cell never sinks anything else
# --------------------------------------------------------------------------


def test_hostile_cells_are_isolated_counted_and_never_stop_other_rows(hermes_db):
    w = hermes_db
    w.allow_nulls("messages", "timestamp")

    def conversation(sid, source="cli"):
        w.session(sid, source)
        ids = [
            w.msg(sid, "user", f"{sid} q"),
            w.msg(sid, "assistant", f"{sid} a", tool_calls=[openai_call(f"{sid}-c", "terminal", {"x": 1})]),
            w.msg(sid, "tool", f"{sid} out", tool_call_id=f"{sid}-c"),
            w.msg(sid, "assistant", f"{sid} done"),
        ]
        w.end(sid)
        return ids

    conversation("clean")
    hostile = {sid: conversation(sid) for sid in ("h1", "h2", "h3", "h4", "h5", "h6")}
    before = project(w)
    clean_rows = before.session_rows("clean")
    assert before.tally.counts == {}

    h = hostile
    w.raw_sql("UPDATE messages SET tool_calls = '[{' WHERE id = ?", (h["h1"][1],))
    w.raw_sql("UPDATE messages SET timestamp = NULL WHERE id = ?", (h["h2"][0],))
    w.raw_sql("UPDATE messages SET content = CAST(x'ff00fe' AS TEXT) WHERE id = ?", (h["h3"][2],))
    w.raw_sql("UPDATE messages SET content = CAST(x'eda080' AS TEXT) WHERE id = ?", (h["h4"][0],))
    w.raw_sql("UPDATE messages SET content = char(0) || 'json:{' WHERE id = ?", (h["h5"][3],))
    w.raw_sql("UPDATE messages SET timestamp = 'soon' WHERE id = ?", (h["h6"][3],))
    after = project(w)

    assert after.session_rows("clean") == clean_rows
    for sid in hostile:
        got = after.session_rows(sid)
        want = 5 if sid == "h1" else 6  # 4 messages (one with 2 parts) + end row; h1 lost its tool_call part
        assert len(got) == want, sid
        assert [r["message_index"] for r in got] == list(range(want))
    counts = after.tally.counts
    assert counts[errors.BAD_TOOL_CALLS] == 1 and counts[errors.BAD_TIMESTAMP] == 2
    assert counts[errors.BAD_TEXT] == 2 and counts[errors.BAD_ENVELOPE] == 1
    where = {(s.error_kind, s.session_id, s.mid) for s in after.tally.samples}
    assert where == {
        ("bad_tool_calls", "h1", h["h1"][1]),
        ("bad_timestamp", "h2", h["h2"][0]),
        ("bad_text", "h3", h["h3"][2]),
        ("bad_text", "h4", h["h4"][0]),
        ("bad_envelope", "h5", h["h5"][3]),
        ("bad_timestamp", "h6", h["h6"][3]),
    }
    h3_result = after.session_rows("h3")[3]
    assert h3_result["part_type"] == "tool_result" and "\ufffd" in h3_result["content_text"]


def test_hermes_messages_rows_keep_every_column_typed(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    mid = w.msg(
        "s",
        "assistant",
        "a",
        token_count=3,
        finish_reason="stop",
        reasoning="r",
        tool_calls=[openai_call("c", "t", {})],
        platform_message_id="pm-1",
        effect_disposition="applied",
    )
    proj = project(w)
    (raw,) = rows(proj.messages)
    assert (raw["id"], raw["session_id"], raw["role"], raw["content"], raw["token_count"]) == (
        mid,
        "s",
        "assistant",
        "a",
        3,
    )
    assert json.loads(raw["tool_calls"])[0]["id"] == "c"
    assert (raw["platform_message_id"], raw["effect_disposition"], raw["reasoning"]) == ("pm-1", "applied", "r")
    assert (raw["store"], raw["store_label"], raw["profile"], raw["source_deleted"]) == (str(w.path), "", None, False)
    assert raw["content_text"] == "a" and raw["content_json"] is None
    assert proj.messages.schema.field("timestamp").type.unit == "ms"


@pytest.mark.parametrize(
    "column, role",
    [
        ("content", "user"),
        ("content", "assistant"),
        ("content", "tool"),
        ("reasoning", "assistant"),
        ("reasoning_content", "assistant"),
    ],
)
def test_invalid_utf8_cell_still_yields_its_part_with_replacement_characters(hermes_db, column, role):
    """SPEC §1 "Text", §9: a cell that is not valid UTF-8 is decoded with U+FFFD, counted,
    and its row is still written (the reader hands it over as a ``str`` subclass)."""
    w = hermes_db
    w.session("s", "cli")
    mid = w.msg(
        "s",
        role,
        "placeholder",
        tool_call_id="c" if role == "tool" else None,
        reasoning_content="placeholder" if column == "reasoning_content" else None,
    )
    w.raw_sql(f"UPDATE messages SET {column} = CAST(x'4f4bff21' AS TEXT) WHERE id = ?", (mid,))
    proj = project(w)
    texts = [r["content_text"] for r in proj.session_rows("s")]
    assert "OK\ufffd!" in texts, texts
    (raw,) = rows(proj.messages)
    assert raw[column] == "OK\ufffd!"
    if column == "content":  # hermes_messages.content_text is the decoded content (SPEC §4)
        assert raw["content_text"] == "OK\ufffd!"
    assert proj.tally.counts[errors.BAD_TEXT] == 1
    assert [(s.session_id, s.mid, s.column) for s in proj.tally.samples if s.error_kind == "bad_text"] == [
        ("s", mid, column)
    ]


def test_usage_by_model_ties_on_first_seen_are_ordered_by_model_then_route(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.tick()
    for model, provider in (("zeta", "openrouter"), ("alpha", "openrouter"), ("alpha", "anthropic")):
        w.db.update_token_counts("s", input_tokens=1, api_call_count=1, model=model, billing_provider=provider)
    w.end("s")
    (end,) = project(w).session_rows("s")
    models = end["attributes"]["hermes"]["usage_by_model"]
    assert len({u["first_seen"] for u in models}) == 1
    assert [(u["model"], u["billing_provider"]) for u in models] == [
        ("alpha", "anthropic"),
        ("alpha", "openrouter"),
        ("zeta", "openrouter"),
    ]


def test_tool_result_envelope_content_is_decoded(hermes_db):
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "tool", [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}], tool_call_id="c")
    (row,) = project(w).session_rows("s")
    assert (row["part_type"], row["content_text"]) == ("tool_result", "line 1\nline 2")


@pytest.mark.parametrize("depth", [50, 900, 995, 5_000, 100_000])
def test_deeply_nested_json_cells_never_fail_the_projection(hermes_db, depth):
    """Hostile nesting in tool_calls or an envelope is at worst a counted bad cell."""
    w = hermes_db
    w.session("s", "cli")
    user = w.msg("s", "user", "x")
    call = w.msg("s", "assistant", "body", tool_calls=[openai_call("c", "t", {})])
    nested = "[" * depth + "]" * depth
    w.raw_sql("UPDATE messages SET content = char(0) || 'json:' || ? WHERE id = ?", (nested, user))
    w.raw_sql(
        "UPDATE messages SET tool_calls = ? WHERE id = ?",
        ('[{"id": "c", "function": {"name": "t", "arguments": ' + json.dumps(nested) + "}}]", call),
    )
    proj = project(w)
    got = proj.session_rows("s")
    assert [r["part_type"] for r in got] == ["text", "tool_call", "text"]
    assert len(rows(proj.messages)) == 2


@pytest.mark.parametrize(
    "sid", ['api-"quoted"', "back\\slash", "tab\there", "ünï-çødé 中文", "api-0123456789abcdef", "1234"]
)
def test_ids_with_json_special_characters_chain_correctly(hermes_db, sid):
    """API-server sids are any string a client sends: ids and the JSON chain must survive it."""
    w = hermes_db
    w.session(sid, "api_server")
    a = w.msg(sid, "user", "q")
    b = w.msg(sid, "assistant", "a", reasoning="r")
    w.end(sid)
    proj = project_store(w.path, store=Store(str(w.path), label='lab"el'))
    got = proj.session_rows(sid, label='lab"el')
    assert [r["message_id"] for r in got] == [
        f'hermes-lab"el:{sid}-{a}-0',
        f'hermes-lab"el:{sid}-{b}-0',
        f'hermes-lab"el:{sid}-{b}-1',
        f'hermes-lab"el:{sid}-session_end',
    ]
    assert got[0]["previous_message_id"] == []
    for prev, row in zip(got, got[1:]):
        assert row["previous_message_id"] == [prev["message_id"]]
    assert {r["attributes"]["gateway"]["native_id"] for r in got} == {sid}
