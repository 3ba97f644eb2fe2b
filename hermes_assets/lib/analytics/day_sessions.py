"""Each session of a day as the analytics count it: what it used of each model, its messages, its tool calls.

One definition of a session's figures, shared by every analytics dataset that
counts sessions (per model, per channel, per hour, the top sessions), so that
their totals agree with each other:

* **what it used of each model** (:class:`Share`): one share per entry of its
  ``usage_by_model`` (Hermes's ``session_model_usage`` rows: a session that
  switched models, or spent tokens on auxiliary tasks, uses several), plus,
  under the session's own ``model``, what its own counters hold beyond those
  entries (each kind of token, API calls and costs, never below zero): a session
  without entries counts its own totals. Hermes's report reconciles the two the
  same way (``_compute_model_breakdown``), so tokens and API calls equal its own;
* **messages**: its stored messages (rewound and compacted ones included; Hermes's
  ``session_meta`` rows are not messages), each logical message once (copies, D20,
  left out); **tool calls**: its canonical ``tool_call`` parts, each once;
* **Hermes's own figures** beside them: its ``message_count`` and
  ``tool_call_count`` counters, its token counters, and the cost Hermes's report
  gives each share (:func:`hermes_cost`).

Rows flagged ``source_deleted`` are left out: the sessions the store holds now.
"""

from __future__ import annotations

import datetime as dt
import functools
import zoneinfo
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.analytics import hermes_prices
from hermes_assets.lib.analytics.live_rows import count_by, live, only, tool_parts
from hermes_assets.lib.basics import ids, schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.source.jsonutil import python_loads

TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
COSTS = ("estimated_cost_usd", "actual_cost_usd")
#: what a share counts: API calls and each kind of token
COUNTS = ("api_calls", *TOKENS)
#: the kinds of token Hermes's totals add up (reasoning tokens are part of the output)
TOTAL_TOKENS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
#: costs are summed in floating point; a figure is rounded to the micro-dollar, as a person reads
#: money (0.192284, not 0.19228399999999998)
COST_DIGITS = 6

#: the columns the sessions of a day are read from (the IO manager reads nothing else)
INPUTS = {
    SESSIONS: [
        "host",
        "store",
        "store_label",
        "id",
        "generation",
        "source",
        "model",
        "title",
        "started_at",
        "ended_at",
        "message_count",
        "tool_call_count",
        "billing_provider",
        "billing_base_url",
        "cost_status",
        "cost_source",
        "usage_by_model",
        "api_call_count",
        *TOKENS,
        *COSTS,
        "source_deleted",
    ],
    MESSAGES: ["host", "store", "session_id", "role", "source_deleted", "copy_of"],
    GATEWAY: ["session_id", "part_type", "attributes"],
}


@dataclass(slots=True)
class Share:
    """What one session used of one model."""

    model: str | None
    #: API calls and each kind of token (:data:`COUNTS`)
    counts: dict[str, int]
    estimated_cost_usd: float | None
    actual_cost_usd: float | None
    #: the cost Hermes's report gives it (:func:`hermes_cost`)
    hermes_cost_usd: float
    #: whether Hermes's report counts the session under this model (it does for each of the
    #: session's usage rows, and for its own counters' remainder when that is not zero)
    hermes_counted: bool


