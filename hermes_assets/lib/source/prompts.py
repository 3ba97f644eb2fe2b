"""System prompts stored once (SPEC D19, Hermes schema 25+).

Since schema 25 Hermes keeps each distinct prompt once, in
``system_prompts(hash, prompt)``, writes ``sessions.system_prompt`` as NULL and
names the row in ``sessions.system_prompt_hash`` (its migration 25 moves the
old inline prompts there). A session's prompt is its own ``system_prompt``
when that is non-empty, else the ``prompt`` of its hash: so a session reads the
same before and after its store is upgraded. A hash that names no row gives a
NULL prompt, and the session is reported (``system_prompt_missing``).

``tool_names`` (schema 31) goes through the same table: Hermes stores a
session's ``tools[]`` pin there too and keeps its hash in the column (legacy
rows: an inline JSON name list). It reads as Hermes's ``get_session`` shows it:
the pin when the hash names a row, else the cell as stored.

The rows are fetched by the reader inside the day's read transaction, one
statement per chunk of sessions, for the hashes the chunk's sessions name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

TABLE = "system_prompts"
HASH_COLUMN = "system_prompt_hash"
#: Hermes's content hash (sha256, lowercase hex): what a ``tool_names`` cell holds when it names a row
_HASH = re.compile(r"[0-9a-f]{64}")


def _inline_empty(session: dict) -> bool:
    prompt = session.get("system_prompt")
    return not (isinstance(prompt, str) and prompt)


def wanted(sessions: list[dict]) -> list[str]:
    """The ``system_prompts`` hashes these sessions need (each once, in a stable order)."""
    hashes: dict[str, None] = {}
    for session in sessions:
        prompt_hash = session.get(HASH_COLUMN)
        if isinstance(prompt_hash, str) and prompt_hash and _inline_empty(session):
            hashes[prompt_hash] = None
        tools = session.get("tool_names")
        if isinstance(tools, str) and _HASH.fullmatch(tools):
            hashes[tools] = None
    return list(hashes)


def resolve(sessions: list[dict], prompts: dict[str, str]) -> list[str]:
    """Put each session's prompt (and tool pin) in place, from ``prompts`` (hash -> text);
    -> the ids of the sessions whose ``system_prompt_hash`` named no row."""
    missing = []
    for session in sessions:
        if _inline_empty(session):
            prompt_hash = session.get(HASH_COLUMN)
            if isinstance(prompt_hash, str) and prompt_hash:
                session["system_prompt"] = prompts.get(prompt_hash)
                if session["system_prompt"] is None:
                    missing.append(str(session["id"]))
        tools = session.get("tool_names")
        if isinstance(tools, str) and tools in prompts:
            session["tool_names"] = prompts[tools]
    return missing


def resolve_from(
    sessions: list[dict], query: Callable[[str, list[str]], Iterable[tuple]], *, has_table: bool
) -> set[str]:
    """:func:`resolve` with the rows fetched by ``query(sql, params)`` (the reader's, inside the
    day's read transaction): one statement for the hashes these sessions name.
    -> the sids whose ``system_prompt_hash`` named no row."""
    hashes = wanted(sessions)
    found: dict[str, str] = {}
    if hashes and has_table:
        found = dict(query(f"SELECT hash, prompt FROM {TABLE} WHERE hash IN ({','.join('?' * len(hashes))})", hashes))
    return set(resolve(sessions, found))
