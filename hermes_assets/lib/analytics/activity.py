"""``hermes_activity``: when Hermes was used, by weekday and hour of the day (UTC).

One row per day (the sessions' start day) and hour in which a session started:
the day's weekday, the hour, the sessions started in it and their tokens (as
every analytics dataset counts a session's tokens:
:mod:`~hermes_assets.lib.analytics.day_sessions`). A day has one weekday, so any
range adds up by weekday, by hour, or both (``GROUP BY weekday, hour``), and the
days with a row are the days Hermes was used. Hermes's own report counts the
same sessions by weekday and hour in the machine's local time; these are UTC.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from hermes_assets.lib.analytics.day_sessions import Session
from hermes_assets.lib.analytics.live_rows import DayFigures
from hermes_assets.lib.basics import schemas

ACTIVITY = "hermes_activity"
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def activity(day: str, sessions: list[Session]) -> DayFigures:
    """Per hour of the day in which a session started: the sessions, their tokens."""
    hours: dict[int, list[Session]] = defaultdict(list)
    for session in sessions:
        if session.started_at is not None:  # a session with no start has no hour
            hours[session.started_at.hour].append(session)
    weekday = _weekday(day)
    rows: list[dict] = [
        {
            "day": day,
            "weekday": weekday,
            "weekday_name": WEEKDAYS[weekday - 1],
            "hour": hour,
            "sessions": len(hours[hour]),
            "total_tokens": sum(s.total_tokens for s in hours[hour]),
        }
        for hour in sorted(hours)
    ]
    table = schemas.table_of_rows(rows, schemas.HERMES_ACTIVITY)
    totals: dict[str, int | float] = {
        "sessions": sum(r["sessions"] for r in rows),
        "total_tokens": sum(r["total_tokens"] for r in rows),
        "active_hours": len(rows),
    }
    if rows:  # the shape of the day: when it started, ended, and was busiest (UTC hours)
        busiest = max(rows, key=lambda r: (r["sessions"], r["total_tokens"], -r["hour"]))
        totals |= {"first_hour": rows[0]["hour"], "last_hour": rows[-1]["hour"], "busiest_hour": busiest["hour"]}
    return DayFigures(table, totals)


def _weekday(day: str) -> int:
    """ISO weekday of a partition day: Monday 1 ... Sunday 7."""
    return dt.date.fromisoformat(day).isoweekday()
