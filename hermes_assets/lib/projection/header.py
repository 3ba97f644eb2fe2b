"""A session's header: what every canonical row of one session shares (SPEC §5.5-§5.8, D3).

The provider (§5.6), the cwd or channel path (§5.7), git (§5.8), the
``attributes`` every row starts from (§5.5), and the session-constant columns.
A partition is recomputed from the store each time, so these converge on every
row of a session. Also here: :class:`SessionInput`, one session as the capture
hands it to the builders of the three datasets, with what it decided of it.
"""

from __future__ import annotations

import enum
import functools
import urllib.parse
from dataclasses import dataclass, field
from typing import Final, Literal

from hermes_assets.lib.basics import errors, ids
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.basics.timestamps import sane_instant, session_start_ms
from hermes_assets.lib.plan import policy
from hermes_assets.lib.projection.content import Decoded
from hermes_assets.lib.projection.context import ProjectionContext
from hermes_assets.lib.projection.copies import Marks
from hermes_assets.lib.source.jsonutil import dumps
from hermes_assets.lib.source.state_db import SessionBundle

KNOWN_HOSTS = {
    "api.openai.com": "openai",
    "chatgpt.com": "openai",
    "openrouter.ai": "openrouter",
    "api.anthropic.com": "anthropic",
    "generativelanguage.googleapis.com": "google",
}
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]"}

