"""Content cells as text (SPEC §5.4, D2, D5).

Hermes stores list/dict content as ``"\x00json:" + JSON``: its text is the
text parts joined with newlines, and the decoded structure is kept in
``hermes_messages.content_json``. Inline ``data:`` payloads become
``<stripped>``; nothing else is trimmed. A malformed envelope keeps its raw
text and counts a ``bad_envelope``; a cell over 4 Mi characters is kept whole
and counts an ``oversized_cell`` warning.
"""

from __future__ import annotations

import re
from typing import Any

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.source.jsonutil import loads

ENVELOPE = "\x00json:"
OVERSIZED_CHARS = 4 * 1024 * 1024
COMPACT_SUMMARY_PREFIXES = ("[CONTEXT COMPACTION", "[CONTEXT SUMMARY]:")
#: Hermes 0.19 merges a summary into an existing message after this line (D2)
MERGED_SUMMARY_DELIMITER = "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]"
_DATA_URI = re.compile(r"data:([^;,\s\"']*);base64,[A-Za-z0-9+/=_-]+")

#: a content cell decoded: its text, the envelope's JSON (None: not one), the problems found
Decoded = tuple[str, Any, tuple[str, ...]]


def decode_content(
    content: object,
    tally: ErrorTally | None = None,
    scoped_sid: str | None = None,
    mid: int | None = None,
    cache: dict[int | None, Decoded] | None = None,
) -> tuple[str | None, Any]:
    """-> (content_text, decoded envelope or None). ``content_text`` is None for non-strings.

    ``cache`` (mid -> result) lets the builders of one session share each message's
    decoding; each still counts the cell's problems in its own ``tally``.
    """
    if not isinstance(content, str):
        return None, None
    found = cache.get(mid) if cache is not None else None
    if found is None:
        found = _decode(content)
        if cache is not None:
            cache[mid] = found
    text, decoded, problems = found
    if tally is not None:
        for kind in problems:
            tally.add(kind, scoped_sid, mid, "content")
    return text, decoded


def _decode(content: str) -> Decoded:
    decoded: Any = None
    problems: tuple[str, ...] = ()
    text = content
    if content.startswith(ENVELOPE):
        try:
            decoded = loads(content[len(ENVELOPE) :])
            text = _envelope_text(decoded)
        except (ValueError, RecursionError):
            decoded, problems = None, (errors.BAD_ENVELOPE,)
    if "data:" in text:
        text = _DATA_URI.sub(_strip_data, text)
    if len(content) > OVERSIZED_CHARS:
        problems += (errors.OVERSIZED_CELL,)
    return text, decoded, problems


def needs_decoding(content: str) -> bool:
    """Whether a content cell's text differs from the cell, or the cell is a problem (any other
    text cell is its own text: the builders take it as it is, without :func:`content_text`)."""
    return content.startswith(ENVELOPE) or "data:" in content or len(content) > OVERSIZED_CHARS


def content_text(
    content: object, tally: ErrorTally, scoped_sid: str, mid: int, cache: dict[int | None, Decoded] | None = None
) -> tuple[str | None, Any]:
    """:func:`decode_content` for the cells that need it; any other text is its own."""
    if isinstance(content, str) and needs_decoding(content):
        return decode_content(content, tally, scoped_sid, mid, cache)
    return (content if isinstance(content, str) else None), None


def is_compact_summary(content: object) -> bool:
    """SPEC D2, as Hermes's ``ContextCompressor._is_context_summary_content`` reads it.

    Leading whitespace is ignored; in a merged summary (text, delimiter,
    summary) only what follows the first delimiter counts; envelope content is
    read through its text parts. Every prefix holds ``[CONTEXT``, so content
    without it is rejected before any decoding.
    """
    if not isinstance(content, str) or "[CONTEXT" not in content:
        return False
    if content.startswith(ENVELOPE):
        try:
            content = _envelope_text(loads(content[len(ENVELOPE) :]))
        except (ValueError, RecursionError):
            pass  # a malformed envelope is read as its raw text, as content_text is (§5.4)
    _, merged, summary = content.partition(MERGED_SUMMARY_DELIMITER)
    return (summary if merged else content).lstrip().startswith(COMPACT_SUMMARY_PREFIXES)


def _strip_data(match: re.Match[str]) -> str:
    return f"data:{match.group(1) or 'application/octet-stream'};base64,<stripped>"


def _envelope_text(decoded: Any) -> str:
    items = decoded if isinstance(decoded, list) else [decoded]
    texts = []
    for item in items:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            if item.get("type") in (None, "text", "input_text", "output_text"):
                texts.append(item["text"])
    return "\n".join(texts)
