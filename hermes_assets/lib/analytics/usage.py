"""``hermes_daily_usage``: what each day of Hermes used, per model.

Each session of the day counts as :mod:`~hermes_assets.lib.analytics.day_sessions`
defines it: what it used of each model under that model (a session that
switched models counts under each), its messages and tool calls under its own
model; beside our figures, the ones Hermes's own report gives per model
(``hermes_sessions``, ``hermes_tool_calls``, ``hermes_cost_usd``).
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from hermes_assets.lib.analytics import day_sessions
from hermes_assets.lib.analytics.day_sessions import COSTS, COUNTS, Session, Totals
from hermes_assets.lib.analytics.live_rows import DayFigures
from hermes_assets.lib.basics import schemas

USAGE = "hermes_daily_usage"
#: the columns it reads of each captured dataset (the IO manager reads nothing else)
INPUTS = day_sessions.INPUTS


def daily_usage(day: str, sessions: pa.Table, messages: pa.Table, gateway: pa.Table) -> DayFigures:
    """Per model: the day's sessions, messages, tool calls, API calls, tokens and costs.

    * Tokens, API calls and costs: what each session used of the model
      (:func:`~hermes_assets.lib.analytics.day_sessions.model_shares`: its
      ``usage_by_model`` entries, the per-model truth, D12, and under its own
      ``model`` what its own counters hold beyond them; a session that switched
      models, or spent tokens on auxiliary tasks such as titles and compression,
      counts under each model it used).
    * Messages (stored messages, rewound and compacted ones included; Hermes's
      ``session_meta`` bookkeeping rows are not messages) and tool calls (the
      canonical ``tool_call`` parts) count under the session's ``model``, each
      logical message once (copies left out, D20).
    * ``sessions``: the sessions that used the model or have it as their own
      model; a session can count under several.
    * ``total_tokens`` is Hermes's own total: input + cache read + cache write
      + output (reasoning tokens are part of the output).
    * Costs are as Hermes writes them, summed and rounded to the micro-dollar:
      ``NULL`` only where no session of the row has any (hermes-agent 0.19 writes
      ``0.0``, not NULL, into ``session_model_usage.actual_cost_usd`` when a
      provider reported no cost, so a day's ``actual_cost_usd`` is usually 0.0).
    * Hermes's own figures beside ours: ``hermes_sessions`` (the sessions its report
      counts under the model: those with a usage row of it, and those whose own
      counters hold more than their rows, under their own model),
      ``hermes_tool_calls`` (each session's ``tool_call_count`` under its own model)
      and ``hermes_cost_usd`` (:func:`~hermes_assets.lib.analytics.day_sessions.hermes_cost`).
    """
    return per_model(day, day_sessions.day_sessions(sessions, messages, gateway))


def per_model(day: str, found: list[Session]) -> DayFigures:
    """:func:`daily_usage` of the day's sessions (:func:`~hermes_assets.lib.analytics.day_sessions.day_sessions`)."""
    acc: dict[str | None, Totals] = defaultdict(Totals)
    for session in found:
        key = (session.host, session.store, session.id)
        own = acc[session.model]
        own.sessions.add(key)
        own.messages += session.messages
        own.tool_calls += session.tool_calls
        own.hermes_tool_calls += session.hermes_tool_calls
        for share in session.shares:
            row = acc[share.model]
            row.sessions.add(key)
            if share.hermes_counted:
                row.hermes_sessions.add(key)
            row.add_share(share)
    rows = []
    for model in sorted(acc, key=lambda m: (m is None, m or "")):
        totals = acc[model]
        figures = totals.figures()
        rows.append(
            {
                "day": day,
                "model": model,
                "sessions": len(totals.sessions),
                "messages": totals.messages,
                "tool_calls": totals.tool_calls,
                **figures,
                "hermes_sessions": len(totals.hermes_sessions),
                "hermes_tool_calls": totals.hermes_tool_calls,
            }
        )
    table = schemas.table_of_rows(rows, schemas.HERMES_DAILY_USAGE)
    day_totals: dict[str, int | float] = {"models": table.num_rows, "sessions": len(found)}
    for name in ("messages", "tool_calls", *COUNTS, "total_tokens", "hermes_tool_calls"):
        day_totals[name] = sum(r[name] for r in rows)
    for name in (*COSTS, "hermes_cost_usd"):
        day_totals[name] = round(float(sum(r[name] or 0.0 for r in rows)), day_sessions.COST_DIGITS)
    return DayFigures(table, day_totals)
