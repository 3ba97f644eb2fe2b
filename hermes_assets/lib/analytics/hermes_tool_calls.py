"""Tool calls as Hermes's own report reads them from the stored messages.

``hermes insights`` reads tool use straight from the ``messages`` table, every
stored row (rewound, compacted and copied rows included), in two ways
(hermes-agent v0.22.2, ``agent/insights.py``):

* the calls an assistant row's ``tool_calls`` JSON names (:func:`functions`: a list
  whose entries hold a ``function`` object with a ``name``; the legacy flat shape
  and text that is not JSON name none);
* the ``tool`` rows that carry a ``tool_name``.

Its count of a tool is, per session, the larger of the two, added over sessions
(:func:`hermes_calls`: the two describe the same calls; a gateway session records
its results with names, a CLI session may not). Hermes 0.19 took the larger over
the whole report instead of per session, which loses the calls of a session that
only holds the other kind (Hermes fixed it, #9814).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.analytics.live_rows import count_by, in_store, only
from hermes_assets.lib.basics.schemas import MESSAGES
from hermes_assets.lib.source.jsonutil import python_loads

#: the columns of ``hermes_messages`` :func:`hermes_calls` reads
INPUTS = ["host", "store", "session_id", "role", "tool_name", "tool_calls", "source_deleted"]


def parse(raw: Any, kind: type) -> Any:
    """A value decoded from JSON text when it is text, if it is a ``kind``; else None."""
    if isinstance(raw, str):
        try:
            raw = python_loads(raw)
        except (ValueError, RecursionError):
            return None
    return raw if isinstance(raw, kind) else None


def functions(tool_calls: str | None) -> Iterator[dict]:
    """The ``function`` object of every call an assistant row's ``tool_calls`` names, as Hermes reads it."""
    for call in parse(tool_calls, list) or []:
        if isinstance(call, dict):
            function = call.get("function", {})
            if isinstance(function, dict):
                yield function


def hermes_calls(messages: pa.Table) -> dict[str | None, int]:
    """Per tool name, the calls Hermes's report counts in these messages (one day's, rows the store
    holds now, copies included)."""
    messages = in_store(only(messages, INPUTS), MESSAGES)
    if messages.num_rows == 0:  # nothing to count, no scalar to convert (pyarrow's first conversion imports pandas)
        return {}
    tools = messages.filter(
        pc.and_(
            pc.fill_null(pc.equal(messages.column("role"), "tool"), False), pc.is_valid(messages.column("tool_name"))
        )
    )
    assistants = messages.filter(
        pc.and_(
            pc.fill_null(pc.equal(messages.column("role"), "assistant"), False),
            pc.is_valid(messages.column("tool_calls")),
        )
    )
    found, names = call_names(assistants.column("tool_calls").to_pylist())
    rows = pa.array(found, pa.int64())
    if all(type(name) is str for name in names):  # Hermes's writing: counted in Arrow
        return _larger_kind(tools.select(_KEYS), assistants.select(_KEYS[:3]).take(rows), names)
    # a name that is not text (not Hermes's writing) is counted as it is, in Python
    keys = zip(*(assistants.column(c).take(rows).to_pylist() for c in _KEYS[:3]), names)
    return _larger_kind_of(Counter(count_by(tools, _KEYS)), Counter(keys))


#: what a call is counted by: its session (a host's store's) and its tool
_KEYS = ["host", "store", "session_id", "tool_name"]


def call_names(texts: list[str | None]) -> tuple[list[int], list[Any]]:
    """The name of every call each ``tool_calls`` text names (:func:`functions`, a ``name`` that is
    not empty), and the index of its text: one pair per call."""
    rows: list[int] = []
    names: list[Any] = []
    for i, text in enumerate(texts):
        for function in functions(text):
            name = function.get("name")
            if name:
                rows.append(i)
                names.append(name)
    return rows, names


def _larger_kind(named: pa.Table, called: pa.Table, names: list[str]) -> dict[str | None, int]:
    """:func:`_larger_kind_of` in Arrow: ``named``, the ``tool`` rows (:data:`_KEYS`); ``called``, the
    session of each call an assistant row names, and ``names`` their tools."""
    called = called.append_column("tool_name", pa.array(names, pa.string()))
    kinds = pa.concat_tables(
        [
            named.cast(called.schema).append_column("named", pa.repeat(pa.scalar(1), named.num_rows)),
            called.append_column("named", pa.repeat(pa.scalar(0), called.num_rows)),
        ]
    )
    if kinds.num_rows == 0:
        return {}
    per_session = kinds.group_by(_KEYS, use_threads=False).aggregate([("named", "sum"), ([], "count_all")])
    named_n = per_session.column("named_sum")
    larger = pc.max_element_wise(named_n, pc.subtract(per_session.column("count_all"), named_n))
    totals = (
        pa.table({"tool_name": per_session.column("tool_name"), "calls": larger})
        .group_by("tool_name", use_threads=False)
        .aggregate([("calls", "sum")])
    )
    return dict(zip(totals.column("tool_name").to_pylist(), totals.column("calls_sum").to_pylist()))


def _larger_kind_of(named: Counter[tuple], called: Counter[tuple]) -> dict[str | None, int]:
    """Per tool, the larger of its two counts in each session, added over sessions."""
    out: Counter[str | None] = Counter()
    for key in named.keys() | called.keys():
        out[key[3]] += max(named[key], called[key])
    return dict(out)
