"""Betterleaks's regexes (Go's RE2 syntax) read with Python's parser: what a rule's names can be.

:func:`translate` turns the syntax Python's parser does not read into what it does
(inline flags dropped, ``\\z``, POSIX classes), for reading a regex's shape only: what
is read from the parse never depends on case. :func:`shortest_match` is the length of
the shortest text a regex matches (a rule whose names group can be two letters is
screened by its keywords: :mod:`.rule_set`).
"""

from __future__ import annotations

import re
import re._parser as sre  # type: ignore[import-not-found]

_POSIX = {
    "alnum": "A-Za-z0-9",
    "alpha": "A-Za-z",
    "digit": "0-9",
    "xdigit": "0-9A-Fa-f",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r" \t",
    "punct": r"!-/:-@\[-`{-~",
    "word": r"\w",
}


def translate(regex: str) -> str:
    """Go's RE2 syntax as Python's parser reads it (inline flags dropped)."""
    regex = regex.replace(r"\z", r"\Z")
    regex = re.sub(r"\(\?[imsU-]+\)", "", regex)
    regex = re.sub(r"\(\?-?[imsU]+:", "(?:", regex)
    for name, cls in _POSIX.items():
        regex = regex.replace(f"[:{name}:]", cls)
    return regex.replace(r"\x60", "`")


def shortest_match(regex: str) -> int:
    """The length of the shortest text ``regex`` matches (0 when it cannot be read)."""
    try:
        return int(sre.parse(translate(regex)).getwidth()[0])
    except (re.error, ValueError, OverflowError, RecursionError):
        return 0
