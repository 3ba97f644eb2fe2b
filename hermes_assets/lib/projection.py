"""Hermes sessions -> canonical ``ai_gateway_messages`` rows (SPEC §5), plus the
row builders of ``hermes_sessions`` (§3) and ``hermes_messages`` (§4).

Pure and deterministic: the same store gives the same rows. The only outside
look-ups (git, §5.8) go through an injected :class:`GitResolver`. Rows are built
column by column into :class:`GatewayColumns`, which turns into an Arrow table
without a per-row dict, so projection stays allocation-light.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import subprocess
import urllib.parse
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib import copies, display, errors, extra_columns, ids, policy, schemas
from hermes_assets.lib.copies import Marks
from hermes_assets.lib.errors import ErrorTally
from hermes_assets.lib.jsonutil import dumps, loads, normalize, quote
from hermes_assets.lib.state_db import SessionBundle
from hermes_assets.lib.timestamps import (
    SANE_AHEAD_S,
    SANE_MIN_S,
    DayNames,
    sane_instant,
    session_start_ms,
    upper_ms,
)

ENVELOPE = "\x00json:"
OVERSIZED_CHARS = 4 * 1024 * 1024
COMPACT_SUMMARY_PREFIXES = ("[CONTEXT COMPACTION", "[CONTEXT SUMMARY]:")
#: Hermes 0.19 merges a summary into an existing message after this line (D2)
MERGED_SUMMARY_DELIMITER = "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]"
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "pause_turn": "pause"}
KNOWN_HOSTS = {
    "api.openai.com": "openai",
    "chatgpt.com": "openai",
    "openrouter.ai": "openrouter",
    "api.anthropic.com": "anthropic",
    "generativelanguage.googleapis.com": "google",
}
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]"}
TOOL_SUCCESS = '{"tool_status":"success"}'
_DATA_URI = re.compile(r"data:([^;,\s\"']*);base64,[A-Za-z0-9+/=_-]+")
_CREDENTIALS = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^@/]*@")


# --------------------------------------------------------------------------
# session-level values
# --------------------------------------------------------------------------


def normalize_provider(billing_base_url, billing_provider) -> str:
    """SPEC §5.6 (D8)."""
    billing_provider = billing_provider if isinstance(billing_provider, str) and billing_provider else None
    host = _url_host(billing_base_url)
    if host:
        if host in KNOWN_HOSTS:
            return KNOWN_HOSTS[host]
        if host.endswith(".nousresearch.com"):
            return "nous"
        if host in LOOPBACK_HOSTS or host == "hermes":
            return _never_hermes(billing_provider)
        return host
    return _never_hermes(billing_provider)


def _never_hermes(provider: str | None) -> str:
    return provider if provider and provider != "hermes" else "unknown"


def _url_host(url) -> str | None:
    if not isinstance(url, str) or "://" not in url:
        return None
    try:
        parts = urllib.parse.urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return None
    if not parts.scheme or not host:
        return None
    return f"[{host}]" if ":" in host else host


def strip_credentials(remote: str | None) -> str | None:
    if not remote:
        return None
    return _CREDENTIALS.sub(r"\1", remote.strip()) or None


class GitResolver:
    """``git`` look-ups of SPEC §5.8, cached per (cwd, run). Tests inject a fake."""

    def __init__(self, timeout_s: float = 2.0):
        self.timeout_s = timeout_s
        self._cache: dict[tuple[str, str], str | None] = {}

    def toplevel(self, cwd: str) -> str | None:
        return self._git(cwd, "rev-parse", "--show-toplevel")

    def remote(self, cwd: str) -> str | None:
        return strip_credentials(self._git(cwd, "config", "--get", "remote.origin.url"))

    def _git(self, cwd: str, *args: str) -> str | None:
        key = (cwd, args[-1])
        if key not in self._cache:
            self._cache[key] = self._run(cwd, args)
        return self._cache[key]

    def _run(self, cwd: str, args) -> str | None:
        if not os.path.isdir(cwd):
            return None
        try:
            done = subprocess.run(
                ["git", "-C", cwd, *args],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                stdin=subprocess.DEVNULL,  # local look-ups only: nothing to prompt for
            )
        except (OSError, subprocess.SubprocessError):
            return None
        out = done.stdout.strip()
        return out if done.returncode == 0 and out else None


class NoGit(GitResolver):
    """A resolver that knows no repositories (deterministic tests, HypAware parity)."""

    def _run(self, cwd, args):
        return None


@dataclass
class ProjectionContext:
    """Everything the projection takes from outside the store."""

    user_home: str
    now_s: float
    git: GitResolver = field(default_factory=GitResolver)
    gateway_source: str = "backfill"


def _nonempty(value) -> str | None:
    return value if isinstance(value, str) and value else None


def session_scope(session: dict, user_home: str) -> str | None:
    """The effective policy scope of a session (SPEC §7, §5.7)."""
    return policy.scope_path(session.get("source"), _nonempty(session.get("cwd")), user_home)


def usage_by_model(usage: list[dict]) -> list[dict] | None:
    """SPEC §3: every column but ``session_id``, in a stable order; numbers already as
    JSON writes them (an integral float is an integer), so :func:`dumps` can skip its pass."""
    if not usage:
        return None

    def key(u):
        return tuple(
            "" if u.get(k) is None else str(u.get(k))
            for k in ("model", "billing_provider", "billing_base_url", "billing_mode", "task")
        )

    rows = sorted(usage, key=lambda u: ((u.get("first_seen") is None, u.get("first_seen") or 0), key(u)))
    return [{k: normalize(v) for k, v in u.items() if k != "session_id"} for u in rows]


def bundle_start_ms(bundle: SessionBundle, now_s: float) -> int | None:
    """When the session started (SPEC §2), from the same cells as its day placement."""
    s = bundle.session
    return session_start_ms(s.get("started_at"), (m["timestamp"] for m in bundle.messages), s.get("ended_at"), now_s)


# --------------------------------------------------------------------------
# content (SPEC §5.4)
# --------------------------------------------------------------------------


def decode_content(content, tally: ErrorTally | None = None, scoped_sid=None, mid=None, cache: dict | None = None):
    """-> (content_text, decoded envelope or None). ``content_text`` is None for non-strings.

    ``cache`` (mid -> result) lets the builders of one session share each message's
    decoding; each still counts the cell's problems in its own ``tally``.
    """
    if not isinstance(content, str):
        return None, None
    found = cache.get(mid) if cache is not None else None
    if found is None:
        found = _decode(content)
        if cache is not None:
            cache[mid] = found
    text, decoded, problems = found
    if tally is not None:
        for kind in problems:
            tally.add(kind, scoped_sid, mid, "content")
    return text, decoded


def _decode(content: str) -> tuple[str, object, tuple[str, ...]]:
    decoded, problems = None, ()
    text = content
    if content.startswith(ENVELOPE):
        try:
            decoded = loads(content[len(ENVELOPE) :])
            text = _envelope_text(decoded)
        except (ValueError, RecursionError):
            decoded, problems = None, (errors.BAD_ENVELOPE,)
    if "data:" in text:
        text = _DATA_URI.sub(_strip_data, text)
    if len(content) > OVERSIZED_CHARS:
        problems += (errors.OVERSIZED_CELL,)
    return text, decoded, problems


def _needs_decoding(content: str) -> bool:
    """Whether a content cell's text differs from the cell, or the cell is a problem."""
    return content.startswith(ENVELOPE) or "data:" in content or len(content) > OVERSIZED_CHARS


