"""Hermes's own count of logical messages and tool calls, from its oracle files (SPEC §11, D20).

The oracle (``tests/fixtures/hermes_v022/oracle.py``) counts what Hermes's display
view shows: each logical message once, over a compression lineage
(``new_messages`` / ``new_tool_calls`` per session: its lineage's display minus
its parent's). Hermes also keeps messages it never shows: turns rewound by
``/undo`` or ``/retry`` (``active = 0, compacted = 0`` with no later live
generation) and model-only scaffolding. They happened, so the analytics count
them too (SPEC §11: only the copies of a message are left out). They are the
stored rows (``export_session(include_inactive=True)``) whose display key
(Hermes's ``_display_dedupe_key``: role, content, timestamp, tool call) no
displayed row of the session or its ancestors has, each key once.
"""

from __future__ import annotations

import json
from collections import defaultdict


def display_key(message: dict) -> tuple:
    """Hermes's display key of a decoded message dict (content and calls as compact JSON)."""
    calls = message.get("tool_calls")
    call_ids = tuple(c.get("id") or c.get("call_id") for c in calls) if isinstance(calls, list) else ()
    if message["role"] == "assistant" and call_ids and all(call_ids):
        content = None  # Hermes's stable tool key: a pruned copy keeps its call ids, not its arguments
    else:
        content = json.dumps(message.get("content"), sort_keys=True, ensure_ascii=False)
    return (
        message["role"],
        content,
        message["timestamp"],
        message.get("tool_call_id"),
        call_ids,
        message.get("tool_name"),
    )


def _calls(message: dict) -> int:
    calls = message.get("tool_calls")
    return len(calls) if isinstance(calls, list) else 0


def logical_counts(counts: dict, exports: dict, display: dict) -> dict[str, dict[str, int]]:
    """day -> {"messages", "tool_calls"}: every logical message Hermes keeps (shown or not),
    each once, ``session_meta`` bookkeeping rows left out, on its session's day."""
    per_session = counts["per_session"]
    shown = {
        sid: {display_key(m) for m in rows} | {m.get("message_uid") for m in rows} - {None}
        for sid, rows in display.items()
    }
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"messages": 0, "tool_calls": 0})
    for sid, figures in per_session.items():
        lineage = figures.get("compression_lineage") or [sid]
        seen = set().union(*(shown.get(s, set()) for s in lineage))
        for ancestor in lineage[:-1]:  # a hidden row the parent already has is the parent's
            seen |= {display_key(m) for m in exports[ancestor]["messages"]}
            seen |= {m.get("message_uid") for m in exports[ancestor]["messages"]} - {None}
        hidden: dict[tuple, dict] = {}
        for message in exports[sid]["messages"]:
            key, uid = display_key(message), message.get("message_uid")
            if key in seen or uid in seen or message["role"] == "session_meta":
                continue
            hidden.setdefault(key, message)
            if uid:
                seen.add(uid)  # a later generation of this hidden message is the same message
            seen.add(key)
        meta_shown = sum(1 for m in display[sid] if m["role"] == "session_meta")
        day = out[figures["day"]]
        day["messages"] += figures["new_messages"] - meta_shown + len(hidden)
        day["tool_calls"] += figures["new_tool_calls"] + sum(_calls(m) for m in hidden.values())
    return dict(out)
