"""The first analytics layer (SPEC §11): what a day of Hermes cost, and which tools it used.

Pure functions of one partition day of the captured datasets:

* :func:`daily_usage` -> ``hermes_daily_usage``: per model, sessions, messages,
  tool calls, API calls, tokens and costs;
* :func:`daily_tools` -> ``hermes_daily_tools``: per tool name, calls, results,
  error results and sessions.

The day is the partition day (the day the sessions started, SPEC §2), and
rows flagged ``source_deleted`` (D13) are left out: these tables describe what
the store holds now. So are copies (rows with ``copy_of``, D20): a logical
message, tool call or tool result counts once, however many generations
Hermes keeps of it. Each function returns the table and the day's totals (the
numbers a materialization shows and the Dagster UI plots); neither holds a
model or tool name, only counts.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics import ids, schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.datasets import Warehouse, WriteResult
from hermes_assets.lib.warehouse.loading import DatasetDays
from hermes_assets.lib.warehouse.retention import source_deleted_mask

log = get_logger()

USAGE = "hermes_daily_usage"
TOOLS = "hermes_daily_tools"
ANALYTICS = tuple(schemas.ANALYTICS)

TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
COSTS = ("estimated_cost_usd", "actual_cost_usd")
#: costs are summed in floating point; a day's figures are rounded to the micro-dollar, as a
#: person reads money (0.192284, not 0.19228399999999998)
COST_DIGITS = 6

#: the columns each asset reads (the IO manager reads nothing else)
USAGE_INPUTS = {
    SESSIONS: [
        "host",
        "store",
        "store_label",
        "id",
        "generation",
        "model",
        "usage_by_model",
        "api_call_count",
        *TOKENS,
        *COSTS,
        "source_deleted",
    ],
    MESSAGES: ["host", "store", "session_id", "role", "source_deleted", "copy_of"],
    GATEWAY: ["session_id", "part_type", "attributes"],
}
TOOLS_INPUTS = {
    GATEWAY: ["session_id", "part_type", "tool_name", "content_text", "is_error", "attributes"],
}

#: Hermes's file tools whose result proves the write landed (hermes-agent 0.19.0,
#: ``agent/tool_result_classification.py``)
_FILE_MUTATING_TOOLS = frozenset({"write_file", "patch"})


@dataclass
class DayFigures:
    """One day of one analytics dataset: its rows and its totals."""

    table: pa.Table
    totals: dict[str, int | float] = field(default_factory=dict)


# --------------------------------------------------------------------------
# hermes_daily_usage
# --------------------------------------------------------------------------


def _model(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _usage_entries(text: str | None) -> list[dict]:
    """The session's ``usage_by_model`` entries (SPEC §3), or ``[]`` when it has none."""
    if not text:
        return []
    try:
        entries = json.loads(text)
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _int(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _cost(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def live(table: pa.Table, dataset: str) -> pa.Table:
    """The rows not flagged ``source_deleted`` (D13), each logical message once (no copies,
    D20): what the store holds now."""
    if table.num_rows == 0:
        return table
    drop = pc.or_(source_deleted_mask(dataset, table), copy_mask(dataset, table))
    return table.filter(pc.invert(drop)) if pc.any(drop).as_py() else table


def copy_mask(dataset: str, table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Which rows are copies of an earlier generation of their logical message (D20): a raw
    row's ``copy_of``, a canonical row's ``attributes.hermes.copy_of``; all false for a
    dataset without them."""
    if dataset == GATEWAY and "attributes" in table.column_names:
        column = table.column("attributes")
        text = pa.chunked_array([c.storage for c in column.chunks], pa.string())
        # the key is written compact (SPEC §5.5); inside a JSON string its quotes would be escaped
        return pc.fill_null(pc.match_substring(text, '"copy_of":'), False)
    if "copy_of" in table.column_names:
        return pc.is_valid(table.column("copy_of"))
    return pa.repeat(pa.scalar(False), table.num_rows)


def _count_by(table: pa.Table, keys: list[str]) -> dict[tuple, int]:
    if table.num_rows == 0:
        return {}
    counts = table.group_by(keys).aggregate([([], "count_all")])
    columns = [counts.column(k).to_pylist() for k in keys]
    return {tuple(key): n for *key, n in zip(*columns, counts.column("count_all").to_pylist())}


def daily_usage(day: str, sessions: pa.Table, messages: pa.Table, gateway: pa.Table) -> DayFigures:
    """Per model: the day's sessions, messages, tool calls, API calls, tokens and costs.

    * Tokens, API calls and costs come from each session's ``usage_by_model``
      (the per-model truth, D12: a session that switched models, or spent
      tokens on auxiliary tasks such as titles and compression, counts under
      each model it used); a session without it counts its own totals under
      its own ``model``.
    * Messages (stored messages, rewound and compacted ones included; Hermes's
      ``session_meta`` bookkeeping rows are not messages) and tool calls (the
      canonical ``tool_call`` parts) count under the session's ``model``, each
      logical message once (copies left out, D20).
    * ``sessions``: the sessions that used the model (a ``usage_by_model``
      entry) or have it as their own model; a session can count under several.
    * ``total_tokens`` is Hermes's own total: input + cache read + cache write
      + output (reasoning tokens are part of the output).
    * Costs are as Hermes writes them, summed and rounded to the micro-dollar:
      ``NULL`` only where no session of the row has any (hermes-agent 0.19 writes
      ``0.0``, not NULL, into ``session_model_usage.actual_cost_usd`` when a
      provider reported no cost, so a day's ``actual_cost_usd`` is usually 0.0).
    """
    # the gateway's tool calls, then those the store holds now (the same rows as the other way round)
    calls = live(gateway.filter(pc.equal(gateway.column("part_type"), "tool_call")), GATEWAY)
    sessions, messages = live(sessions, SESSIONS), live(messages, MESSAGES)
    acc: dict[str | None, dict] = defaultdict(
        lambda: {
            "sessions": set(),
            "messages": 0,
            "tool_calls": 0,
            "api_calls": 0,
            **{t: 0 for t in TOKENS},
            **{c: None for c in COSTS},
        }
    )
    # a session is its host's store's (several hosts, one warehouse: SPEC §2)
    own_model: dict[tuple[str, str, str], str | None] = {}
    canonical: dict[str, tuple[str, str, str]] = {}
    for s in sessions.to_pylist():
        key = (s["host"], s["store"], s["id"])
        own = own_model[key] = _model(s["model"])
        canonical[ids.session_id(s["store_label"], s["id"], s["generation"] or 1)] = key
        acc[own]["sessions"].add(key)
        for source in _usage_entries(s["usage_by_model"]) or [s]:
            row = acc[_model(source.get("model"))]
            row["sessions"].add(key)
            row["api_calls"] += _int(source.get("api_call_count"))
            for name in TOKENS:
                row[name] += _int(source.get(name))
            for name in COSTS:
                value = _cost(source.get(name))
                if value is not None:
                    row[name] = value if row[name] is None else row[name] + value
    kept = messages.filter(pc.fill_null(pc.not_equal(messages.column("role"), "session_meta"), True))
    for (host, store, sid), n in _count_by(kept, ["host", "store", "session_id"]).items():
        if (host, store, sid) in own_model:
            acc[own_model[(host, store, sid)]]["messages"] += n
    for (session_id,), n in _count_by(calls, ["session_id"]).items():
        if session_id in canonical:
            acc[own_model[canonical[session_id]]]["tool_calls"] += n
    rows = []
    for model in sorted(acc, key=lambda m: (m is None, m or "")):
        row = acc[model]
        rows.append(
            {
                "day": day,
                "model": model,
                "sessions": len(row["sessions"]),
                **{k: row[k] for k in ("messages", "tool_calls", "api_calls", *TOKENS)},
                "total_tokens": row["input_tokens"]
                + row["cache_read_tokens"]
                + row["cache_write_tokens"]
                + row["output_tokens"],
                **{c: None if row[c] is None else round(row[c], COST_DIGITS) for c in COSTS},
            }
        )
    table = pa.Table.from_pylist(rows, schema=schemas.HERMES_DAILY_USAGE)
    totals: dict[str, int | float] = {"models": table.num_rows, "sessions": len(own_model)}
    for name in ("messages", "tool_calls", "api_calls", *TOKENS, "total_tokens"):
        totals[name] = sum(r[name] for r in rows)
    for name in COSTS:
        totals[name] = round(float(sum(r[name] or 0.0 for r in rows)), COST_DIGITS)
    return DayFigures(table, totals)


# --------------------------------------------------------------------------
# hermes_daily_tools
# --------------------------------------------------------------------------


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def hermes_marks_error(tool_name: str | None, content: str | None) -> bool:
    """Whether Hermes itself shows this tool result as a failure.

    Hermes records no error flag with a tool result (``is_error`` is NULL in
    every canonical row); its CLI decides from the result text, and this is
    that rule (hermes-agent 0.19.0, ``agent/display.py``
    ``_detect_tool_failure``), so the counts match what a Hermes user saw:

    1. ``write_file``/``patch`` results that prove the write landed (JSON
       without ``error``, with ``bytes_written`` / ``"success": true``): no error;
    2. ``terminal``: an error exactly when the JSON result has a non-zero
       ``exit_code`` (anything else, a cancellation note included, is not);
    3. ``memory``: ``"success": false`` with "exceed the limit" in ``error``;
    4. any JSON object with a truthy ``error`` (or ``message``) and either
       ``"success": false`` or an ``error`` key;
    5. else, text whose first 500 characters hold ``"error"`` or ``"failed"``
       (quotes included, any case), or that starts with ``Error``.
    """
    if content is None:
        return False
    data = _json(content)
    if tool_name in _FILE_MUTATING_TOOLS and isinstance(data, dict) and not data.get("error"):
        if (tool_name == "write_file" and "bytes_written" in data) or (
            tool_name == "patch" and data.get("success") is True
        ):
            return False
    if tool_name == "terminal":
        if isinstance(data, dict):
            code = data.get("exit_code")
            return code is not None and code != 0
        return False
    if isinstance(data, dict):
        if tool_name == "memory" and data.get("success") is False and "exceed the limit" in str(data.get("error", "")):
            return True
        err = data.get("error") or data.get("message")
        if err and (data.get("success") is False or "error" in data):
            return True
    lower = content[:500].lower()
    return '"error"' in lower or '"failed"' in lower or content.startswith("Error")


def is_error_result(is_error: bool | None, tool_name: str | None, content: str | None) -> bool:
    """A tool result is an error when its row says so (``is_error``), or, when it says
    nothing (Hermes's rows), when Hermes marks it as one (:func:`hermes_marks_error`)."""
    return is_error if is_error is not None else hermes_marks_error(tool_name, content)


#: text a tool result holds whenever :func:`hermes_marks_error` can call it an error: "error" or
#: "failed" in any case, "exit_code", a ``\\u`` escape (a JSON key may spell a letter so); rule 4
#: without "error" needs "message" and "success" (:func:`maybe_error`)
_MAYBE_ERROR = r"(?i:error|failed)|exit_code|\\u"


def maybe_error(content: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Which results :func:`hermes_marks_error` may call errors: the others hold none of the text
    each of its rules needs (a screen in Arrow, one pass; the rule itself decides for those it keeps)."""
    either = pc.match_substring_regex(content, _MAYBE_ERROR)
    both = pc.and_(pc.match_substring(content, "message"), pc.match_substring(content, "success"))
    return pc.fill_null(pc.or_(either, both), False)


def error_results(parts: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Which tool parts are error results (:func:`is_error_result`): a row's own ``is_error``, else
    Hermes's verdict, asked only of the results the screen (:func:`maybe_error`) keeps."""
    results = pc.equal(parts.column("part_type"), "tool_result")
    said = parts.column("is_error")
    unsaid = pc.and_(results, pc.is_null(said))
    ask = pc.replace_with_mask(  # the screen runs over the results that say nothing only
        pa.repeat(pa.scalar(False), parts.num_rows),
        unsaid.combine_chunks() if isinstance(unsaid, pa.ChunkedArray) else unsaid,
        maybe_error(parts.column("content_text").filter(unsaid)).combine_chunks()
        if parts.num_rows
        else pa.array([], pa.bool_()),
    )
    asked = parts.filter(ask)
    verdicts = [
        hermes_marks_error(tool_name, content)
        for tool_name, content in zip(asked.column("tool_name").to_pylist(), asked.column("content_text").to_pylist())
    ]
    found = pc.replace_with_mask(pa.repeat(pa.scalar(False), parts.num_rows), ask, pa.array(verdicts, pa.bool_()))
    return pc.and_(results, pc.or_(pc.fill_null(said, False), found))


def daily_tools(day: str, gateway: pa.Table) -> DayFigures:
    """Per ``tool_name``: calls (``tool_call`` parts), results (``tool_result`` parts),
    error results (:func:`is_error_result`) and the sessions that used the tool."""
    # the tool parts, then those the store holds now (the same rows as the other way round, cheaper)
    parts = gateway.filter(pc.is_in(gateway.column("part_type"), value_set=pa.array(["tool_call", "tool_result"])))
    parts = live(parts, GATEWAY)
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
    grouped = counts.group_by("tool_name").aggregate(
        [("calls", "sum"), ("results", "sum"), ("error_results", "sum"), ("session_id", "count_distinct")]
    )
    grouped = grouped.sort_by("tool_name")  # a NULL tool name last (Arrow's default)
    n = grouped.num_rows
    table = pa.table(
        {
            "day": pa.repeat(pa.scalar(day, pa.string()), n),
            "tool_name": grouped.column("tool_name"),
            "calls": grouped.column("calls_sum"),
            "results": grouped.column("results_sum"),
            "error_results": grouped.column("error_results_sum"),
            "sessions": grouped.column("session_id_count_distinct"),
        }
    ).cast(schemas.HERMES_DAILY_TOOLS)
    totals: dict[str, int | float] = {
        "tools": n,
        "tool_calls": _sum(table, "calls"),
        "tool_results": _sum(table, "results"),
        "error_results": _sum(table, "error_results"),
        "sessions": pc.count_distinct(parts.column("session_id")).as_py() if parts.num_rows else 0,
    }
    totals["error_rate"] = round(totals["error_results"] / totals["tool_results"], 6) if totals["tool_results"] else 0.0
    return DayFigures(table, totals)


def _sum(table: pa.Table, column: str) -> int:
    return int(pc.sum(table.column(column)).as_py() or 0)


# --------------------------------------------------------------------------
# one day, from the warehouse to the warehouse
# --------------------------------------------------------------------------


#: every column an analytics day reads, per captured dataset (both datasets of a day from one read)
INPUTS = {
    name: sorted(set(USAGE_INPUTS.get(name, [])) | set(TOOLS_INPUTS.get(name, [])))
    for name in (*USAGE_INPUTS, *TOOLS_INPUTS)
}


def compute_day(dataset: str, day: str, tables: dict[str, pa.Table]) -> DayFigures:
    """One analytics day from the day's tables of its inputs (``dataset name -> table``)."""
    if dataset == USAGE:
        return daily_usage(day, tables[SESSIONS], tables[MESSAGES], tables[GATEWAY])
    if dataset == TOOLS:
        return daily_tools(day, tables[GATEWAY])
    raise KeyError(f"{dataset!r} is not an analytics dataset ({', '.join(ANALYTICS)})")


#: how many times a day is computed again when its file or its inputs changed while it was
#: computed (another host wrote that day meanwhile) before the run gives up on it
RECOMPUTE_LIMIT = 8


@dataclass
class DayInputs:
    """One day of an analytics dataset's inputs, as read, and the stamps of their files taken
    before the read (:meth:`Warehouse.day_stamp`: on an object store each file's version)."""

    tables: dict[str, pa.Table]
    stamps: dict[str, tuple]


def inputs_of(dataset: str) -> list[str]:
    """The captured datasets ``dataset`` is computed from."""
    return [name for name in INPUTS if name in (USAGE_INPUTS if dataset == USAGE else TOOLS_INPUTS)]


def read_day(warehouse: Warehouse, day: str, read: Callable[[], dict[str, pa.Table]]) -> DayInputs:
    """The day's inputs (``read``), their files' stamps taken first."""
    stamps = {name: warehouse.day_stamp(name, day) for name in INPUTS}
    return DayInputs(read(), stamps)


def write_current_day(
    warehouse: Warehouse,
    dataset: str,
    day: str,
    read: Callable[[], dict[str, pa.Table]],
    first: DayInputs | None = None,
    known: tuple[dict[str, tuple], DayFigures] | None = None,
) -> tuple[WriteResult, DayFigures]:
    """Compute one analytics day from every host's files (``read``: the day's input tables)
    and replace its file, until the file is known to be computed from the inputs as they are.

    Every host that captures a day computes its analytics (SPEC §11), over all hosts'
    files, and several may write the day's one file at once. Each attempt reads the
    file's version first, then the inputs (their files' stamps first), computes, and
    replaces the file only if it is still that version (a conditional write:
    :meth:`Warehouse.replace_day`); after its write it checks that the inputs' files are
    still the ones read. A write that lost the race, or whose inputs moved, computes
    again. So the file written last was computed after the previous one was written and
    from the inputs as they stood after it was written: it equals a recomputation over
    every host's files. ``first``: the inputs already read for the first attempt.
    ``known``: the day's figures computed from its inputs when they had these stamps (by the
    capture that wrote them, :mod:`~hermes_assets.lib.analytics.captured_days`), used on the
    first attempt while the stamps hold: nothing is read.
    """
    names = inputs_of(dataset)
    for attempt in range(1, RECOMPUTE_LIMIT + 1):
        current = warehouse.read_versioned(dataset, day)
        if attempt == 1 and known is not None and all(warehouse.day_stamp(n, day) == known[0].get(n) for n in names):
            stamps, figures = known[0], known[1]
        else:
            got = first if attempt == 1 and first is not None else read_day(warehouse, day, read)
            stamps, figures = got.stamps, compute_day(dataset, day, got.tables)
        result = warehouse.replace_day(dataset, day, figures.table, current)
        if result is not None and all(warehouse.day_stamp(name, day) == stamps[name] for name in names):
            return result, figures
        log.info(
            "hermes.analytics.recomputed",
            dataset=dataset,
            day=day,
            attempt=attempt,
            reason="inputs_moved" if result is not None else "file_replaced",
        )
    raise RuntimeError(
        f"{dataset} {day}: its file or its inputs changed during each of {RECOMPUTE_LIMIT} computations "
        "(other hosts writing this day): the next run computes it again"
    )


def rebuild_days(warehouse: Warehouse, days: list[str]) -> dict[str, list[tuple[WriteResult, DayFigures]]]:
    """Recompute, straight from the warehouse, the analytics files among ``days``
    (the purge job's way to take purged rows out of the figures too); a day
    with no analytics file is left to the assets. Each day's inputs are read once."""
    present = {dataset: warehouse.existing(dataset, days) for dataset in ANALYTICS}
    inputs = {name: DatasetDays(warehouse, name, [], columns) for name, columns in INPUTS.items()}
    out: dict[str, list[tuple[WriteResult, DayFigures]]] = {dataset: [] for dataset in ANALYTICS}
    for day in sorted(set(days)):
        wanted = [dataset for dataset in ANALYTICS if day in present[dataset]]
        if wanted:
            read = functools.partial(read_inputs, inputs, day)
            first = read_day(warehouse, day, read)  # read once for both datasets; again only when they moved
            for dataset in wanted:
                out[dataset].append(write_current_day(warehouse, dataset, day, read, first=first))
    return out


def read_inputs(inputs: dict[str, DatasetDays], day: str) -> dict[str, pa.Table]:
    """One day of each input (the columns each reads)."""
    return {name: d.read(day) for name, d in inputs.items()}
