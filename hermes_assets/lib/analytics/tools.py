"""``hermes_daily_tools``: which tools Hermes used each day, per tool name.

Calls and results are the canonical ``tool_call`` and ``tool_result`` parts of
``ai_gateway_messages_hermes`` (rows the store holds now, each logical part
once); error results as Hermes shows them (:mod:`.tool_errors`); beside them,
the calls Hermes's own report counts from the stored messages
(:mod:`.hermes_tool_calls`). Counted in Arrow, one group per tool.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.analytics import hermes_tool_calls
from hermes_assets.lib.analytics.live_rows import DayFigures, tool_parts
from hermes_assets.lib.analytics.tool_errors import error_results
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES

TOOLS = "hermes_daily_tools"
#: the columns it reads of each captured dataset (the IO manager reads nothing else)
INPUTS = {
    GATEWAY: ["session_id", "part_type", "tool_name", "content_text", "is_error", "attributes"],
    MESSAGES: hermes_tool_calls.INPUTS,
}


def daily_tools(day: str, gateway: pa.Table, messages: pa.Table) -> DayFigures:
    """Per ``tool_name``: calls (``tool_call`` parts), results (``tool_result`` parts),
    error results (:func:`~hermes_assets.lib.analytics.tool_errors.is_error_result`) and the sessions that used the tool; beside them,
    the calls Hermes's own report counts (:func:`~hermes_assets.lib.analytics.hermes_tool_calls.hermes_calls`,
    from the stored messages)."""
    return tools_of(day, tool_parts(gateway), messages)


def _by_name(parts: pa.Table) -> dict:
    """Per ``tool_name`` of the tool parts: their calls, results, error results and sessions."""
    calls = pc.equal(parts.column("part_type"), "tool_call")
    counts = pa.table(
        {
            "tool_name": parts.column("tool_name"),
            "session_id": parts.column("session_id"),
            "calls": pc.cast(calls, pa.int64()),
            "results": pc.cast(pc.invert(calls), pa.int64()),
            "error_results": pc.cast(error_results(parts), pa.int64()),
        }
    )
    grouped = counts.group_by("tool_name", use_threads=False).aggregate(
        [("calls", "sum"), ("results", "sum"), ("error_results", "sum"), ("session_id", "count_distinct")]
    )
    return {
        row["tool_name"]: {
            "calls": row["calls_sum"],
            "results": row["results_sum"],
            "error_results": row["error_results_sum"],
            "sessions": row["session_id_count_distinct"],
        }
        for row in grouped.to_pylist()  # one row per tool
    }


def tools_of(day: str, parts: pa.Table, messages: pa.Table) -> DayFigures:
    """:func:`daily_tools` of the day's tool parts (:func:`~hermes_assets.lib.analytics.live_rows.tool_parts`)."""
    by_name = _by_name(parts) if parts.num_rows else {}  # none: nothing converted (pyarrow imports pandas)
    hermes = hermes_tool_calls.hermes_calls(messages)
    none = {"calls": 0, "results": 0, "error_results": 0, "sessions": 0}
    # a tool only Hermes's reading names (a call in no canonical part) has a row too
    rows = [
        {"day": day, "tool_name": name, **by_name.get(name, none), "hermes_calls": hermes.get(name, 0)}
        for name in sorted(by_name.keys() | hermes.keys(), key=lambda n: (n is None, n or ""))
    ]
    table = schemas.table_of_rows(rows, schemas.HERMES_DAILY_TOOLS)
    totals: dict[str, int | float] = {
        "tools": table.num_rows,
        "tool_calls": _sum(table, "calls"),
        "tool_results": _sum(table, "results"),
        "error_results": _sum(table, "error_results"),
        "sessions": pc.count_distinct(parts.column("session_id")).as_py() if parts.num_rows else 0,
    }
    totals["error_rate"] = round(totals["error_results"] / totals["tool_results"], 6) if totals["tool_results"] else 0.0
    totals["hermes_tool_calls"] = sum(hermes.values())
    return DayFigures(table, totals)


def _sum(table: pa.Table, column: str) -> int:
    return int(pc.sum(table.column(column)).as_py() or 0)
