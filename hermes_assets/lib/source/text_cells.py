"""TEXT cells decoded one by one (SPEC §1 "Text").

SQLite's C path decodes a statement's TEXT cells fast, but Python's default
text factory fails the whole batch on one cell that is not valid UTF-8. The
connection reads with that fast path and, when a statement fails to decode,
runs it again with :func:`decode_text`, which repairs the bad cells (U+FFFD)
and marks them :class:`BadText`, so the reader can count each one where it
lands (``bad_text``) and one bad cell never sinks a batch.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, TypeVar, overload

T = TypeVar("T")


class Undecodable(Exception):
    """A fetched TEXT cell is not valid UTF-8 (internal: triggers the per-cell re-read)."""


class BadText(str):
    """A TEXT cell that was not valid UTF-8, decoded with U+FFFD replacements."""

    __slots__ = ()


#: how many cells failed strict UTF-8 in this process (cheap "did anything go wrong" probe)
_BAD_TEXT_SEEN = [0]


def decode_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        _BAD_TEXT_SEEN[0] += 1
        return BadText(raw.decode("utf-8", "replace"))


def text_or_none(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def bad_text_count() -> int:
    return _BAD_TEXT_SEEN[0]


def bad_cells(
    sessions: list[tuple],
    messages: list[tuple],
    resolved: dict[str, dict],
    selected: dict[str, list[str]],
    unknown: dict[str, list[str]],
) -> dict[str, list]:
    """``sid -> [(table, column, mid)]`` of the cells :func:`decode_text` had to repair
    (``resolved``: the session rows with their prompts in place, D19)."""
    out: dict[str, list] = defaultdict(list)
    s_names = selected["sessions"] + unknown["sessions"]
    for row in sessions:
        for name, value in zip(s_names, row):
            if type(value) is BadText:
                out[str(row[0])].append(("sessions", name, None))
        prompt = resolved[str(row[0])]["system_prompt"]
        if type(prompt) is BadText and prompt is not row[s_names.index("system_prompt")]:
            out[str(row[0])].append(("sessions", "system_prompt", None))
    m_names = selected["messages"] + unknown["messages"]
    for row in messages:
        for name, value in zip(m_names, row):
            if type(value) is BadText:
                out[str(row[1])].append(("messages", name, row[0]))
    return out


@overload
def as_text(value: bytes) -> str: ...
@overload
def as_text(value: T) -> T: ...
def as_text(value: Any) -> Any:
    """A cell fetched as bytes, as the reader sees it (decoded, bad bytes replaced); other cells as they are."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
