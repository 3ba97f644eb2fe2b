"""``hermes_daily_skills``: which skills Hermes loaded and edited each day, as its own report counts them.

Hermes's agent uses a skill through two tools: ``skill_view`` loads one,
``skill_manage`` creates, edits or deletes one; both name the skill in their
arguments (``{"name": ...}``). ``hermes insights`` counts, per skill, the calls
of the first (loads) and of the second (edits) that the stored assistant
messages name (:func:`~hermes_assets.lib.analytics.hermes_tool_calls.functions`),
in every row the store holds (rewound, compacted and copied rows included), a
call whose arguments are not a JSON object or name no skill (an empty or blank
name) left out, and the time of the last message that used it. So does this
dataset, per day (the sessions' start day) and skill, with the sessions that
used it; a day's figures add up over any range (the last use: the latest).
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.analytics.hermes_tool_calls import functions, parse
from hermes_assets.lib.analytics.live_rows import DayFigures, holds, in_store, only
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import MESSAGES

SKILLS = "hermes_daily_skills"
#: Hermes's skill tools: what a call of each counts as
KINDS = {"skill_view": "loads", "skill_manage": "edits"}
INPUTS = {MESSAGES: ["host", "store", "session_id", "role", "tool_calls", "timestamp", "source_deleted"]}


def skill_calls(tool_calls: str | None) -> list[tuple[str, str]]:
    """(kind, skill) of each skill call an assistant row names, as Hermes counts them."""
    out = []
    for function in functions(tool_calls):
        kind = KINDS.get(function.get("name"))  # type: ignore[arg-type]
        if kind is None:
            continue
        name = (parse(function.get("arguments"), dict) or {}).get("name")
        if isinstance(name, str) and name.strip():
            out.append((kind, name))
    return out


def daily_skills(day: str, messages: pa.Table) -> DayFigures:
    """Per skill: loads, edits, actions (both), the sessions that used it, its last use."""
    messages = in_store(only(messages, INPUTS[MESSAGES]), MESSAGES)
    assistants = (
        messages.filter(
            pc.and_(
                pc.fill_null(pc.equal(messages.column("role"), "assistant"), False),
                pc.fill_null(holds(messages.column("tool_calls"), "skill_"), False),
            )
        )
        if messages.num_rows
        else messages  # none: no scalar converted (pyarrow's first conversion imports pandas)
    )
    acc: dict[str, dict] = defaultdict(lambda: {"loads": 0, "edits": 0, "sessions": set(), "last_used_at": None})
    columns = (assistants.column(c).to_pylist() for c in ("host", "store", "session_id", "tool_calls", "timestamp"))
    for host, store, sid, text, at in zip(*columns):
        for kind, name in skill_calls(text):
            row = acc[name]
            row[kind] += 1
            row["sessions"].add((host, store, sid))
            if at is not None and (row["last_used_at"] is None or at > row["last_used_at"]):
                row["last_used_at"] = at
    rows = [
        {
            "day": day,
            "skill": name,
            "loads": acc[name]["loads"],
            "edits": acc[name]["edits"],
            "actions": acc[name]["loads"] + acc[name]["edits"],
            "sessions": len(acc[name]["sessions"]),
            "last_used_at": acc[name]["last_used_at"],
        }
        for name in sorted(acc)
    ]
    table = schemas.table_of_rows(rows, schemas.HERMES_DAILY_SKILLS)
    users: set = set().union(*(r["sessions"] for r in acc.values())) if acc else set()
    totals: dict[str, int | float] = {
        "skills": len(rows),
        "loads": sum(r["loads"] for r in rows),
        "edits": sum(r["edits"] for r in rows),
        "actions": sum(r["actions"] for r in rows),
        "sessions": len(users),
    }
    return DayFigures(table, totals)