def content_text(content, tally: ErrorTally, scoped_sid, mid, cache: dict | None = None):
    """:func:`decode_content` for the cells that need it; any other text is its own."""
    if isinstance(content, str) and _needs_decoding(content):
        return decode_content(content, tally, scoped_sid, mid, cache)
    return (content if isinstance(content, str) else None), None


def is_compact_summary(content) -> bool:
    """SPEC D2, as Hermes's ``ContextCompressor._is_context_summary_content`` reads it.

    Leading whitespace is ignored; in a merged summary (text, delimiter,
    summary) only what follows the first delimiter counts; envelope content is
    read through its text parts. Every prefix holds ``[CONTEXT``, so content
    without it is rejected before any decoding.
    """
    if not isinstance(content, str) or "[CONTEXT" not in content:
        return False
    if content.startswith(ENVELOPE):
        try:
            content = _envelope_text(loads(content[len(ENVELOPE) :]))
        except (ValueError, RecursionError):
            pass  # a malformed envelope is read as its raw text, as content_text is (§5.4)
    _, merged, summary = content.partition(MERGED_SUMMARY_DELIMITER)
    return (summary if merged else content).lstrip().startswith(COMPACT_SUMMARY_PREFIXES)


def _strip_data(match: re.Match) -> str:
    return f"data:{match.group(1) or 'application/octet-stream'};base64,<stripped>"


