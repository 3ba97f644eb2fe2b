"""Which tool results are errors: a row's own flag, else the verdict Hermes itself shows.

Hermes records no error flag with a tool result (``is_error`` is NULL in its
rows); its CLI decides from the result's text (:func:`hermes_marks_error`).
:func:`error_results` asks that rule, in Arrow, of only the results a cheap
screen (:func:`maybe_error`) cannot clear.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.source.jsonutil import python_loads

#: Hermes's file tools whose result proves the write landed (hermes-agent 0.19.0,
#: ``agent/tool_result_classification.py``)
_FILE_MUTATING_TOOLS = frozenset({"write_file", "patch"})


def _json(text: str) -> Any:
    try:
        return python_loads(text)
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


#: text a tool result holds whenever :func:`hermes_marks_error` can call it an error, but a
#: ``terminal`` result's: "error" or "failed" in any case, a ``\\u`` escape (a JSON key may spell a
#: letter so); rule 4 without "error" needs "message" (and "success", which the screen does not ask:
#: a superset, the rule decides). One alternation: RE2 reads a result once for all of them, in
#: about the time of three searches of one word each
_MAYBE_ERROR = r"(?i)error|(?i)failed|\\u|message"
#: text a ``terminal`` result holds whenever it is an error (rule 2 alone decides it): its
#: ``exit_code`` key then a value that is not a plain ``0`` (a ``0`` followed by what ends a JSON
#: number: the code 0), or a ``\\u`` escape (the key spelt with one). Most terminal results end
#: with ``"exit_code": 0``: the rule decodes only the others
_MAYBE_TERMINAL_ERROR = r'"exit_code"\s*:\s*(?:[^0\s]|0[^,}\s])|\\u'


def maybe_error(
    content: pa.ChunkedArray | pa.Array, tool_name: pa.ChunkedArray | pa.Array, among: pa.Array | None = None
) -> pa.Array:
    """Which results :func:`hermes_marks_error` may call errors (``among``: of those rows; the others
    false): the others hold none of the text each of its rules needs (a screen in Arrow; the rule
    itself decides for those it keeps)."""
    terminal = _flat(pc.fill_null(pc.equal(tool_name, "terminal"), False))
    others = pc.invert(terminal)
    if among is not None:
        terminal, others = pc.and_(among, terminal), pc.and_(among, others)
    return pc.or_(_holds_in(content, terminal, _MAYBE_TERMINAL_ERROR), _holds_in(content, others, _MAYBE_ERROR))


def _holds_in(content: pa.ChunkedArray | pa.Array, rows: pa.Array, pattern: str) -> pa.Array:
    """Which of ``rows`` hold ``pattern`` (the others false), searched in those rows only."""
    found = pc.fill_null(pc.match_substring_regex(content.filter(rows), pattern), False)
    return pc.replace_with_mask(pa.repeat(pa.scalar(False), len(rows)), rows, _flat(found))


def _flat(mask: pa.ChunkedArray | pa.Array) -> pa.Array:
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


def error_results(parts: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Which tool parts are error results (:func:`is_error_result`): a row's own ``is_error``, else
    Hermes's verdict, asked only of the results the screen (:func:`maybe_error`) keeps."""
    results = pc.equal(parts.column("part_type"), "tool_result")
    said = parts.column("is_error")
    # the screen runs over the results that say nothing only
    ask = maybe_error(
        parts.column("content_text"), parts.column("tool_name"), _flat(pc.and_(results, pc.is_null(said)))
    )
    asked = parts.select(["tool_name", "content_text"]).filter(ask)  # a filter copies every column it keeps
    verdicts = [
        hermes_marks_error(tool_name, content)
        for tool_name, content in zip(asked.column("tool_name").to_pylist(), asked.column("content_text").to_pylist())
    ]
    found = pc.replace_with_mask(pa.repeat(pa.scalar(False), parts.num_rows), ask, pa.array(verdicts, pa.bool_()))
    return pc.and_(results, pc.or_(pc.fill_null(said, False), found))