@dataclass(slots=True)
class Session:
    """One session of the day and its figures."""

    host: str
    store: str
    store_label: str
    id: str
    channel: str | None
    model: str | None
    title: str | None
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    shares: list[Share]
    #: Hermes's own counters: ``message_count``, ``tool_call_count``, and its token counters
    hermes_messages: int
    hermes_tool_calls: int
    counters: dict[str, int]
    messages: int = 0
    tool_calls: int = 0
    #: Hermes's own total (input + cache read + cache write + output), over every model
    total_tokens: int = field(init=False, repr=False, compare=False)
    # the sums over its shares, each added once when it is built (every dataset that counts the
    # session asks them): its shares are settled then (only its messages and tool calls are added later)
    _counts: dict[str, int] = field(init=False, repr=False, compare=False)
    _costs: dict[str, float | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._counts = count_sums(self.shares)
        self._costs = {
            COSTS[0]: add_costs(share.estimated_cost_usd for share in self.shares),
            COSTS[1]: add_costs(share.actual_cost_usd for share in self.shares),
        }
        self.total_tokens = sum(self._counts[name] for name in TOTAL_TOKENS)

    def count(self, name: str) -> int:
        """API calls or one kind of token, over every model the session used."""
        return self._counts[name]

    def cost(self, name: str) -> float | None:
        """One of :data:`COSTS` over every model; None when no share has one."""
        return self._costs[name]

    @property
    def hermes_cost_usd(self) -> float:
        return sum(share.hermes_cost_usd for share in self.shares)

    @property
    def hermes_total_tokens(self) -> int:
        """The total of the session's own token counters, as Hermes's per-channel table adds them."""
        return sum(self.counters[name] for name in TOTAL_TOKENS)

    @property
    def hermes_tokens(self) -> int:
        """Input + output of the session's own counters: Hermes's "Most tokens"."""
        return self.counters["input_tokens"] + self.counters["output_tokens"]

    @property
    def duration_seconds(self) -> float | None:
        """From its start to its end; None while it has not ended, or when its clock ran backwards."""
        if self.started_at is None or self.ended_at is None or self.ended_at <= self.started_at:
            return None
        return (self.ended_at - self.started_at).total_seconds()


def add_costs(values: Iterable[float | None]) -> float | None:
    """The sum of costs that may be missing (None when all are)."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def add_cost(total: float | None, value: float | None) -> float | None:
    """``add_costs([total, value])`` without building the list (a total adds each share's cost): the
    same sum, from 0 as :func:`sum` adds."""
    if value is None:
        return None if total is None else 0 + total
    return 0 + value if total is None else 0 + total + value


def count_sums(shares: list[Share]) -> dict[str, int]:
    """Each of :data:`COUNTS` added over ``shares`` (whole numbers: the same sums in any order)."""
    out = dict.fromkeys(COUNTS, 0)
    for share in shares:
        counts = share.counts
        for name in COUNTS:
            out[name] += counts[name]
    return out


def rounded(value: float | None) -> float | None:
    """A cost to the micro-dollar."""
    return None if value is None else round(value, COST_DIGITS)


def model_name(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int:
    if type(value) is int:  # most values: as they are (the rest: a float's whole part, anything else 0)
        return value
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _cost(value: object) -> float | None:
    if type(value) is float:  # most values: as they are
        return value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


#: a text the projection did not hand over decoded
_UNREAD = object()


def usage_entries(text: str | None, decoded: Mapping[str, Any] | None = None) -> list[dict]:
    """The session's ``usage_by_model`` entries (SPEC §3), or ``[]`` when it has none. ``decoded``
    (text -> value): the cells a capture's projection encoded, as it held them (entries whose numbers
    are as JSON writes them, :func:`~hermes_assets.lib.projection.header.usage_by_model`: the value
    the text decodes to), not decoded again."""
    if not text:
        return []
    entries = _UNREAD if decoded is None else decoded.get(text, _UNREAD)
    if entries is _UNREAD:
        try:
            entries = python_loads(text)
        except (ValueError, RecursionError):  # bad JSON, or nested deeper than the parser goes
            return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def hermes_cost(entry: dict) -> float:
    """The cost Hermes's report gives a usage row: its stored estimate when the row says how it was
    costed (a ``cost_status`` or ``cost_source``), else Hermes's own price of its tokens
    (:mod:`~hermes_assets.lib.analytics.hermes_prices`)."""
    return _hermes_cost(entry, {name: _int(entry.get(name)) for name in TOTAL_TOKENS})


def _hermes_cost(entry: dict, tokens: dict[str, int]) -> float:
    """:func:`hermes_cost` of a usage row whose tokens (:data:`TOTAL_TOKENS`, at least) are read already."""
    if entry.get("cost_status") or entry.get("cost_source"):
        return _cost(entry.get("estimated_cost_usd")) or 0.0
    # a name that is not text (a list, a dict: not Hermes's writing) routes nowhere: no price, not a failed day
    return hermes_prices.row_cost(
        model_name(entry.get("model")),
        model_name(entry.get("billing_provider")),
        model_name(entry.get("billing_base_url")),
        tokens,
    )


def _entry_share(entry: dict) -> Share:
    get = entry.get  # each of COUNTS, spelt out: a day builds a share per usage row
    counts = {
        "api_calls": _int(get("api_call_count")),
        "input_tokens": _int(get("input_tokens")),
        "output_tokens": _int(get("output_tokens")),
        "cache_read_tokens": _int(get("cache_read_tokens")),
        "cache_write_tokens": _int(get("cache_write_tokens")),
        "reasoning_tokens": _int(get("reasoning_tokens")),
    }
    return Share(
        model_name(get("model")),
        counts,
        _cost(get("estimated_cost_usd")),
        _cost(get("actual_cost_usd")),
        _hermes_cost(entry, counts),  # its tokens are among the counts
        True,
    )


def _remainder(own: float | None, used: float) -> float | None:
    return None if own is None else max(0.0, own - used)


def model_shares(session: dict) -> list[Share]:
    """What a session (a ``hermes_sessions`` row) used of each model: its usage entries, and what its
    own counters hold beyond them under its own model (all of them, for a session without entries)."""
    return _model_shares(
        session["usage_by_model"],
        session["model"],
        [session["api_call_count"], *(session[name] for name in TOKENS)],
        session["estimated_cost_usd"],
        session["actual_cost_usd"],
    )


def _model_shares(
    usage_by_model: str | None,
    model: object,
    own_counts: list,
    estimated_cost: object,
    actual_cost: object,
    decoded: Mapping[str, Any] | None = None,
) -> list[Share]:
    """:func:`model_shares` of a session's cells: ``own_counts``, its API calls and tokens (:data:`COUNTS`);
    ``decoded``: as :func:`usage_entries` reads it."""
    shares = [_entry_share(e) for e in usage_entries(usage_by_model, decoded)]
    used = count_sums(shares)
    counts = {name: max(0, _int(own) - used[name]) for name, own in zip(COUNTS, own_counts)}
    estimated = _remainder(_cost(estimated_cost), sum(s.estimated_cost_usd or 0.0 for s in shares))
    actual = _remainder(_cost(actual_cost), sum(s.actual_cost_usd or 0.0 for s in shares))
    # Hermes adds the remainder when any of it is not zero, reasoning tokens aside (it counts none)
    hermes_counted = any(counts[n] for n in COUNTS if n != "reasoning_tokens") or bool(estimated) or bool(actual)
    if hermes_counted or counts["reasoning_tokens"] or not shares:
        shares.append(Share(model_name(model), counts, estimated, actual, estimated or 0.0, hermes_counted))
    return shares


def day_sessions(sessions: pa.Table, messages: pa.Table, gateway: pa.Table) -> list[Session]:
    """The day's sessions the store holds now, each with its figures (see the module)."""
    return sessions_of(sessions, messages, tool_parts(gateway))


#: the cells of a session :func:`sessions_of` reads, in this order (:data:`INPUTS`' but the prices'
#: cells, which its usage rows carry, and the deletion mark, filtered on before)
_SESSION_CELLS = tuple(
    name
    for name in INPUTS[SESSIONS]
    if name not in {"billing_provider", "billing_base_url", "cost_status", "cost_source", "source_deleted"}
)


def sessions_of(
    sessions: pa.Table, messages: pa.Table, parts: pa.Table, usage: Mapping[str, Any] | None = None
) -> list[Session]:
    """:func:`day_sessions` of the day's tool parts (:func:`~hermes_assets.lib.analytics.live_rows.tool_parts`).
    ``usage``: the sessions' ``usage_by_model`` cells decoded already (text -> value, :func:`usage_entries`)."""
    sessions = live(only(sessions, INPUTS[SESSIONS]), SESSIONS)
    messages = live(only(messages, INPUTS[MESSAGES]), MESSAGES)
    calls = only(parts, ["session_id", "part_type"])
    if calls.num_rows:  # none: no scalar to convert (pyarrow's first conversion imports pandas)
        calls = calls.filter(pc.equal(calls.column("part_type"), "tool_call"))
    found: dict[tuple[str, str, str], Session] = {}
    canonical: dict[str, Session] = {}
    columns = {name: as_pylist(sessions.column(name)) for name in _SESSION_CELLS}
    for host, store, label, sid, generation, source, model, title, started, ended, messages_n, calls_n, *cells in zip(
        *columns.values()
    ):
        usage_by_model, api_calls, *tokens = cells[:-2]
        estimated_cost, actual_cost = cells[-2:]
        session = Session(
            host,
            store,
            label,
            sid,
            source,
            model_name(model),
            title,
            started,
            ended,
            _model_shares(usage_by_model, model, [api_calls, *tokens], estimated_cost, actual_cost, usage),
            _int(messages_n),
            _int(calls_n),
            {name: _int(value) for name, value in zip(TOKENS, tokens)},
        )
        # a session is its host's store's (several hosts, one warehouse: SPEC §2)
        found[(host, store, sid)] = session
        canonical[ids.session_id(label, sid, generation or 1)] = session
    if not found:  # no session to count for (and no scalar converted: pyarrow's first conversion imports pandas)
        return []
    kept = messages.filter(pc.fill_null(pc.not_equal(messages.column("role"), "session_meta"), True))
    for key, n in count_by(kept, ["host", "store", "session_id"]).items():
        if key in found:
            found[key].messages += n
    for (session_id,), n in count_by(calls, ["session_id"]).items():
        if session_id in canonical:
            canonical[session_id].tool_calls += n
    return list(found.values())


_MICROSECONDS = {"s": 1_000_000, "ms": 1_000, "us": 1}


@functools.cache
def _epoch() -> dt.datetime:
    """What :meth:`pyarrow.Array.to_pylist` makes of a UTC time: an aware datetime in ``ZoneInfo("UTC")``
    (made on first use: importing the module reads no file)."""
    return dt.datetime(1970, 1, 1, tzinfo=zoneinfo.ZoneInfo("UTC"))


def as_pylist(column: pa.ChunkedArray) -> list:
    """``column.to_pylist()``; a column of UTC times (to the microsecond) built from its integers:
    Arrow's own conversion looks the zone up for each value, several times slower; a JSON column's
    text from its storage (Arrow's own makes a scalar of each value first, several times slower)."""
    kind = column.type
    if isinstance(kind, pa.JsonType):
        return schemas.storage_of(column).to_pylist()
    if not (pa.types.is_timestamp(kind) and kind.tz == "UTC" and kind.unit in _MICROSECONDS):
        return column.to_pylist()
    factor, epoch = _MICROSECONDS[kind.unit], _epoch()
    return [
        None if v is None else epoch + dt.timedelta(microseconds=v * factor)
        for v in column.cast(pa.int64()).to_pylist()
    ]


@dataclass(slots=True)
class Totals:
    """Figures added over sessions (a model's, a channel's, an hour's)."""

    sessions: set = field(default_factory=set)
    hermes_sessions: set = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    costs: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(COSTS))
    hermes_cost_usd: float = 0.0
    messages: int = 0
    tool_calls: int = 0
    hermes_messages: int = 0
    hermes_tool_calls: int = 0
    hermes_total_tokens: int = 0
    #: the sessions that ended (after they started), and their time from start to end
    ended_sessions: int = 0
    session_seconds: float = 0.0

    def add_share(self, share: Share) -> None:
        counts, theirs = self.counts, share.counts
        for name in COUNTS:
            counts[name] += theirs[name]
        costs = self.costs
        costs[COSTS[0]] = add_cost(costs[COSTS[0]], share.estimated_cost_usd)
        costs[COSTS[1]] = add_cost(costs[COSTS[1]], share.actual_cost_usd)
        self.hermes_cost_usd += share.hermes_cost_usd

    def add_session(self, session: Session) -> None:
        """The whole session: each of its shares, its messages and tool calls, its own counters."""
        self.sessions.add((session.host, session.store, session.id))
        for share in session.shares:
            self.add_share(share)
        self.messages += session.messages
        self.tool_calls += session.tool_calls
        self.hermes_messages += session.hermes_messages
        self.hermes_tool_calls += session.hermes_tool_calls
        self.hermes_total_tokens += session.hermes_total_tokens
        if session.duration_seconds is not None:
            self.ended_sessions += 1
            self.session_seconds += session.duration_seconds

    @property
    def total_tokens(self) -> int:
        return sum(self.counts[name] for name in TOTAL_TOKENS)

    def figures(self) -> dict:
        """The columns every table of totals shares: API calls, tokens, costs."""
        return {
            **self.counts,
            "total_tokens": self.total_tokens,
            **{name: rounded(value) for name, value in self.costs.items()},
            "hermes_cost_usd": round(self.hermes_cost_usd, COST_DIGITS),
        }
