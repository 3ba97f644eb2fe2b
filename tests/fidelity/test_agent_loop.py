"""Our three datasets against Hermes's own reader, on a store the real agent loop wrote.

``tests/fixtures/agent_loop/state.db`` was written by the ``hermes`` CLI of
hermes-agent 0.19.0 running against a scripted model (see its README). Every
expected value here comes from Hermes: ``SessionDB.get_messages(...,
include_inactive=True)``, ``SessionDB.get_session`` and
``ContextCompressor._is_context_summary_content``, each on its own copy of the
store; the SPEC (§5.2, §5.3) only says how a Hermes message becomes parts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agent.context_compressor import _MERGED_SUMMARY_DELIMITER, ContextCompressor
from hermes_state import SessionDB

from hermes_assets.lib.basics import hermes_tables
from tests.support.project import project_store, rows
from tests.support.skips import unavailable

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "agent_loop" / "state.db"
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "pause_turn": "pause"}
END_USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
END_HERMES = ("end_reason", "estimated_cost_usd", "actual_cost_usd", "api_call_count")


def _copy(tmp_path_factory, name: str) -> Path:
    if not FIXTURE.is_file():
        unavailable(f"{FIXTURE} is missing (tests/fixtures/agent_loop/make_fixture.py writes it)")
    dest = tmp_path_factory.mktemp(name) / "state.db"
    shutil.copyfile(FIXTURE, dest)  # never open the fixture in place
    return dest


@pytest.fixture(scope="module")
def hermes(tmp_path_factory):
    """Hermes's view of the store: {sid: (get_session, get_messages(include_inactive=True))}."""
    db = SessionDB(db_path=_copy(tmp_path_factory, "hermes"))
    try:
        sessions = db.search_sessions(limit=10_000)
        yield {s["id"]: (db.get_session(s["id"]), db.get_messages(s["id"], include_inactive=True)) for s in sessions}
    finally:
        db.close()


@pytest.fixture(scope="module")
def ours(tmp_path_factory, hermes):
    # "now" just after the store's last write, so every real time is sane (SPEC §5.1)
    last = max(max(s["started_at"], s["ended_at"] or 0, *(m["timestamp"] for m in msgs)) for s, msgs in hermes.values())
    return project_store(_copy(tmp_path_factory, "ours"), now_s=last + 60)


