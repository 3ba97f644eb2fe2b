"""Stores of Hermes v0.22 (schema 31), case by case: D19-D22 and ``oneshot`` (SPEC §5.7).

Each store is written with raw SQL in v0.22's table layout (``tests/support/schema31.py``):
CI has no v0.22 writer. What Hermes v0.22.2 itself writes is held against its own
readers in ``tests/fidelity/test_hermes_v022.py``.
"""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from hermes_assets.lib.analytics.tools import daily_tools
from hermes_assets.lib.analytics.usage import daily_usage
from hermes_assets.lib.basics import errors, hermes_tables, schemas
from hermes_assets.lib.capture import day_rows
from hermes_assets.lib.plan import capture_plan
from hermes_assets.lib.source import state_db
from hermes_assets.lib.source.state_db import StoreReader
from hermes_assets.lib.source.stores import Store
from tests.support.project import NOW_S, USER_HOME, project_store, rows
from tests.support.schema31 import Schema31Store, prompt_hash

T = NOW_S - 5 * 86400  # day 1 of every store here; the day after is day 2
DAY1, DAY2 = "2026-09-16", "2026-09-17"


@pytest.fixture
def store(tmp_path):
    s = Schema31Store(tmp_path / "state.db")
    yield s
    s.close()


def project(store: Schema31Store):
    store.close()
    return project_store(store.path)


def hermes_flags(row: dict) -> dict:
    """A canonical row's ``attributes.hermes`` without the session-wide keys."""
    return {k: v for k, v in row["attributes"]["hermes"].items() if k not in ("source", "real_cwd")}


# --------------------------------------------------------------------------
# D19: system prompts stored once
# --------------------------------------------------------------------------


def test_a_prompt_stored_by_hash_is_the_sessions_prompt_on_every_row(store):
    store.session("s1", "cli", started_at=T, prompt="You are Hermes.")
    store.message("s1", "user", "hi", timestamp=T + 1)
    store.message("s1", "assistant", "hello", timestamp=T + 2)
    proj = project(store)
    (session,) = rows(proj.sessions)
    assert session["system_prompt"] == "You are Hermes."
    assert session["system_prompt_hash"] == prompt_hash("You are Hermes.")
    assert {r["system_text"] for r in proj.rows()} == {"You are Hermes."}
    assert proj.tally.as_dict() == {}


def test_an_inline_prompt_wins_and_an_empty_one_falls_back_to_the_hash(store):
    """D19: the session's own prompt when non-empty (a store upgraded half-way keeps some
    inline), else its hash's; the same session reads the same before and after."""
    digest = store.prompt("from the table")
    store.session("inline", "cli", started_at=T, system_prompt_hash=digest, system_prompt="inline text")
    store.session("empty", "cli", started_at=T + 1, system_prompt_hash=digest, system_prompt="")
    store.session("none", "cli", started_at=T + 2)
    for sid in ("inline", "empty", "none"):
        store.message(sid, "user", "x", timestamp=T + 5)
    proj = project(store)
    prompts = {r["id"]: r["system_prompt"] for r in rows(proj.sessions)}
    assert prompts == {"inline": "inline text", "empty": "from the table", "none": None}
    texts = {r["session_id"]: r["system_text"] for r in proj.rows()}
    assert texts == {"hermes-inline": "inline text", "hermes-empty": "from the table", "hermes-none": None}


def test_a_hash_with_no_row_is_a_null_prompt_and_a_warning_counted_once(store):
    store.session("s1", "cli", started_at=T, system_prompt_hash="0" * 64)
    store.message("s1", "user", "hi", timestamp=T + 1)
    store.message("s1", "assistant", "hello", timestamp=T + 2)
    proj = project(store)
    assert rows(proj.sessions)[0]["system_prompt"] is None
    assert {r["system_text"] for r in proj.rows()} == {None}
    # one cell: counted in both datasets that carry the prompt, logged (and listed) once
    assert proj.tallies["hermes_sessions"].as_dict() == {errors.SYSTEM_PROMPT_MISSING: 1}
    assert proj.tallies["ai_gateway_messages_hermes"].as_dict() == {errors.SYSTEM_PROMPT_MISSING: 1}
    assert proj.cells == [(errors.SYSTEM_PROMPT_MISSING, "s1", None, "system_prompt_hash")]
    assert errors.SYSTEM_PROMPT_MISSING in errors.WARNING_KINDS and proj.tally.errors == 0


