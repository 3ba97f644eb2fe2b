"""Property test: random histories written by the real Hermes writer project to
well-formed, deterministic rows (SPEC §5.2, §6).

Each example drives ``hermes_state.SessionDB`` through a random sequence of the
operations Hermes performs (sessions, messages with tool calls / reasoning /
unicode / envelope content, ends, reopens, token accounting, rewinds,
compactions, transcript replacement, deletes) and checks:

- projecting the store twice gives identical tables (all three datasets);
- ``part_id`` is unique;
- per session, ``message_index`` is 0..n-1 and ``previous_message_id`` chains
  the parts (``[]`` first), the end row (when present) last;
- exactly the messages that have something to show (tool results, content,
  reasoning, tool calls) have rows, and every stored message has its raw row.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hermes_writer import HermesWriter, flat_call, openai_call
from tests.support.project import project_store, rows

SOURCES = ["cli", "tui", "telegram", "discord", "cron", "subagent", "matrix", "api_server"]
ROLES = ["user", "assistant", "assistant", "tool", "system", "session_meta"]
FINISH = [None, "stop", "end_turn", "max_tokens", "tool_calls", "pause_turn"]

text = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=24),
    st.sampled_from(
        [
            "",
            "   ",
            "[CONTEXT COMPACTION] summary",
            "[CONTEXT SUMMARY]: old",
            "héllo 中文 🚀 مرحبا",
            "img data:image/png;base64,iVBORw0KGgo=",
            "nul\x00inside",
            "\x00json:not an envelope",
        ]
    ),
)
# Hermes scrubs lone surrogates from text it stores; envelopes and tool calls keep them as \u escapes
surrogate_text = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=2)
content = st.one_of(
    st.none(),
    text,
    text.map(lambda t: t + "\ud800"),
    st.lists(
        st.one_of(
            st.builds(lambda t: {"type": "text", "text": t}, text | surrogate_text),
            st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
        ),
        max_size=3,
    ),
)
args = st.one_of(
    st.dictionaries(
        st.sampled_from(["cmd", "path", "n", "ü"]),
        st.one_of(text, st.integers(), st.floats(allow_nan=False, allow_infinity=False)),
        max_size=3,
    ),
    text,
    st.none(),
)
call_id = st.one_of(st.none(), st.sampled_from(["c1", "c2", "c3", "call_x"]))
tool_call = st.one_of(
    st.builds(
        lambda i, n, a: openai_call(i, n, a if a is not None else {}),
        call_id,
        st.sampled_from(["terminal", "read_file", "ü_tool"]),
        args,
    ),
    st.builds(lambda i, n, a: flat_call(n, a, i), call_id, st.sampled_from(["search_files", "patch"]), args),
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(ROLES),
        "content": content,
        "tool_calls": st.lists(tool_call, max_size=3),
        "tool_call_id": call_id,
        "tool_name": st.one_of(st.none(), st.sampled_from(["terminal", "web_search"])),
        "reasoning": st.one_of(st.none(), text),
        "reasoning_content": st.one_of(st.none(), text),
        "finish_reason": st.sampled_from(FINISH),
        "token_count": st.one_of(st.none(), st.integers(0, 10**6)),
        "observed": st.booleans(),
    }
)
target = st.integers(0, 1000)
new_session = st.tuples(st.just("session"), st.sampled_from(SOURCES), st.booleans())
add_message = st.tuples(st.just("msg"), target, message)
other_operations = [
    new_session,
    st.tuples(st.just("end"), target),
    st.tuples(st.just("reopen"), target),
    st.tuples(st.just("tokens"), target, st.integers(0, 5000), st.sampled_from(["m1", "m2"])),
    st.tuples(st.just("rewind"), target, target),
    st.tuples(st.just("compact"), target, text),
    st.tuples(st.just("replace"), target, st.lists(message, max_size=3)),
    st.tuples(st.just("delete"), target),
    st.tuples(st.just("tick"), st.floats(0, 20_000)),
]
# messages are most of what Hermes writes: half of the operations append one
operation = st.integers(0, 2 * len(other_operations) - 1).flatmap(
    lambda i: other_operations[i] if i < len(other_operations) else add_message
)


def _append(w: HermesWriter, sid: str, m: dict) -> None:
    w.msg(
        sid,
        m["role"],
        m["content"],
        tool_calls=m["tool_calls"] or None,
        tool_call_id=m["tool_call_id"] if m["role"] == "tool" else None,
        tool_name=m["tool_name"],
        reasoning=m["reasoning"],
        reasoning_content=m["reasoning_content"],
        finish_reason=m["finish_reason"],
        token_count=m["token_count"],
        observed=m["observed"] and m["role"] == "user",
    )


def apply(w: HermesWriter, ops) -> None:
    sessions: list[str] = []  # live sessions
    created = 0
    for op in ops:
        kind = op[0]
        if kind == "session":
            sid = f"s{created}"
            created += 1
            parent = sessions[-1] if op[2] and sessions else None
            w.session(sid, op[1], parent_session_id=parent, model="m1")
            sessions.append(sid)
            continue
        if kind == "tick":
            w.tick(op[1])
            continue
        if not sessions:
            continue
        sid = sessions[op[1] % len(sessions)]
        if kind == "msg":
            _append(w, sid, op[2])
        elif kind == "end":
            w.end(sid, "cli_close")
        elif kind == "reopen":
            w.tick()
            w.db.reopen_session(sid)
        elif kind == "tokens":
            w.tick()
            w.db.update_token_counts(
                sid,
                input_tokens=op[2],
                output_tokens=op[2] // 3,
                api_call_count=1,
                estimated_cost_usd=op[2] / 1000,
                model=op[3],
                billing_provider="openrouter",
                billing_base_url="https://openrouter.ai/api/v1",
            )
        elif kind == "rewind":
            users = [
                r[0]
                for r in w.query("SELECT id FROM messages WHERE session_id = ? AND role = 'user' ORDER BY id", (sid,))
            ]
            if users:
                w.tick()
                w.db.rewind_to_message(sid, users[op[2] % len(users)])
        elif kind == "compact":
            w.tick()
            w.db.archive_and_compact(
                sid,
                [
                    {"role": "user", "content": "[CONTEXT COMPACTION] " + op[2]},
                    {"role": "assistant", "content": op[2] or "tail"},
                ],
            )
        elif kind == "replace":
            w.tick()
            w.db.replace_messages(
                sid,
                [
                    {
                        k: v
                        for k, v in m.items()
                        if k
                        in (
                            "role",
                            "content",
                            "tool_call_id",
                            "tool_name",
                            "reasoning",
                            "reasoning_content",
                            "finish_reason",
                            "token_count",
                        )
                    }
                    | {"tool_calls": m["tool_calls"] or None}
                    for m in op[2]
                ],
            )
        elif kind == "delete":
            w.tick()
            w.db.delete_session(sid)
            sessions.remove(sid)  # Hermes deleted it: later operations pick a live session


def has_parts(m: dict) -> bool:
    """Independent oracle of SPEC §5.2: does this stored message yield at least one part?"""
    if m["role"] == "tool":
        return True
    if isinstance(m["reasoning"], str) and m["reasoning"]:
        return True
    if isinstance(m["reasoning_content"], str) and m["reasoning_content"].strip():
        return True
    if m["tool_calls"]:
        try:
            calls = json.loads(m["tool_calls"])
        except ValueError:
            calls = None
        if isinstance(calls, list) and calls:
            return True
    return isinstance(m["content"], str) and m["content"] != ""


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.lists(new_session, min_size=1, max_size=3), ops=st.lists(operation, min_size=10, max_size=40))
def test_random_histories_project_to_well_formed_deterministic_rows(start, ops):
    ops = start + ops
    with tempfile.TemporaryDirectory(prefix="hermes-prop-") as tmp:
        db = Path(tmp) / "home" / "state.db"
        with HermesWriter(db, home=db.parent) as w:
            apply(w, ops)
        first, second = project_store(db), project_store(db)

    assert first.gateway.equals(second.gateway)
    assert first.sessions.equals(second.sessions)
    assert first.messages.equals(second.messages)

    gateway = first.rows()
    part_ids = [r["part_id"] for r in gateway]
    assert len(part_ids) == len(set(part_ids))

    by_session: dict[str, list[dict]] = {}
    for r in gateway:
        by_session.setdefault(r["session_id"], []).append(r)
    for session_id, got in by_session.items():
        got.sort(key=lambda r: r["message_index"])
        assert [r["message_index"] for r in got] == list(range(len(got))), session_id
        assert got[0]["previous_message_id"] == []
        for prev, row in zip(got, got[1:]):
            assert row["previous_message_id"] == [prev["message_id"]], session_id
        ends = [n for n, r in enumerate(got) if r["part_type"] == "status"]
        assert ends in ([], [len(got) - 1])
        assert all(r["message_id"].startswith(session_id + "-") and r["part_id"] == r["message_id"] + "#0" for r in got)

    raw_messages = rows(first.messages)
    raw_sessions = {r["id"]: r for r in rows(first.sessions)}
    with_rows = {int(r["provider_uuid"]) for r in gateway if r["provider_uuid"] is not None}
    assert with_rows == {m["id"] for m in raw_messages if has_parts(m)}
    ended = {f"hermes-{sid}" for sid, s in raw_sessions.items() if s["ended_at"] is not None}
    assert {r["session_id"] for r in gateway if r["part_type"] == "status"} == ended
    assert {m["session_id"] for m in raw_messages} <= set(raw_sessions)