def ms(seconds: float | None) -> int | None:
    return None if seconds is None else int((seconds * 1000 + 0.5) // 1)


def text_of(content) -> str | None:
    """Hermes's decoded content as text: a string, or the text parts of a multimodal list (SPEC §5.4)."""
    if isinstance(content, str) or content is None:
        return content
    items = content if isinstance(content, list) else [content]
    return "\n".join(
        i if isinstance(i, str) else i["text"]
        for i in items
        if isinstance(i, str) or (isinstance(i, dict) and isinstance(i.get("text"), str))
    )


def expected_parts(msg: dict, call_names: dict) -> list[dict]:
    """One Hermes message (as ``get_messages`` returns it) -> its canonical parts, SPEC §5.2/§5.3."""
    parts = []
    reasoning = msg.get("reasoning")
    if not (isinstance(reasoning, str) and reasoning):
        fallback = msg.get("reasoning_content")
        reasoning = fallback if isinstance(fallback, str) and fallback.strip() else None
    if reasoning:
        parts.append({"part_type": "reasoning", "content_text": reasoning})
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        name = fn.get("name", call.get("name"))
        args = fn.get("arguments", call.get("arguments"))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        call_id = call.get("id") or call.get("call_id")
        call_names[call_id] = name
        parts.append(
            {
                "part_type": "tool_call",
                "content_text": None,
                "tool_name": name,
                "tool_call_id": call_id,
                "tool_args": args,
            }
        )
    text = text_of(msg["content"])
    if msg["role"] == "tool":
        call_id = msg["tool_call_id"]
        parts.append(
            {
                "part_type": "tool_result",
                "content_text": text or "",
                "tool_call_id": call_id,
                "tool_result_for": call_id,
                "tool_name": call_names.get(call_id) or msg["tool_name"],
                "status": {"tool_status": "success"},
            }
        )
    elif text:
        parts.append({"part_type": "text", "content_text": text})
    finish = msg.get("finish_reason") if msg["role"] == "assistant" else None
    summary = True if ContextCompressor._is_context_summary_content(msg["content"]) else None
    for k, part in enumerate(parts):
        part.setdefault("tool_name", None)
        part.setdefault("tool_call_id", None)
        part.setdefault("tool_args", None)
        part.setdefault("tool_result_for", None)
        if "status" not in part:
            part["status"] = {"finish_reason": FINISH.get(finish, finish)} if finish and k == len(parts) - 1 else None
        part.update(
            provider_uuid=str(msg["id"]),
            role=msg["role"],
            is_compact_summary=summary,
            active=False if msg["active"] == 0 else None,
            compacted=True if msg["compacted"] else None,
        )
    return parts


PART_KEYS = (
    "provider_uuid",
    "role",
    "part_type",
    "content_text",
    "tool_name",
    "tool_call_id",
    "tool_args",
    "tool_result_for",
    "status",
    "is_compact_summary",
    "active",
    "compacted",
)


def our_part(row: dict) -> dict:
    flags = row["attributes"]["hermes"]
    return {
        **{k: row.get(k) for k in PART_KEYS[:-2]},
        "active": flags.get("active"),
        "compacted": flags.get("compacted"),
    }


def by_session(table) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows(table):
        out.setdefault(row["session_id"], []).append(row)
    return out


# --------------------------------------------------------------------------
# the fixture holds what it should (counted through Hermes's reader)
# --------------------------------------------------------------------------


def test_fixture_holds_every_agent_loop_case(hermes):
    sessions = [s for s, _ in hermes.values()]
    messages = [m for _, msgs in hermes.values() for m in msgs]
    summaries = [m for m in messages if ContextCompressor._is_context_summary_content(m["content"])]
    assert len(sessions) >= 8 and len(messages) >= 60
    assert any(s["source"] == "subagent" and s["parent_session_id"] for s in sessions)
    assert any(s["end_reason"] == "compression" for s in sessions)  # rotation
    assert any(len(m.get("tool_calls") or []) >= 2 for m in messages)  # parallel calls
    assert any(m["active"] == 0 and not m["compacted"] for m in messages)  # /undo
    assert sum(1 for m in summaries if _MERGED_SUMMARY_DELIMITER in text_of(m["content"])) >= 2  # in place, merged
    assert any(not text_of(m["content"]).startswith("[PRIOR CONTEXT") for m in summaries)  # rotation, standalone


# --------------------------------------------------------------------------
# hermes_messages and hermes_sessions: the rows Hermes reads, column by column
# --------------------------------------------------------------------------


def test_hermes_messages_equal_hermes_reader(hermes, ours):
    got = {(r["session_id"], r["id"]): r for r in rows(ours.messages)}
    for sid, (_, msgs) in hermes.items():
        for msg in msgs:
            row = got.pop((sid, msg["id"]))
            for name, _, _ in hermes_tables.MESSAGE_COLUMNS:
                want = msg.get(name)  # a schema-31 column 0.19 lacks reads as NULL (D22)
                if name == "timestamp":
                    want = ms(want)
                elif name == "tool_calls":
                    assert (json.loads(row[name]) if row[name] else []) == (want or []), (sid, msg["id"], name)
                    continue
                elif name == "content" and not isinstance(want, str):
                    assert row["content_json"] == want and row["content_text"] == text_of(want), (sid, msg["id"])
                    continue
                assert row[name] == want, (sid, msg["id"], name, row[name], want)
            assert row["content_text"] == text_of(msg["content"]) and not row["source_deleted"], (sid, msg["id"])
            # a schema-22 store: nothing is grouped (D20) and no column is unknown (D22)
            assert (row["copy_of"], row["superseded"], row["extra_columns"]) == (None, None, None), (sid, msg["id"])
    assert not got, f"rows Hermes does not read: {sorted(got)}"


def test_hermes_sessions_equal_hermes_reader(hermes, ours):
    got = {r["id"]: r for r in rows(ours.sessions)}
    assert set(got) == set(hermes)
    for sid, (session, _) in hermes.items():
        for name, _, _ in hermes_tables.SESSION_COLUMNS:
            want = ms(session[name]) if name in ("started_at", "ended_at") else session.get(name)
            assert got[sid][name] == want, (sid, name, got[sid][name], want)


# --------------------------------------------------------------------------
# ai_gateway_messages_hermes: every part of every message, and the end rows
# --------------------------------------------------------------------------


def test_canonical_parts_equal_hermes_messages(hermes, ours):
    got = by_session(ours.gateway)
    for sid, (_, msgs) in hermes.items():
        call_names: dict = {}
        want = [part for msg in msgs for part in expected_parts(msg, call_names)]
        session_rows = got.pop("hermes-" + sid, [])
        assert [our_part(r) for r in session_rows if r["part_type"] != "status"] == want, sid
        assert [r["message_index"] for r in session_rows] == list(range(len(session_rows))), sid
    assert not got, f"sessions Hermes does not read: {sorted(got)}"


def test_tool_results_are_named_after_their_call(hermes, ours):
    names = {r["tool_call_id"]: r["tool_name"] for r in rows(ours.gateway) if r["part_type"] == "tool_call"}
    results = [r for r in rows(ours.gateway) if r["part_type"] == "tool_result"]
    hermes_results = {(sid, str(m["id"])): m for sid, (_, msgs) in hermes.items() for m in msgs if m["role"] == "tool"}
    assert len(results) == len(hermes_results)
    for r in results:
        msg = hermes_results[(r["session_id"].removeprefix("hermes-"), r["provider_uuid"])]
        assert r["tool_call_id"] == r["tool_result_for"] == msg["tool_call_id"]
        assert r["tool_name"] == names[msg["tool_call_id"]], r["provider_uuid"]
    # an unknown tool's result carries no tool_name in Hermes: it is named after its call
    assert any(m["tool_name"] is None for m in hermes_results.values())


def test_session_end_rows_carry_hermes_totals(hermes, ours):
    got = by_session(ours.gateway)
    for sid, (session, _) in hermes.items():
        ends = [r for r in got.get("hermes-" + sid, []) if r["part_type"] == "status"]
        if not session["ended_at"]:
            assert ends == [], sid
            continue
        (end,) = ends
        assert end is got["hermes-" + sid][-1] and end["message_id"] == f"hermes-{sid}-session_end"
        assert end["message_created_at"] == ms(session["ended_at"])
        assert end["attributes"]["usage"] == {k: session[k] for k in END_USAGE}, sid
        flags = end["attributes"]["hermes"]
        assert flags["session_end"] is True
        assert {k: flags.get(k) for k in END_HERMES} == {k: session[k] for k in END_HERMES}, sid


def test_compaction_summaries_are_what_hermes_detects(hermes, ours):
    """SPEC D2: the flag of every row is Hermes's detector on its message; both merged
    summaries of the in-place compaction are flagged, and nothing else."""
    content = {(sid, str(m["id"])): m["content"] for sid, (_, msgs) in hermes.items() for m in msgs}
    flagged, detected = set(), set()
    for r in rows(ours.gateway):
        if r["part_type"] == "status":
            assert r["is_compact_summary"] is None
            continue
        key = (r["session_id"].removeprefix("hermes-"), r["provider_uuid"])
        hermes_says = ContextCompressor._is_context_summary_content(content[key])
        assert r["is_compact_summary"] is (True if hermes_says else None), key
        if r["is_compact_summary"]:
            flagged.add(key)
        if hermes_says:
            detected.add(key)
    assert flagged == detected
    in_place = {sid for sid, (_, msgs) in hermes.items() if any(m["compacted"] for m in msgs)}
    in_place_summaries = {k for k in flagged if k[0] in in_place}
    assert len(in_place_summaries) == 2, in_place_summaries
    assert all(_MERGED_SUMMARY_DELIMITER in text_of(content[k]) for k in in_place_summaries)


def test_projection_counts_no_cell_errors(ours):
    assert ours.tally.errors == 0 and ours.tally.warnings == 0, ours.tally.as_dict()