def test_prompts_are_read_once_per_chunk_of_sessions_in_the_day_transaction(store, monkeypatch):
    for i in range(5):
        store.session(f"s{i}", "cli", started_at=T + i, prompt=f"prompt {i % 2}")
        store.message(f"s{i}", "user", "x", timestamp=T + 10)
    store.close()
    monkeypatch.setattr(state_db, "SESSION_CHUNK", 2)
    with StoreReader(Store(str(store.path)), now_s=NOW_S) as reader:
        index = reader.session_index()
        bundles = reader.read_day(DAY1, [(sid, index[sid].raw_id) for sid in sorted(index)])
        assert reader.statements["system_prompts_by_hash"] == 3  # 5 sessions in chunks of 2
    assert {b.sid: b.session["system_prompt"] for b in bundles} == {f"s{i}": f"prompt {i % 2}" for i in range(5)}


def test_tool_names_read_as_hermes_shows_them(store):
    """v31 keeps a session's tools[] pin in system_prompts too; legacy rows an inline list."""
    pin = json.dumps([{"type": "function", "function": {"name": "terminal"}}])
    store.session("hashed", "cli", started_at=T, tool_names=store.prompt(pin))
    store.session("inline", "cli", started_at=T + 1, tool_names='["terminal"]')
    proj = project(store)
    assert {r["id"]: r["tool_names"] for r in rows(proj.sessions)} == {"hashed": pin, "inline": '["terminal"]'}


# --------------------------------------------------------------------------
# D20: generations of one logical message
# --------------------------------------------------------------------------


def _in_place_compaction(store: Schema31Store) -> dict[str, int]:
    """What ``archive_and_compact`` leaves: the turn archived (0/1), the carried tail's
    original left 0/0 and re-inserted live after the summary."""
    store.session("s1", "cli", started_at=T)
    ids = {
        "ask": store.message(
            "s1", "user", "fix it", timestamp=T + 1, message_uid="u-ask", display_identity=b"ask", active=0, compacted=1
        ),
        "tail": store.message(
            "s1",
            "assistant",
            "done",
            timestamp=T + 2,
            message_uid="u-tail",
            display_identity=b"tail",
            active=0,
            compacted=0,
        ),
        "undone": store.message(
            "s1", "user", "oops", timestamp=T + 3, message_uid="u-undo", display_identity=b"undo", active=0, compacted=0
        ),
        "summary": store.message(
            "s1",
            "user",
            "[CONTEXT COMPACTION] the story so far",
            timestamp=T + 4,
            message_uid="u-sum",
            display_identity=b"sum",
            _compressed_summary=1,
        ),
    }
    ids["tail copy"] = store.message(
        "s1", "assistant", "done", timestamp=T + 2, message_uid="u-tail", display_identity=b"tail"
    )
    return ids


def test_a_carried_tail_copy_is_a_copy_and_its_original_is_superseded_not_rewound(store):
    ids = _in_place_compaction(store)
    proj = project(store)
    marks = {r["id"]: (r["copy_of"], r["superseded"]) for r in rows(proj.messages)}
    assert marks == {
        ids["ask"]: (None, False),
        ids["tail"]: (None, True),  # 0/0 like an undo, but a later generation is live
        ids["undone"]: (None, False),  # a real rewind
        ids["summary"]: (None, False),
        ids["tail copy"]: (f"s1-{ids['tail']}", False),
    }
    flags = {int(r["provider_uuid"]): hermes_flags(r) for r in proj.rows() if r["provider_uuid"]}
    assert flags[ids["tail"]] == {"message_uid": "u-tail", "active": False, "superseded": True}
    assert flags[ids["undone"]] == {"message_uid": "u-undo", "active": False}
    assert flags[ids["tail copy"]] == {"message_uid": "u-tail", "copy_of": f"s1-{ids['tail']}"}


def test_compressed_summary_flag_marks_a_compaction_summary(store):
    store.session("s1", "cli", started_at=T)
    flagged = store.message(
        "s1", "user", "a summary Hermes wrote in its own words", timestamp=T + 1, _compressed_summary=1
    )
    plain = store.message("s1", "user", "a question", timestamp=T + 2, _compressed_summary=0)
    proj = project(store)
    summary = {int(r["provider_uuid"]): r["is_compact_summary"] for r in proj.rows() if r["provider_uuid"]}
    assert summary == {flagged: True, plain: None}