#: the ``sessions`` columns the canonical rows are built from (a bad cell among them reaches them)
GATEWAY_SESSION_READS = frozenset(
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
GATEWAY_MESSAGE_READS = frozenset(
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


class _Unset(enum.Enum):
    """Not computed yet (None is a value :func:`usage_by_model` returns)."""

    UNSET = enum.auto()


_UNSET: Final = _Unset.UNSET


@dataclass(slots=True)
class SessionInput:
    """One session to project, as the capture hands it to the builders of all three datasets.
    (Not frozen: a frozen dataclass is built field by field through ``object.__setattr__``,
    a cost paid per session on the hot path; nothing changes one after it is made.)"""

    bundle: SessionBundle
    policy_class: str = policy.FULL
    #: the session's generation, and each message's (mid -> generation; None: all are 1), D15
    generation: int = 1
    message_generations: dict[int, int] | None = None
    #: the copies among its rows (D20); None for a store before schema 23 (no marks, uid or display kind)
    marks: Marks | None = None
    #: the session's policy scope (SPEC §7), for ``hermes_sessions``
    scope_path: str | None = None
    #: each content cell decoded once, for both datasets that hold its text (mid -> decoding)
    decoded: dict[int | None, Decoded] = field(default_factory=dict)
    #: the content cells the canonical rows found to be their own text (mid -> the cell, a text
    #: without envelope, data URI or size problem): the raw rows take them without looking again
    plain: dict[int | None, str] = field(default_factory=dict)
    _models: list[dict] | Literal[_Unset.UNSET] | None = field(default=_UNSET, init=False, repr=False)
    _models_json: str | Literal[_Unset.UNSET] | None = field(default=_UNSET, init=False, repr=False)

    def usage_by_model(self) -> list[dict] | None:
        """:func:`usage_by_model` of the session, computed once for the end row and the session row."""
        if self._models is _UNSET:
            self._models = usage_by_model(self.bundle.usage)
        return self._models

    def usage_by_model_json(self) -> str | None:
        """:meth:`usage_by_model` as JSON, encoded once: the session row's cell, and the text
        the end row's attributes hold (numbers and long URLs: the larger part of both)."""
        if self._models_json is _UNSET:
            models = self.usage_by_model()
            self._models_json = dumps(models, normalized=True) if models else None
        return self._models_json


@dataclass(slots=True)
class SessionHeader:
    """What every canonical row of one session shares (built once per session, read only)."""

    scoped: str
    session_id: str
    start_ms: int
    #: ``attributes.hermes`` of every row of the session (source, real_cwd, store, profile, policy)
    hermes: dict
    #: ``attributes`` of every row before its own flags and usage; as JSON, a row that has neither
    attrs: dict
    plain_attrs: str
    #: the session-constant columns, in the order of ``gateway.SESSION_COLUMNS``
    columns: tuple


def session_header(item: SessionInput, ctx: ProjectionContext, tally: ErrorTally) -> SessionHeader | None:
    """The session's header, its session-level problems counted in ``tally``; None when it has
    no sane time at all (then it yields no canonical row: ``out_of_range_session``)."""
    bundle = item.bundle
    store, s, sid = bundle.store, bundle.session, bundle.sid
    scoped = store.scoped(sid)
    # a sane started_at is the start (bundle_start_ms's first choice, read once); else its fallbacks
    started_ms = sane_instant(s.get("started_at"), ctx.now_s)
    start_ms = started_ms if started_ms is not None else bundle_start_ms(bundle, ctx.now_s)
    if start_ms is None:
        tally.add(errors.OUT_OF_RANGE_SESSION, scoped, None, "started_at")
        return None
    if started_ms is None:
        tally.add(errors.BAD_TIMESTAMP, scoped, None, "started_at")
    for table, column, mid in bundle.bad_cells:
        if column in (GATEWAY_SESSION_READS if table == "sessions" else GATEWAY_MESSAGE_READS):
            tally.add(errors.BAD_TEXT, scoped, mid, column)
    if bundle.prompt_missing:
        tally.add(errors.SYSTEM_PROMPT_MISSING, scoped, None, "system_prompt_hash")

    source = s.get("source") if isinstance(s.get("source"), str) else None
    raw_cwd = nonempty(s.get("cwd"))
    hermes: dict = {"source": source}
    cwd: str | None
    if policy.is_channel(source):
        cwd = policy.channel_scope_path(source, ctx.user_home)
        if raw_cwd:
            hermes["real_cwd"] = raw_cwd
        repo_root = git_remote = None
    else:
        cwd = raw_cwd
        repo_root = nonempty(s.get("git_repo_root")) or (ctx.git.toplevel(cwd) if cwd else None)
        git_remote = ctx.git.remote(cwd) if cwd else None
    if store.label:
        hermes["store"] = store.label
    if store.profile:
        hermes["profile"] = store.profile
    if item.policy_class == policy.LOCAL_ONLY:
        hermes["policy"] = policy.LOCAL_ONLY
    attrs = {
        "client": {"name": "hermes"},
        "hermes": hermes,
        "gateway": {"source": ctx.gateway_source, "source_path_hash": store.path_hash, "native_id": sid},
    }
    parent = s.get("parent_session_id")
    parent = str(parent) if isinstance(parent, int) else nonempty(parent)
    session_id = ids.session_id(store.label, sid, item.generation)
    columns = (
        session_id,
        normalize_provider(s.get("billing_base_url"), s.get("billing_provider")),
        nonempty(s.get("model")),
        nonempty(s.get("system_prompt")),
        start_ms,
        cwd,
        nonempty(s.get("git_branch")),
        git_remote,
        repo_root,
        source,
        ids.session_id(store.label, parent) if parent else None,
        store.host,
    )
    # every value a text (or None): encoded as it is, no pass of normalize over it
    return SessionHeader(scoped, session_id, start_ms, hermes, attrs, dumps(attrs, normalized=True), columns)


@functools.lru_cache(maxsize=1024)
def normalize_provider(billing_base_url: object, billing_provider: object) -> str:
    """SPEC §5.6 (D8). Remembered: a store names a few providers, each session parses its URL."""
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


def _url_host(url: object) -> str | None:
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


def nonempty(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


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

    rows = (  # most sessions use one model: nothing to order
        usage
        if len(usage) == 1
        else sorted(usage, key=lambda u: ((u.get("first_seen") is None, u.get("first_seen") or 0), key(u)))
    )
    return [_usage_entry(u) for u in rows]


def _usage_entry(usage: dict) -> dict:
    """One ``session_model_usage`` row as an entry: a copy without ``session_id``, an integral
    float made an integer (SQLite cells: only a float can need normalizing). Copied whole, then
    the few floats fixed: a quarter of the work of a comprehension testing every cell."""
    entry = usage.copy()
    entry.pop("session_id", None)
    for key, value in entry.items():
        if type(value) is float and value.is_integer():
            entry[key] = int(value)  # a value replaced, no key added: the iteration stays valid
    return entry


def bundle_start_ms(bundle: SessionBundle, now_s: float) -> int | None:
    """When the session started (SPEC §2), from the same cells as its day placement."""
    s = bundle.session
    return session_start_ms(s.get("started_at"), (m["timestamp"] for m in bundle.messages), s.get("ended_at"), now_s)
