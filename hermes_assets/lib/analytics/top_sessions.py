"""``hermes_top_sessions``: the sessions of each day that used the most, by several measures.

Per day (the sessions' start day) and ranking, the :data:`TOP` sessions with
the largest measure, ranked 1, 2, ... (ties: the later start first, as
Hermes's report picks among equals, then the session id), each with its
title (redacted like every text cell), channel, model and figures. The top
:data:`TOP` of any range are among its days' top :data:`TOP`, so a range's
ranking is one query over these rows. The rankings (:data:`RANKINGS`):

* ours: ``tokens`` (its total tokens, every model it used: as every analytics
  dataset counts them) and ``cost`` (its estimated cost);
* Hermes's notable sessions, each by Hermes's own measure: ``duration``
  (its start to its end; "Longest session"), ``hermes_messages`` (its
  ``message_count``; "Most messages"), ``hermes_tokens`` (input + output of its own
  counters; "Most tokens"), ``hermes_tool_calls`` (its ``tool_call_count``;
  "Most tool calls").

A session enters a ranking only with a measure above zero.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from hermes_assets.lib.analytics.day_sessions import COSTS, Session, rounded
from hermes_assets.lib.analytics.live_rows import DayFigures
from hermes_assets.lib.basics import schemas

TOP_SESSIONS = "hermes_top_sessions"
#: how many sessions each ranking keeps per day
TOP = 10
#: ranking -> the measure it ranks by (None: the session does not enter it)
RANKINGS: dict[str, Callable[[Session], float | int | None]] = {
    "tokens": lambda s: s.total_tokens,
    "cost": lambda s: s.cost(COSTS[0]),
    "duration": lambda s: s.duration_seconds,
    "hermes_messages": lambda s: s.hermes_messages,
    "hermes_tokens": lambda s: s.hermes_tokens,
    "hermes_tool_calls": lambda s: s.hermes_tool_calls,
}


def ranked(sessions: list[Session], measure: Callable[[Session], float | int | None]) -> list[Session]:
    """The sessions with a measure above zero, largest first (ties: the later start first, then the
    session's host, store and id), at most :data:`TOP`."""
    return _largest(sorted(sessions, key=_tie_order), measure)


def _tie_order(session: Session) -> tuple[str, str, str]:
    return (session.host, session.store, session.id)


def _largest(in_order: list[Session], measure: Callable[[Session], float | int | None]) -> list[Session]:
    """:func:`ranked` of sessions sorted by :func:`_tie_order` already (once a day for every
    ranking): the :data:`TOP` largest picked, not the whole day sorted (``nlargest`` is the
    stable reverse sort's head)."""
    entered = [(value, s) for s in in_order if (value := measure(s)) is not None and value > 0]
    top = heapq.nlargest(TOP, entered, key=lambda vs: (vs[0], vs[1].started_at is not None, vs[1].started_at or 0))
    return [s for _, s in top]


def _row(day: str, ranking: str, rank: int, s: Session) -> dict:
    return {
        "day": day,
        "ranking": ranking,
        "rank": rank,
        "host": s.host,
        "store_label": s.store_label,
        "session_id": s.id,
        "title": s.title,
        "channel": s.channel,
        "model": s.model,
        "started_at": s.started_at,
        "ended_at": s.ended_at,
        "duration_seconds": s.duration_seconds,
        "messages": s.messages,
        "hermes_messages": s.hermes_messages,
        "tool_calls": s.tool_calls,
        "hermes_tool_calls": s.hermes_tool_calls,
        "total_tokens": s.total_tokens,
        "hermes_tokens": s.hermes_tokens,
        "estimated_cost_usd": rounded(s.cost(COSTS[0])),
        "hermes_cost_usd": rounded(s.hermes_cost_usd),
    }


def top_sessions(day: str, sessions: list[Session]) -> DayFigures:
    """Each ranking's top sessions of the day, with their figures."""
    rows = []
    tops: dict[str, Session] = {}
    in_order = sorted(sessions, key=_tie_order)
    for ranking, measure in RANKINGS.items():
        top = _largest(in_order, measure)
        rows += [_row(day, ranking, rank, s) for rank, s in enumerate(top, 1)]
        if top:
            tops[ranking] = top[0]
    table = schemas.table_of_rows(rows, schemas.HERMES_TOP_SESSIONS)
    totals: dict[str, int | float] = {
        "sessions_ranked": len({(r["host"], r["store_label"], r["session_id"]) for r in rows})
    }
    # the day's largest of each measure (0 when no session entered the ranking)
    totals["top_total_tokens"] = tops["tokens"].total_tokens if "tokens" in tops else 0
    totals["top_estimated_cost_usd"] = rounded(tops["cost"].cost(COSTS[0])) or 0.0 if "cost" in tops else 0.0
    totals["longest_session_hours"] = (
        round((tops["duration"].duration_seconds or 0) / 3600, 3) if "duration" in tops else 0.0
    )
    return DayFigures(table, totals)