def _envelope_text(decoded) -> str:
    items = decoded if isinstance(decoded, list) else [decoded]
    texts = []
    for item in items:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            if item.get("type") in (None, "text", "input_text", "output_text"):
                texts.append(item["text"])
    return "\n".join(texts)


# --------------------------------------------------------------------------
# tool calls (SPEC §5.3, D1)
# --------------------------------------------------------------------------


def parse_tool_calls(raw) -> list[tuple[str | None, str | None, str]] | None:
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
    out = []
    try:
        for call in calls:
            if not isinstance(call, dict):
                return None
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            call_id = _nonempty(call.get("id")) or _nonempty(call.get("call_id"))
            name = _nonempty(fn.get("name")) or _nonempty(call.get("name"))
            for holder, key in ((fn, "arguments"), (call, "arguments"), (call, "input")):
                if key in holder:
                    args = holder[key]
                    break
            else:
                args = None
            if isinstance(args, str):
                try:
                    args = loads(args)
                except (ValueError, RecursionError):
                    pass
            out.append((call_id, name, dumps(args, normalized=True)))
    except RecursionError:
        return None
    return out


# --------------------------------------------------------------------------
# the canonical rows, column by column
# --------------------------------------------------------------------------

#: columns that vary per row, in the order of a row tuple
_ROW_COLUMNS = (
    "message_id",
    "previous_message_id",
    "provider_uuid",
    "message_index",
    "message_created_at",
    "role",
    "part_id",
    "part_type",
    "provider_subtype",
    "content_text",
    "tool_name",
    "tool_call_id",
    "tool_args",
    "tool_result_for",
    "is_compact_summary",
    "status",
    "attributes",
    "date",
)
#: columns constant over a session (one value per session, repeated at build time)
_SESSION_COLUMNS = (
    "session_id",
    "provider",
    "model",
    "system_text",
    "conversation_started_at",
    "cwd",
    "git_branch",
    "git_remote",
    "repo_root",
    "entrypoint",
    "parent_thread_id",
)
_CONSTANTS = {
    "gateway_id": "hypaware-local",
    "schema_version": 7,
    "conversation_source": "hermes",
    "client_name": "hermes",
    "part_index": 0,
}


class GatewayColumns:
    """Buffers for ``ai_gateway_messages_hermes`` rows: one tuple per row for the
    varying columns, one tuple per session for the session-constant ones.

    :meth:`to_table` builds the session-constant text columns (system prompt,
    model, cwd ...) as dictionary arrays, one value per session: a long system
    prompt is stored once per session, not once per row, until the Parquet
    encoder writes it as a dictionary page.
    """

    def __init__(self):
        self.rows: list[tuple] = []
        self.sessions: list[tuple] = []
        self.session_rows: list[int] = []
        self.day_names = DayNames()

    def __len__(self) -> int:
        return len(self.rows)

    def to_table(self) -> pa.Table:
        n = len(self.rows)
        schema = schemas.AI_GATEWAY_MESSAGES
        row_cols = dict(zip(_ROW_COLUMNS, zip(*self.rows))) if n else {c: () for c in _ROW_COLUMNS}
        sess_cols = (
            dict(zip(_SESSION_COLUMNS, zip(*self.sessions))) if self.sessions else {c: () for c in _SESSION_COLUMNS}
        )
        session_of_row = pa.array([i for i, count in enumerate(self.session_rows) for _ in range(count)], pa.int32())
        fields, arrays = [], []
        for f in schema:
            name = f.name
            if name in row_cols:
                array = _array(row_cols[name], f.type)
            elif name in _DICTIONARY_COLUMNS:
                array = _session_dictionary(sess_cols[name], session_of_row)
                f = f.with_type(array.type)
            elif name in sess_cols:
                array = _array(sess_cols[name], f.type).take(session_of_row)
            elif name in _CONSTANTS:
                array = pa.repeat(pa.scalar(_CONSTANTS[name], f.type), n)
            else:
                array = pa.nulls(n, type=f.type)
            fields.append(f)
            arrays.append(array)
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


#: session-constant text columns kept as dictionaries (one value per session)
_DICTIONARY_COLUMNS = frozenset(
    {
        "provider",
        "model",
        "system_text",
        "cwd",
        "git_branch",
        "git_remote",
        "repo_root",
        "entrypoint",
        "parent_thread_id",
    }
)


