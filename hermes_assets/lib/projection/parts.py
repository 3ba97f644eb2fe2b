"""Each message expanded into its canonical parts (SPEC §5.2, tool calls §5.3, D1).

A message yields, in order: a reasoning part, one tool_call part per call, and
a body part (always a tool_result for ``role = 'tool'``, else a text part when
the content is a non-empty string). A message with no part uses no index. Only
the last part of a message carries its usage and finish reason.

This is the hot path of a capture: one tuple per row, built without a per-row
dict; a message's attributes and status are worked out once per message (not
per part), and attributes that repeat are encoded once per session.
"""

from __future__ import annotations

from math import floor

from hermes_assets.lib.basics import errors, ids
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.basics.timestamps import SANE_AHEAD_S, SANE_MIN_S, sane_instant, upper_ms
from hermes_assets.lib.projection import display
from hermes_assets.lib.projection.content import Decoded, content_text, is_compact_summary, needs_decoding
from hermes_assets.lib.projection.header import SessionHeader, SessionInput, nonempty
from hermes_assets.lib.source.jsonutil import dumps, loads, normalize

FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "pause_turn": "pause"}
TOOL_SUCCESS = '{"tool_status":"success"}'

#: one part of a message: (part_type, text, tool_name, call_id, args, result_for), the row's columns
#: from ``part_type`` to ``tool_result_for`` (its ``provider_subtype`` follows from its type: ``gateway.SUBTYPES``)
Part = tuple[str, str | None, str | None, str | None, str | None, str | None]
#: a tool call as its message holds it: (call_id, name, args_json)
ToolCall = tuple[str | None, str | None, str]


#: a call without a ``function`` object (read only)
_NO_FUNCTION: dict = {}


def parse_tool_calls(raw: object) -> list[ToolCall] | None:
    """-> [(call_id, name, args_json)], [] when absent, None when malformed."""
    if raw is None or raw == "":
        return []
    if not isinstance(raw, str):
        return None
    try:
        calls = loads(raw)
    except (ValueError, RecursionError):
        return None
    if calls is None:
        return []
    if not isinstance(calls, list):
        return None
    out: list[ToolCall] = []
    try:
        for call in calls:
            if not isinstance(call, dict):
                return None
            fn = call.get("function")
            if not isinstance(fn, dict):
                fn = _NO_FUNCTION
            # the first choices tested in place (what nonempty tests), the fallbacks called
            call_id = call.get("id")
            if not (call_id and isinstance(call_id, str)):
                call_id = nonempty(call.get("call_id"))
            name = fn.get("name")
            if not (name and isinstance(name, str)):
                name = nonempty(call.get("name"))
            if "arguments" in fn:
                args = fn["arguments"]
            elif "arguments" in call:
                args = call["arguments"]
            else:
                args = call.get("input")
            if isinstance(args, str):
                try:
                    args = loads(args)
                except (ValueError, RecursionError):
                    pass
            out.append((call_id, name, dumps(args, normalized=True)))
    except RecursionError:
        return None
    return out


def message_parts(
    msg: dict,
    role: str,
    call_names: dict[str, str],
    tally: ErrorTally,
    scoped: str,
    decoded: dict[int | None, Decoded] | None,
    plain: dict[int | None, str] | None = None,
) -> list[Part]:
    """SPEC §5.2 expansion of one message: reasoning, tool calls, body, as
    ``(part_type, text, tool_name, call_id, args, result_for)``.
    ``plain`` (mid -> cell): where the content cells found to be their own text are told
    (:attr:`SessionInput.plain`)."""
    parts: list[Part] = []
    reasoning = msg["reasoning"]
    if reasoning and isinstance(reasoning, str):
        parts.append(("reasoning", reasoning, None, None, None, None))
    else:
        fallback = msg["reasoning_content"]
        if fallback and isinstance(fallback, str) and not fallback.isspace():
            parts.append(("reasoning", fallback, None, None, None, None))
    raw_calls = msg["tool_calls"]
    if raw_calls is not None:
        calls = parse_tool_calls(raw_calls)
        if calls is None:
            tally.add(errors.BAD_TOOL_CALLS, scoped, msg["id"], "tool_calls")
        else:
            for call_id, name, args in calls:
                parts.append(("tool_call", None, name, call_id, args, None))
                if call_id and name:
                    call_names[call_id] = name
    content = msg["content"]
    if role == "tool":
        text: str | None
        # a plain text cell is its own text (content_text's answer, without its two calls)
        if type(content) is str and not needs_decoding(content):
            text = content
            if plain is not None:
                plain[msg["id"]] = content
        else:
            text, _ = content_text(content, tally, scoped, msg["id"], decoded)
        call_id = nonempty(msg["tool_call_id"])
        name = call_names.get(call_id) if call_id else None
        parts.append(
            (
                "tool_result",
                "" if text is None else text,
                name or nonempty(msg["tool_name"]),
                call_id,
                None,
                call_id,
            )
        )
    elif content and isinstance(content, str):
        if type(content) is not str or needs_decoding(content):
            content, _ = content_text(content, tally, scoped, msg["id"], decoded)
        elif plain is not None:
            plain[msg["id"]] = content
        parts.append(("text", content, None, None, None, None))
    return parts