def test_a_rotation_childs_hand_off_rows_are_copies_of_its_parents_on_another_day(store, tmp_path):
    store.session("parent", "cli", started_at=T, ended_at=T + 100, end_reason="compression")
    ask = store.message("parent", "user", "build it", timestamp=T + 1, message_uid="u1", display_identity=b"a")
    call = store.message(
        "parent",
        "assistant",
        None,
        timestamp=T + 2,
        message_uid="u2",
        display_identity=b"b",
        tool_calls=json.dumps([{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]),
    )
    result = store.message(
        "parent", "tool", "ok", timestamp=T + 3, message_uid="u3", display_identity=b"c", tool_call_id="c1"
    )
    store.session("child", "cli", started_at=T + 86400, parent_session_id="parent")
    copies = [
        store.message(
            "child",
            "user",
            "[CONTEXT COMPACTION] so far",
            timestamp=T + 86400,
            message_uid="u4",
            display_identity=b"d",
            _compressed_summary=1,
        )
    ]
    copies += [
        store.message(
            "child",
            "assistant",
            None,
            timestamp=T + 2,
            message_uid="u2",
            display_identity=b"b",
            tool_calls=json.dumps(
                [{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]
            ),
        ),
        store.message(
            "child", "tool", "ok", timestamp=T + 3, message_uid="u3", display_identity=b"c", tool_call_id="c1"
        ),
    ]
    store.message("child", "assistant", "next", timestamp=T + 86401, message_uid="u5", display_identity=b"e")
    proj = project(store)
    marks = {(r["session_id"], r["id"]): r["copy_of"] for r in rows(proj.messages)}
    assert marks[("child", copies[1])] == f"parent-{call}" and marks[("child", copies[2])] == f"parent-{result}"
    assert [k for k, v in marks.items() if v] == [("child", copies[1]), ("child", copies[2])]
    assert marks[("parent", ask)] is None
    # the analytics count the call and its result once, on the parent's day
    usage = {day: daily_usage(day, *_day_tables(proj, day)).totals for day in (DAY1, DAY2)}
    assert (usage[DAY1]["tool_calls"], usage[DAY2]["tool_calls"]) == (1, 0)
    assert (usage[DAY1]["messages"], usage[DAY2]["messages"]) == (3, 2)
    tools = {}
    for day in (DAY1, DAY2):
        _, messages, gateway = _day_tables(proj, day)
        tools[day] = daily_tools(day, gateway, messages).totals
    assert (tools[DAY1]["tool_results"], tools[DAY2]["tool_results"]) == (1, 0)


def test_the_parents_rows_are_read_once_per_day_not_per_row(store, tmp_path):
    store.session("parent", "cli", started_at=T)
    for i in range(3):
        store.message("parent", "user", f"m{i}", timestamp=T + i, message_uid=f"u{i}", display_identity=b"%d" % i)
    for k in range(3):
        store.session(f"child{k}", "cli", started_at=T + 86400 + k, parent_session_id="parent")
        for i in range(3):
            store.message(
                f"child{k}", "user", f"m{i}", timestamp=T + i, message_uid=f"u{i}", display_identity=b"%d" % i
            )
    store.close()
    plan = capture_plan.plan_capture([Store(str(store.path))], [DAY1, DAY2], user_home=USER_HOME, now_s=NOW_S)
    from tests.support.project import TEST_REDACTION, default_ctx

    day2 = day_rows.project_day(plan, DAY2, default_ctx(), redaction=TEST_REDACTION)
    assert day2.statements["ancestor_identities"] == 1
    day1 = day_rows.project_day(plan, DAY1, default_ctx(), redaction=TEST_REDACTION)
    assert day1.statements["ancestor_identities"] == 0  # the parent's own day has no ancestor
    copied = day2.table("hermes_messages").column("copy_of").to_pylist()
    assert len(copied) == 9 and all(c and c.startswith("parent-") for c in copied)


def test_identities_match_within_a_session_and_with_its_parent_not_between_siblings(store):
    store.session("parent", "cli", started_at=T)
    store.session("a", "cli", started_at=T + 1, parent_session_id="parent")
    store.session("b", "cli", started_at=T + 2, parent_session_id="parent")
    first = store.message("a", "user", "same", timestamp=T + 5, display_identity=b"x", message_uid="ua")
    second = store.message("b", "user", "same", timestamp=T + 5, display_identity=b"x", message_uid="ub")
    again = store.message("a", "user", "same", timestamp=T + 5, display_identity=b"x", message_uid="uc")
    marks = {r["id"]: r["copy_of"] for r in rows(project(store).messages)}
    assert marks == {first: None, second: None, again: f"a-{first}"}


def test_rows_without_an_identity_group_by_hermes_display_key(store):
    """An upgraded 0.19 store's old rows carry no uid and no identity: Hermes's display key
    (role, content, timestamp, tool_call_id, tool_calls, tool_name) groups them."""
    store.session("s1", "cli", started_at=T)
    old = store.message("s1", "assistant", "done", timestamp=T + 2, active=0, compacted=1)
    other_time = store.message("s1", "assistant", "done", timestamp=T + 3, active=0, compacted=1)
    copy = store.message("s1", "assistant", "done", timestamp=T + 2)
    new_with_identity = store.message(
        "s1", "assistant", "done", timestamp=T + 2, display_identity=b"k", message_uid="u"
    )
    marks = {r["id"]: (r["copy_of"], r["superseded"]) for r in rows(project(store).messages)}
    assert marks == {
        old: (None, True),
        other_time: (None, False),
        copy: (f"s1-{old}", False),
        new_with_identity: (f"s1-{old}", False),
    }


def test_grouping_is_transitive(store):
    store.session("s1", "cli", started_at=T)
    a = store.message("s1", "user", "one", timestamp=T + 1, message_uid="u1", display_identity=b"i1")
    b = store.message("s1", "user", "one", timestamp=T + 1, message_uid="u1", display_identity=b"i2")
    c = store.message("s1", "user", "one", timestamp=T + 1, message_uid="u3", display_identity=b"i2")
    marks = {r["id"]: r["copy_of"] for r in rows(project(store).messages)}
    assert marks == {a: None, b: f"s1-{a}", c: f"s1-{a}"}


def test_a_schema_22_store_groups_nothing(fixture_copy):
    """hermes-agent 0.19 stores read as before: ``copy_of``/``superseded`` NULL, even where
    the in-place compaction left the same message twice."""
    proj = project_store(fixture_copy("small"))
    assert set(proj.messages.column("copy_of").to_pylist()) == {None}
    assert set(proj.messages.column("superseded").to_pylist()) == {None}


def _day_tables(proj, day: str) -> tuple[pa.Table, pa.Table, pa.Table]:
    def of(table: pa.Table, column: str) -> pa.Table:
        return table.filter(pa.compute.equal(table.column(column), day))

    return of(proj.sessions, "day"), of(proj.messages, "day"), of(proj.gateway, "date")


# --------------------------------------------------------------------------
# D21: display kinds
# --------------------------------------------------------------------------


def test_display_kinds_and_model_only_rows_are_carried(store):
    store.session("s1", "cli", started_at=T)
    hidden = store.message(
        "s1",
        "user",
        "[scaffold: keep going]",
        timestamp=T + 1,
        display_kind="hidden",
        display_metadata=json.dumps({"model_only": True}),
        message_uid="u1",
    )
    reacted = store.message(
        "s1",
        "assistant",
        "done",
        timestamp=T + 2,
        display_metadata=json.dumps({"reactions": [{"emoji": "👍", "author": "user", "at": T + 3}]}),
        message_uid="u2",
    )
    skill = store.message(
        "s1",
        "user",
        "/plan the work",
        timestamp=T + 4,
        display_kind="skill_invocation",
        display_metadata=json.dumps({"command": "/plan"}),
        display_order=9,
        message_uid="u3",
    )
    proj = project(store)
    raw = {r["id"]: r for r in rows(proj.messages)}
    assert raw[hidden]["display_kind"] == "hidden" and raw[hidden]["display_metadata"] == {"model_only": True}
    assert raw[reacted]["display_metadata"]["reactions"][0]["emoji"] == "👍"
    assert (raw[skill]["display_kind"], raw[skill]["display_order"]) == ("skill_invocation", 9)
    flags = {int(r["provider_uuid"]): (r["role"], hermes_flags(r)) for r in proj.rows() if r["provider_uuid"]}
    assert flags[hidden] == ("user", {"message_uid": "u1", "display_kind": "hidden", "model_only": True})
    assert flags[reacted] == ("assistant", {"message_uid": "u2"})
    assert flags[skill] == ("user", {"message_uid": "u3", "display_kind": "skill_invocation"})


def test_a_json_column_that_is_not_json_is_null_and_counted(store):
    store.session("s1", "cli", started_at=T)
    bad = store.message("s1", "user", "x", timestamp=T + 1, display_metadata="{not json", tool_call_uids="NaN")
    proj = project(store)
    (row,) = rows(proj.messages)
    assert (row["display_metadata"], row["tool_call_uids"]) == (None, None)
    assert proj.tallies["hermes_messages"].as_dict() == {errors.BAD_VALUE: 2}
    assert {(c[0], c[2], c[3]) for c in proj.cells} == {
        (errors.BAD_VALUE, bad, "display_metadata"),
        (errors.BAD_VALUE, bad, "tool_call_uids"),
    }


# --------------------------------------------------------------------------
# D22: every column, even the next ones
# --------------------------------------------------------------------------

SESSION_VALUES = {
    "created_source": "oneshot",
    "git_metadata_generation": 3,
    "title_source": "auto",
    "last_activity_at": T + 50.5,
    "last_activity_description": "ran tests",
    "last_activity_provenance": "tool",
    "compression_ineffective_count": 1,
    "compression_recovery_deadline": T + 99.25,
    "compression_overload_streak": 2,
    "transport_profile": "fast",
    "auto_archived": 1,
    "pinned": 1,
    "hidden": 0,
    "last_read_at": 0.0,
}
MESSAGE_VALUES = {
    "_compressed_summary": 0,
    "display_kind": "notification",
    "display_metadata": '{"a": 1}',
    "display_identity": b"\x00\xffid",
    "display_order": 7,
    "message_uid": "abc",
    "absorbed_message_uids": '["x"]',
    "tool_call_uids": '{"c1": "y"}',
    "tool_call_uid": "z",
}


def test_every_schema_31_column_is_carried_with_its_type(store):
    store.session("s1", "cli", started_at=T, **SESSION_VALUES)
    store.message("s1", "user", "x", timestamp=T + 1, **MESSAGE_VALUES)
    proj = project(store)
    (session,) = rows(proj.sessions)
    assert {k: session[k] for k in SESSION_VALUES} == SESSION_VALUES
    (msg,) = rows(proj.messages)
    json_columns = hermes_tables.JSON_TEXT_COLUMNS
    assert {k: msg[k] for k in MESSAGE_VALUES} == {
        k: json.loads(v) if k in json_columns else v for k, v in MESSAGE_VALUES.items()
    }
    assert proj.sessions.schema.field("last_read_at").type == pa.float64()  # 0 is a flag, not an instant
    assert proj.messages.schema.field("display_identity").type == pa.binary()
    assert all(proj.messages.schema.field(c).type == schemas.JSON for c in json_columns)
    assert (session["extra_columns"], msg["extra_columns"]) == (None, None)
    assert set(proj.sessions.column_names) >= hermes_tables.V23_SESSION_COLUMNS
    assert set(proj.messages.column_names) >= hermes_tables.V23_MESSAGE_COLUMNS


def test_columns_of_a_newer_hermes_go_to_extra_columns_with_one_warning_per_store(tmp_path):
    store = Schema31Store(
        tmp_path / "state.db",
        extra_session_columns={"mood": "TEXT", "score": "REAL"},
        extra_message_columns={"future_blob": "BLOB"},
    )
    store.session("s1", "cli", started_at=T, mood="calm", score=2.0)
    store.session("s2", "cli", started_at=T + 86400)
    store.message("s1", "user", "x", timestamp=T + 1, future_blob=b"\x00\xff")
    store.message("s2", "user", "y", timestamp=T + 86401)
    store.close()
    with capture_logs() as logs:
        plan = capture_plan.plan_capture([Store(str(store.path))], [DAY1, DAY2], user_home=USER_HOME, now_s=NOW_S)
        proj = project_store(store.path)
    assert plan.unknown_columns == {str(store.path): {"sessions": ["mood", "score"], "messages": ["future_blob"]}}
    extras = {r["id"]: r["extra_columns"] for r in rows(proj.sessions)}
    assert extras == {"s1": {"mood": "calm", "score": 2}, "s2": {"mood": None, "score": None}}
    blobs = [r["extra_columns"] for r in rows(proj.messages)]
    assert blobs == [{"future_blob": base64.b64encode(b"\x00\xff").decode()}, {"future_blob": None}]
    logged = [e for e in logs if e.get("error_kind") == errors.UNKNOWN_COLUMNS]
    # one warning per store and plan (here: this plan, and project_store's two), whatever the days
    assert len(logged) == 3 and {e["event"] for e in logged} == {"hermes.store.unknown_columns"}
    assert logged[0]["sessions_columns"] == ["mood", "score"] and logged[0]["messages_columns"] == ["future_blob"]


# --------------------------------------------------------------------------
# SPEC §5.7: oneshot is interactive
# --------------------------------------------------------------------------


def test_oneshot_sessions_keep_their_cwd(store):
    store.session("z1", "oneshot", started_at=T, cwd="/home/hermes-user/proj", created_source="oneshot")
    store.message("z1", "user", "what is here?", timestamp=T + 1)
    proj = project(store)
    (session,) = rows(proj.sessions)
    assert (session["scope_path"], session["created_source"]) == ("/home/hermes-user/proj", "oneshot")
    (row,) = proj.rows()
    assert row["cwd"] == "/home/hermes-user/proj" and "real_cwd" not in row["attributes"]["hermes"]
    assert row["entrypoint"] == "oneshot"