def _session_dictionary(values, session_of_row: pa.Array) -> pa.DictionaryArray:
    """Per-session text values, as a per-row dictionary array (nulls in the indices)."""
    position: dict[str, int] = {}
    indices = [None if v is None else position.setdefault(v, len(position)) for v in values]
    per_session = pa.array(indices, pa.int32())
    return pa.DictionaryArray.from_arrays(per_session.take(session_of_row), pa.array(list(position), pa.string()))


def _array(values, typ: pa.DataType) -> pa.Array:
    if isinstance(typ, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(typ, pa.array(values, type=typ.storage_type))
    return pa.array(values, type=typ)


def project_session(
    bundle: SessionBundle,
    out: GatewayColumns,
    ctx: ProjectionContext,
    tally: ErrorTally,
    *,
    policy_class: str = policy.FULL,
    session_generation: int = 1,
    message_generations: dict[int, int] | None = None,
    decoded: dict | None = None,
    marks: Marks | None = None,
) -> int:
    """Append the session's canonical rows to ``out``; return how many.

    ``decoded``: the session's decoded content cells, shared with :func:`message_rows`.
    ``marks``: the copies among its rows (D20, :mod:`hermes_assets.lib.copies`); None for a
    store before schema 23 (its rows have no marks, uid or display kind).

    Generations (SPEC D15, :mod:`hermes_assets.lib.generations`) above 1 mark the ids:
    ``hermes-<sid>.g<n>`` for a session, ``<mid>.g<n>`` in a message's ids.
    """
    store, s = bundle.store, bundle.session
    sid = bundle.sid
    scoped = store.scoped(sid)
    session_id = ids.session_id(store.label, sid, session_generation)
    start_ms = bundle_start_ms(bundle, ctx.now_s)
    if start_ms is None:
        tally.add(errors.OUT_OF_RANGE_SESSION, scoped, None, "started_at")
        return 0
    if sane_instant(s.get("started_at"), ctx.now_s) is None:
        tally.add(errors.BAD_TIMESTAMP, scoped, None, "started_at")
    for table, column, mid in bundle.bad_cells:
        if column in (_GATEWAY_SESSION_READS if table == "sessions" else _GATEWAY_MESSAGE_READS):
            tally.add(errors.BAD_TEXT, scoped, mid, column)
    if bundle.prompt_missing:
        tally.add(errors.SYSTEM_PROMPT_MISSING, scoped, None, "system_prompt_hash")

    source = s.get("source") if isinstance(s.get("source"), str) else None
    raw_cwd = _nonempty(s.get("cwd"))
    hermes_attrs: dict = {"source": source}
    if policy.is_channel(source):
        cwd = policy.channel_scope_path(source, ctx.user_home)
        if raw_cwd:
            hermes_attrs["real_cwd"] = raw_cwd
        repo_root = git_remote = None
    else:
        cwd = raw_cwd
        repo_root = _nonempty(s.get("git_repo_root")) or (ctx.git.toplevel(cwd) if cwd else None)
        git_remote = ctx.git.remote(cwd) if cwd else None
    if store.label:
        hermes_attrs["store"] = store.label
    if store.profile:
        hermes_attrs["profile"] = store.profile
    if policy_class == policy.LOCAL_ONLY:
        hermes_attrs["policy"] = policy.LOCAL_ONLY
    base_attrs = {
        "client": {"name": "hermes"},
        "hermes": hermes_attrs,
        "gateway": {"source": ctx.gateway_source, "source_path_hash": store.path_hash, "native_id": sid},
    }
    plain_attrs = dumps(base_attrs)
    parent = s.get("parent_session_id")
    parent = str(parent) if isinstance(parent, int) else _nonempty(parent)
    out.sessions.append(
        (
            session_id,
            normalize_provider(s.get("billing_base_url"), s.get("billing_provider")),
            _nonempty(s.get("model")),
            _nonempty(s.get("system_prompt")),
            start_ms,
            cwd,
            _nonempty(s.get("git_branch")),
            git_remote,
            repo_root,
            source,
            ids.session_id(store.label, parent) if parent else None,
        )
    )

    append = out.rows.append
    # a part's previous_message_id is its predecessor's id as a JSON array: the session's
    # part of the ids is escaped once, the rest (mid, generation, k) never needs it
    tail_at = len(ids.message_prefix(session_id))
    esc_prefix = quote(ids.message_prefix(session_id))[:-1]
    day_of = out.day_names
    call_names: dict[str, str] = {}
    attrs_cache: dict[tuple, str] = {}
    prev = "[]"
    index = 0
    now_s = ctx.now_s
    # fast path for the usual REAL cell; the bounds are exact on the rounded ms
    lo_s, hi_s = SANE_MIN_S, now_s + SANE_AHEAD_S + 1
    lo_ms, hi_ms = int(SANE_MIN_S * 1000), upper_ms(now_s)

    for msg in bundle.messages:
        mid = msg["id"]
        role = msg["role"] if isinstance(msg["role"], str) else str(msg["role"])
        parts = _message_parts(msg, role, call_names, tally, scoped, decoded)
        if not parts:
            continue
        ts = msg["timestamp"]
        ts_ms = int((ts * 1000 + 0.5) // 1) if type(ts) is float and lo_s <= ts <= hi_s else None
        if ts_ms is None or not lo_ms <= ts_ms <= hi_ms:
            ts_ms = sane_instant(ts, now_s)
            if ts_ms is None:
                tally.add(errors.BAD_TIMESTAMP, scoped, mid, "timestamp")
                ts_ms = start_ms
        day = day_of(ts_ms)
        content = msg["content"]
        summary = True if msg.get("_compressed_summary") == 1 or is_compact_summary(content) else None
        # D20/D21: a row's own attributes; ``marks`` is None for a store before schema 23, which has none
        own = display.hermes_fragment(msg, marks.get(mid)) if marks is not None else ""
        active, compacted, observed = msg["active"], msg["compacted"], msg["observed"]
        flags = {}
        if active == 0 or compacted or observed:
            if active is not None and not active:
                flags["active"] = False
            if compacted:
                flags["compacted"] = True
            if observed:
                flags["observed"] = True
        token_count = msg["token_count"]
        finish = msg["finish_reason"] if role == "assistant" else None
        last = len(parts) - 1
        uuid = str(mid)
        part_ids = ids.message_ids(session_id, mid, message_generations[mid] if message_generations else 1, len(parts))
        for k, (ptype, subtype, text, tool_name, call_id, args, result_for) in enumerate(parts):
            message_id = part_ids[k]
            carrier = k == last
            if ptype == "tool_result":
                status = TOOL_SUCCESS
            elif carrier and finish and isinstance(finish, str):
                status = _finish_status(finish)
            else:
                status = None
            attrs = plain_attrs
            usage = carrier and token_count is not None
            if flags or usage:
                key = (tuple(flags), token_count if usage else None)
                attrs = attrs_cache.get(key)
                if attrs is None:
                    value = {**base_attrs, "hermes": {**hermes_attrs, **flags}}
                    if usage:
                        value["usage"] = {"total_tokens": token_count}
                    attrs = attrs_cache[key] = dumps(value)
            if own:
                attrs = display.with_fragment(attrs, own)
            append(
                (
                    message_id,
                    prev,
                    uuid,
                    index,
                    ts_ms,
                    role,
                    message_id + ids.PART_SUFFIX,
                    ptype,
                    subtype,
                    text,
                    tool_name,
                    call_id,
                    args,
                    result_for,
                    summary,
                    status,
                    attrs,
                    day,
                )
            )
            prev = f'[{esc_prefix}{message_id[tail_at:]}"]'
            index += 1

    if s.get("ended_at"):  # set and non-zero
        ended_ms = sane_instant(s.get("ended_at"), now_s)
        if ended_ms is None:
            tally.add(errors.BAD_TIMESTAMP, scoped, None, "ended_at")
            ended_ms = start_ms
        end_hermes = {"session_end": True}
        for key in ("end_reason", "estimated_cost_usd", "actual_cost_usd", "api_call_count"):
            if s.get(key) is not None:
                end_hermes[key] = normalize(s[key])
        models = usage_by_model(bundle.usage)
        if models:
            end_hermes["usage_by_model"] = models
        end_attrs = {
            **base_attrs,
            "hermes": {**end_hermes, **hermes_attrs},
            "usage": {
                k: normalize(s.get(k))
                for k in (
                    "input_tokens",
                    "output_tokens",
                    "cache_read_tokens",
                    "cache_write_tokens",
                    "reasoning_tokens",
                )
            },
        }
        message_id = ids.end_row_id(session_id)
        append(
            (
                message_id,
                prev,
                None,
                index,
                ended_ms,
                "system",
                ids.part_id(message_id),
                "status",
                "status",
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                dumps(end_attrs, normalized=True),
                day_of(ended_ms),
            )
        )
        index += 1
    out.session_rows.append(index)
    return index


_FINISH_STATUS: dict[str, str] = {}


def _finish_status(finish: str) -> str:
    text = _FINISH_STATUS.get(finish)
    if text is None:
        text = dumps({"finish_reason": FINISH_REASONS.get(finish, finish)})
        if len(_FINISH_STATUS) < 1000:
            _FINISH_STATUS[finish] = text
    return text


def _message_parts(
    msg: dict, role: str, call_names: dict, tally: ErrorTally, scoped: str, decoded: dict | None
) -> list[tuple]:
    """SPEC §5.2 expansion of one message: reasoning, tool calls, body."""
    parts = []
    reasoning = msg["reasoning"]
    if reasoning and isinstance(reasoning, str):
        parts.append(("reasoning", "thinking", reasoning, None, None, None, None))
    else:
        fallback = msg["reasoning_content"]
        if fallback and isinstance(fallback, str) and not fallback.isspace():
            parts.append(("reasoning", "thinking", fallback, None, None, None, None))
    raw_calls = msg["tool_calls"]
    if raw_calls is not None:
        calls = parse_tool_calls(raw_calls)
        if calls is None:
            tally.add(errors.BAD_TOOL_CALLS, scoped, msg["id"], "tool_calls")
        else:
            for call_id, name, args in calls:
                parts.append(("tool_call", "tool_use", None, name, call_id, args, None))
                if call_id and name:
                    call_names[call_id] = name
    content = msg["content"]
    if role == "tool":
        text, _ = content_text(content, tally, scoped, msg["id"], decoded)
        call_id = _nonempty(msg["tool_call_id"])
        name = call_names.get(call_id) if call_id else None
        parts.append(
            (
                "tool_result",
                "tool_result",
                "" if text is None else text,
                name or _nonempty(msg["tool_name"]),
                call_id,
                None,
                call_id,
            )
        )
    elif content and isinstance(content, str):
        content, _ = content_text(content, tally, scoped, msg["id"], decoded)
        parts.append(("text", "text", content, None, None, None, None))
    return parts


# --------------------------------------------------------------------------
# raw datasets (SPEC §3, §4)
# --------------------------------------------------------------------------


class RawColumns:
    """Buffers for ``hermes_sessions`` / ``hermes_messages``: one tuple of Hermes's
    own cells per row, derived columns beside them, provenance as runs.

    A cell the dataset cannot keep in its v22 type (an insane or unparseable
    time, a TEXT in an INTEGER column) becomes NULL and is counted in
    ``tally`` when the table is built (SPEC §9: raw datasets count too).
    """

    def __init__(
        self,
        schema: pa.Schema,
        source_columns,
        derived: tuple[str, ...],
        *,
        now_s: float,
        tally: ErrorTally,
        messages: bool,
    ):
        self.schema = schema
        #: the cells of a row tuple, in order (a column the store lacks and reads as NULL may be
        #: left out: it becomes an all-NULL column)
        self.source = [(name, schema.field(name).type) for name in source_columns]
        self.rows: list[tuple] = []
        self.derived = {name: [] for name in derived}
        self.runs: list[tuple[SessionBundle, str, int]] = []
        self.now_s = now_s
        self.tally = tally
        self._messages = messages
        #: the store's columns this contract does not name (D22); whether its rows can be copies (D20)
        self.unknown: list[str] = []
        self.grouped = False

    def __len__(self) -> int:
        return len(self.rows)

    def to_table(self) -> pa.Table:
        n = len(self.rows)
        columns = dict(zip((name for name, _ in self.source), zip(*self.rows))) if n else {}
        provenance = {"store": [], "store_label": [], "profile": [], "day": []}
        for bundle, day, count in self.runs:
            provenance["store"] += [bundle.store.path] * count
            provenance["store_label"] += [bundle.store.label] * count
            provenance["profile"] += [bundle.store.profile] * count
            provenance["day"] += [day] * count
        arrays = []
        ends: list[int] = []  # the end row of each run, for finding a row's session
        for f in self.schema:
            if f.name in columns:
                array, nulled = _raw_array(columns[f.name], f.type, self.now_s)
                if nulled and not ends:
                    ends = list(itertools.accumulate(count for _, _, count in self.runs))
                for i in nulled:
                    self._count(i, ends, errors.BAD_TIMESTAMP if f.type == schemas.TS else errors.BAD_VALUE, f.name)
                arrays.append(array)
            elif f.name in self.derived:
                arrays.append(_array(self.derived[f.name], f.type))
            elif f.name in provenance:
                arrays.append(_array(provenance[f.name], f.type))
            elif f.name in ("source_deleted", "replaced"):
                arrays.append(pa.repeat(pa.scalar(False), n))
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _count(self, row: int, ends: list[int], kind: str, column: str) -> None:
        """Count a cell that became NULL against its session (the run holding ``row``)."""
        mid = self.rows[row][0] if self._messages else None
        bundle = self.runs[bisect.bisect_right(ends, row)][0]
        self.tally.add(kind, bundle.store.scoped(bundle.sid), mid, column)


def _raw_array(values, typ: pa.DataType, now_s: float) -> tuple[pa.Array, list[int]]:
    """Hermes cells as their v22 type, and the indexes of the cells that became NULL.

    A cell of the wrong type (hostile or ancient data) becomes NULL on its own,
    without costing the column its fast path.
    """
    try:
        if typ == schemas.JSON:
            if values.count(None) == len(values):  # a column this store lacks, or never fills
                return pa.nulls(len(values), typ), []
            cells = [display.json_cell(v) for v in values]
            nulled = [i for i, (v, c) in enumerate(zip(values, cells)) if v is not None and c is None]
            return _array(cells, typ), nulled
        if typ == schemas.TS:
            seconds = pa.array(values, pa.float64())
            array = _timestamps(seconds, now_s)
            if array.null_count == seconds.null_count:
                return array, []
            nulled = pc.and_(pc.is_valid(seconds), pc.is_null(array))
            return array, pc.indices_nonzero(nulled).to_pylist()
        return pa.array(values, typ), []
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        cells = [_cell(v, typ, now_s) for v in values]
        nulled = [i for i, (v, c) in enumerate(zip(values, cells)) if v is not None and c is None]
        return pa.array(cells, schemas.TS if typ == schemas.TS else typ), nulled


def _timestamps(seconds: pa.Array, now_s: float) -> pa.Array:
    """REAL epoch seconds -> ms (round half up, SPEC §5.1); insane instants -> NULL."""
    ms = pc.floor(pc.add(pc.multiply(seconds, 1000.0), 0.5))
    sane = pc.and_(pc.greater_equal(ms, SANE_MIN_S * 1000), pc.less_equal(ms, float(upper_ms(now_s))))
    return pc.cast(pc.cast(pc.if_else(sane, ms, None), pa.int64()), schemas.TS)


def _cell(value, arrow_type: pa.DataType, now_s: float):
    """A SQLite cell coerced to its v22 type; a value of the wrong type is NULL."""
    if value is None:
        return None
    if arrow_type == schemas.TS:
        return sane_instant(value, now_s)
    if arrow_type == pa.string():
        return (
            value
            if isinstance(value, str)
            else str(value)
            if not isinstance(value, bytes)
            else value.decode("utf-8", "replace")
        )
    if arrow_type == pa.int64():
        return value if type(value) is int and -(2**63) <= value < 2**63 else None
    if arrow_type == pa.float64():
        return float(value) if type(value) in (int, float) else None
    if arrow_type == pa.binary():
        return value if isinstance(value, bytes) else None
    return value


def sessions_columns(now_s: float, tally: ErrorTally, unknown: list[str] = ()) -> RawColumns:
    """``unknown``: the store's ``sessions`` columns this contract does not name (D22)."""
    out = RawColumns(
        schemas.HERMES_SESSIONS,
        _SESSION_NAMES,
        ("scope_path", "policy_class", "usage_by_model", "generation", "extra_columns"),
        now_s=now_s,
        tally=tally,
        messages=False,
    )
    out.unknown = list(unknown)
    return out


def messages_columns(
    now_s: float, tally: ErrorTally, unknown: list[str] = (), *, grouped: bool = False, names: list[str] | None = None
) -> RawColumns:
    """``unknown``: as :func:`sessions_columns`; ``grouped``: the store's rows can be copies
    (schema 23+, D20), so ``superseded`` is true or false (NULL before); ``names``: the
    ``messages`` columns the reader selected (the keys of each message, in order)."""
    out = RawColumns(
        schemas.HERMES_MESSAGES,
        names or [name for name, _, _ in schemas.MESSAGE_COLUMNS],
        ("content_text", "content_json", "generation", "copy_of", "superseded", "extra_columns"),
        now_s=now_s,
        tally=tally,
        messages=True,
    )
    out.unknown = list(unknown)
    out.grouped = grouped
    return out


_SESSION_NAMES = tuple(name for name, _, _ in schemas.SESSION_COLUMNS)


def session_row(
    bundle: SessionBundle, out: RawColumns, *, day: str, scope_path: str | None, policy_class: str, generation: int = 1
) -> None:
    session = bundle.session
    out.rows.append(tuple(session.get(name) for name in _SESSION_NAMES))
    out.runs.append((bundle, day, 1))
    out.derived["generation"].append(generation)
    out.derived["scope_path"].append(scope_path)
    out.derived["policy_class"].append(policy_class)
    models = usage_by_model(bundle.usage)
    out.derived["usage_by_model"].append(dumps(models, normalized=True) if models else None)
    out.derived["extra_columns"].append(extra_columns.encode(out.unknown, bundle.extras or ()))
    for table, column, _ in bundle.bad_cells:
        if table == "sessions":
            out.tally.add(errors.BAD_TEXT, bundle.store.scoped(bundle.sid), None, column)
    if bundle.prompt_missing:
        out.tally.add(errors.SYSTEM_PROMPT_MISSING, bundle.store.scoped(bundle.sid), None, "system_prompt_hash")


def message_rows(
    bundle: SessionBundle,
    out: RawColumns,
    *,
    day: str,
    generations: dict[int, int] | None = None,
    decoded: dict | None = None,
    marks: Marks | None = None,
) -> None:
    """Every stored message of the session (inactive ones too), cells as stored
    (``decoded``: the session's decoded content cells, shared with :func:`project_session`;
    ``marks``: the copies among them, D20)."""
    texts, decoded_json = out.derived["content_text"], out.derived["content_json"]
    gens = out.derived["generation"]
    append = out.rows.append
    scoped = bundle.store.scoped(bundle.sid)
    n = len(bundle.messages)
    if generations is None:
        gens += [1] * n
    else:
        gens += [generations[msg["id"]] for msg in bundle.messages]
    copy_of, superseded = copies.columns(bundle.messages, marks, grouped=out.grouped)
    out.derived["copy_of"] += copy_of
    out.derived["superseded"] += superseded
    if out.unknown:
        extras = bundle.message_extras or {}
        out.derived["extra_columns"] += [
            extra_columns.encode(out.unknown, extras.get(msg["id"], ())) for msg in bundle.messages
        ]
    else:
        out.derived["extra_columns"] += [None] * n
    for msg in bundle.messages:
        append(tuple(msg.values()))
        text, envelope = content_text(msg["content"], out.tally, scoped, msg["id"], decoded)
        texts.append(text)
        decoded_json.append(dumps(envelope, normalized=True) if envelope is not None else None)
    if bundle.messages:
        out.runs.append((bundle, day, len(bundle.messages)))
    for table, column, mid in bundle.bad_cells:
        if table == "messages":
            out.tally.add(errors.BAD_TEXT, bundle.store.scoped(bundle.sid), mid, column)


#: the ``sessions`` columns the canonical rows are built from (a bad cell among them reaches them)
_GATEWAY_SESSION_READS = frozenset(
    {
        "id",
        "source",
        "system_prompt_hash",
        "model",
        "system_prompt",
        "started_at",
        "ended_at",
        "cwd",
        "git_branch",
        "git_repo_root",
        "billing_provider",
        "billing_base_url",
        "parent_session_id",
        "end_reason",
        "estimated_cost_usd",
        "actual_cost_usd",
        "api_call_count",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
    }
)
#: the ``messages`` columns the canonical rows are built from
_GATEWAY_MESSAGE_READS = frozenset(
    {
        "id",
        "session_id",
        "role",
        "content",
        "tool_call_id",
        "tool_calls",
        "tool_name",
        "timestamp",
        "token_count",
        "finish_reason",
        "reasoning",
        "reasoning_content",
        "observed",
        "active",
        "compacted",
        "_compressed_summary",
        "message_uid",
        "display_kind",
        "display_metadata",
    }
)