_FINISH_STATUS: dict[str, str] = {}
#: the flags of a message that has none (read only)
_NO_FLAGS: dict[str, bool] = {}


def _finish_status(finish: str) -> str:
    text = _FINISH_STATUS.get(finish)
    if text is None:
        text = dumps({"finish_reason": FINISH_REASONS.get(finish, finish)})
        if len(_FINISH_STATUS) < 1000:
            _FINISH_STATUS[finish] = text
    return text


def _attrs(flags: dict, token_count: object, plain: str, base: dict, hermes: dict, cache: dict[tuple, str]) -> str:
    """A part's ``attributes`` with the message's flags and, on the part that carries it, its
    usage (``token_count`` not None); ``plain`` when it has neither. Encoded once per session
    and combination (``cache``)."""
    if not flags and token_count is None:
        return plain
    key = (tuple(flags), token_count)
    cached = cache.get(key)
    if cached is None:
        value = {**base, "hermes": {**hermes, **flags}}
        if token_count is not None:  # the one cell that can be a float (texts and flags around it)
            value["usage"] = {"total_tokens": normalize(token_count)}
        cached = cache[key] = dumps(value, normalized=True)
    return cached


def append_parts(item: SessionInput, header: SessionHeader, rows: list, now_s: float, tally: ErrorTally) -> int:
    """Append the row tuple of every part of the session's messages to ``rows`` (the order of
    ``gateway.ROW_COLUMNS``); return how many."""
    messages, marks, decoded, plain, message_generations = (
        item.bundle.messages,
        item.marks,
        item.decoded,
        item.plain,
        item.message_generations,
    )
    scoped, session_id, start_ms = header.scoped, header.session_id, header.start_ms
    base_attrs, hermes_attrs, plain_attrs = header.attrs, header.hermes, header.plain_attrs
    append = rows.append
    prefix = ids.message_prefix(session_id)
    part_stem = ids.part_stem
    call_names: dict[str, str] = {}
    attrs_cache: dict[tuple, str] = {}
    index = 0
    # fast path for the usual REAL cell; the bounds are exact on the rounded ms
    lo_s, hi_s = SANE_MIN_S, now_s + SANE_AHEAD_S + 1
    lo_ms, hi_ms = int(SANE_MIN_S * 1000), upper_ms(now_s)

    for msg in messages:
        mid, role = msg["id"], msg["role"]
        if not isinstance(role, str):
            role = str(role)
        parts = message_parts(msg, role, call_names, tally, scoped, decoded, plain)
        if not parts:
            continue
        ts = msg["timestamp"]
        # round_ms(ts), without a call per message (floor's int is ``int(x // 1)`` in one step)
        ts_ms = floor(ts * 1000 + 0.5) if type(ts) is float and lo_s <= ts <= hi_s else None
        if ts_ms is None or not lo_ms <= ts_ms <= hi_ms:
            ts_ms = sane_instant(ts, now_s)
            if ts_ms is None:
                tally.add(errors.BAD_TIMESTAMP, scoped, mid, "timestamp")
                ts_ms = start_ms
        content = msg["content"]
        # is_compact_summary's own first test before the call: most cells fail it
        summary = (
            True
            if msg.get("_compressed_summary") == 1
            or (isinstance(content, str) and "[CONTEXT" in content and is_compact_summary(content))
            else None
        )
        # D20/D21: a row's own attributes; ``marks`` is None for a store before schema 23, which has none
        own = display.hermes_fragment(msg, marks.get(mid)) if marks is not None else ""
        active, compacted, observed = msg["active"], msg["compacted"], msg["observed"]
        # what the message's parts carry: the last one its usage and finish reason (a tool
        # result its success), the others the message's flags alone; worked out once per message
        token_count = msg["token_count"]
        if active == 0 or compacted or observed:
            flags = {}
            if active is not None and not active:
                flags["active"] = False
            if compacted:
                flags["compacted"] = True
            if observed:
                flags["observed"] = True
            attrs = _attrs(flags, None, plain_attrs, base_attrs, hermes_attrs, attrs_cache)
        else:
            flags, attrs = _NO_FLAGS, plain_attrs
        carrier_attrs = (
            attrs
            if token_count is None
            else _attrs(flags, token_count, plain_attrs, base_attrs, hermes_attrs, attrs_cache)
        )
        finish = msg["finish_reason"] if role == "assistant" else None
        finish_status = _finish_status(finish) if finish and isinstance(finish, str) else None
        if own:
            attrs = display.with_fragment(attrs, own)
            carrier_attrs = display.with_fragment(carrier_attrs, own)
        uuid = str(mid)
        stem = part_stem(prefix, mid, message_generations[mid] if message_generations else 1)
        last = len(parts) - 1
        for k, (ptype, text, tool_name, call_id, args, result_for) in enumerate(parts):
            carrier = k == last
            append(
                (
                    f"{stem}{k}",
                    uuid,
                    ts_ms,
                    role,
                    ptype,
                    text,
                    tool_name,
                    call_id,
                    args,
                    result_for,
                    summary,
                    TOOL_SUCCESS if ptype == "tool_result" else finish_status if carrier else None,
                    carrier_attrs if carrier else attrs,
                )
            )
            index += 1
    return index
