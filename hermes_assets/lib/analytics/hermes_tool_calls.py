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

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.analytics.live_rows import count_by, in_store, only
from hermes_assets.lib.basics.schemas import MESSAGES

#: the columns of ``hermes_messages`` :func:`hermes_calls` reads
INPUTS = ["host", "store", "session_id", "role", "tool_name", "tool_calls", "source_deleted"]


def parse(raw: Any, kind: type) -> Any:
    """A value decoded from JSON text when it is text, if it is a ``kind``; else None."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
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
    called: Counter[tuple] = Counter()
    tools = messages.filter(
        pc.and_(
            pc.fill_null(pc.equal(messages.column("role"), "tool"), False), pc.is_valid(messages.column("tool_name"))
        )
    )
    named = Counter(count_by(tools, ["host", "store", "session_id", "tool_name"]))  # counted in Arrow
    assistants = messages.filter(
        pc.and_(
            pc.fill_null(pc.equal(messages.column("role"), "assistant"), False),
            pc.is_valid(messages.column("tool_calls")),
        )
    )
    columns = (assistants.column(c).to_pylist() for c in ("host", "store", "session_id", "tool_calls"))
    for host, store, sid, text in zip(*columns):
        for function in functions(text):
            if function.get("name"):
                called[(host, store, sid, function["name"])] += 1
    out: Counter[str | None] = Counter()
    for key in named.keys() | called.keys():
        out[key[3]] += max(named[key], called[key])
    return dict(out)
