"""``hermes_daily_channels``: what each channel Hermes was used through did each day.

The channel is a session's ``source``: ``cli``, ``tui``, ``cron``, ``subagent``,
or a messaging platform (``telegram``, ``discord``, ...), Hermes's own
"platform". Per day (the sessions' start day) and channel: its sessions, and
their messages, tool calls, API calls, tokens and costs as every analytics
dataset counts a session (:mod:`~hermes_assets.lib.analytics.day_sessions`: a
channel's figures add up to the day's figures per model), with Hermes's own
per-platform figures beside ours where they differ (its ``message_count`` and
``tool_call_count`` counters, the total of its token counters, its cost).
"""

from __future__ import annotations

from collections import defaultdict

from hermes_assets.lib.analytics.day_sessions import Session, Totals
from hermes_assets.lib.analytics.live_rows import DayFigures
from hermes_assets.lib.basics import schemas

CHANNELS = "hermes_daily_channels"


def daily_channels(day: str, sessions: list[Session]) -> DayFigures:
    """Per channel: sessions, messages, tool calls, API calls, tokens and costs (ours and Hermes's)."""
    acc: dict[str | None, Totals] = defaultdict(Totals)
    for session in sessions:
        acc[session.channel].add_session(session)
    rows = []
    for channel in sorted(acc, key=lambda c: (c is None, c or "")):
        totals = acc[channel]
        rows.append(
            {
                "day": day,
                "channel": channel,
                "sessions": len(totals.sessions),
                "messages": totals.messages,
                "hermes_messages": totals.hermes_messages,
                "tool_calls": totals.tool_calls,
                "hermes_tool_calls": totals.hermes_tool_calls,
                **totals.figures(),
                "hermes_total_tokens": totals.hermes_total_tokens,
                "ended_sessions": totals.ended_sessions,
                "session_seconds": round(totals.session_seconds, 3),
            }
        )
    table = schemas.table_of_rows(rows, schemas.HERMES_DAILY_CHANNELS)
    day_totals: dict[str, int | float] = {"channels": len(rows)}
    for name in ("sessions", "messages", "tool_calls", "total_tokens"):
        day_totals[name] = sum(r[name] for r in rows)
    day_totals["session_hours"] = round(sum(r["session_seconds"] for r in rows) / 3600, 3)
    for name in ("estimated_cost_usd", "hermes_cost_usd"):
        day_totals[name] = round(sum(r[name] or 0.0 for r in rows), 6)
    return DayFigures(table, day_totals)
