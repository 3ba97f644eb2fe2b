"""What every match of a rule's regex holds: a cheap RE2 search derived from the regex itself.

A Betterleaks rule runs on a text holding one of its keywords; many keywords are
common words in a transcript (``curl``, ``discord``, ``telegram``, ``test_``, ``cs_``).
:func:`necessary` reads a rule's regex (Go's RE2 syntax, through Python's parser
after :func:`translate`) and writes a search every match of it passes: the regex's
beginning (its letters in either case: wider than the rule), with each repetition ``x{m,n}`` as ``x{m}x*``, up to
its first run of at least :data:`RUN` characters (a secret's body), which it keeps as
``x{RUN}``; a construct it cannot write ends it there (what comes before is still
necessary). The redactor's second screen (:mod:`.screen`) is built from these: a text
holding a rule's keyword meets the rule only when it also passes this search.
"""

from __future__ import annotations

import re
import re._constants as C  # type: ignore[import-not-found]
import re._parser as sre  # type: ignore[import-not-found]
from typing import Any

#: the body of a secret the search keeps: this many characters of its first long run
RUN = 8
#: the longest search written (a longer one is cut at the item that reached it)
_MAX = 600

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
_CATEGORY = {
    C.CATEGORY_DIGIT: r"\d",
    C.CATEGORY_NOT_DIGIT: r"\D",
    C.CATEGORY_SPACE: r"\s",
    C.CATEGORY_NOT_SPACE: r"\S",
    C.CATEGORY_WORD: r"\w",
    C.CATEGORY_NOT_WORD: r"\W",
}


def translate(regex: str) -> str:
    """Go's RE2 syntax as Python's parser reads it (inline flags dropped: what is read from the parse
    is case-insensitive anyway)."""
    regex = regex.replace(r"\z", r"\Z")
    regex = re.sub(r"\(\?[imsU-]+\)", "", regex)
    regex = re.sub(r"\(\?-?[imsU]+:", "(?:", regex)
    for name, cls in _POSIX.items():
        regex = regex.replace(f"[:{name}:]", cls)
    return regex.replace(r"\x60", "`")


def _char(code: int) -> str:
    c = chr(code)
    return c if c.isalnum() and c.isascii() else f"\\x{{{code:x}}}"


def _class(items: Any) -> str:
    negate, parts = "", []
    for op, av in items:
        if op == C.NEGATE:
            negate = "^"
        elif op == C.LITERAL:
            parts.append(_char(av))
        elif op == C.RANGE:
            parts.append(f"{_char(av[0])}-{_char(av[1])}")
        elif op == C.CATEGORY:
            parts.append(_CATEGORY[av])
        else:
            raise ValueError(op)
    return f"[{negate}{''.join(parts)}]"


class _Stop(Exception):
    """The search ends here (what was written before it is necessary)."""


def _write(items: Any, out: list[str]) -> bool:
    """Write ``items`` (a parsed sequence) to ``out``; True: stopped (a long run kept, or a construct
    that cannot be written)."""
    for op, av in items:
        if sum(map(len, out)) > _MAX:
            return True
        if op == C.LITERAL:
            out.append(f"(?i:{_char(av)})")
        elif op == C.NOT_LITERAL:
            out.append(f"[^{_char(av)}]")
        elif op == C.ANY:
            out.append(r"[\s\S]")
        elif op == C.IN:
            negated = any(o == C.NEGATE for o, _ in av)
            out.append(_class(av) if negated else f"(?i:{_class(av)})")
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            low, high, sub = av
            one: list[str] = []
            stopped = _write(sub, one)
            unit = f"(?:{''.join(one)})"
            if stopped:  # the unit itself ends the search
                if low:
                    out.append(unit)
                return True
            if low >= RUN:
                out.append(f"{unit}{{{RUN}}}")
                return True
            if low:
                out.append(f"{unit}{{{low}}}")
            if high != low:
                out.append(f"{unit}*")
        elif op == C.SUBPATTERN:
            inner: list[str] = []
            stopped = _write(av[3], inner)
            out.append(f"(?:{''.join(inner)})")
            if stopped:
                return True
        elif op == C.BRANCH:
            branches, stopped = [], False
            for b in av[1]:
                one = []
                stopped |= _write(b, one)
                branches.append("".join(one))
            out.append(f"(?:{'|'.join(branches)})")
            if stopped:
                return True
        elif op == C.AT:
            continue
        else:
            raise _Stop
    return False


def necessary(regex: str) -> str | None:
    """A search every match of ``regex`` passes, as :mod:`this module <.rule_screens>` writes it
    (None: it cannot be read; the rule's keywords are its screen)."""
    try:
        parsed = sre.parse(translate(regex))
    except (re.error, ValueError, OverflowError, RecursionError):
        return None
    out: list[str] = []
    try:
        _write(parsed.data, out)
    except (_Stop, ValueError, KeyError):
        pass
    written = "".join(out)
    return written or None


def shortest_match(regex: str) -> int:
    """The length of the shortest text ``regex`` matches (0 when it cannot be read)."""
    try:
        return int(sre.parse(translate(regex)).getwidth()[0])
    except (re.error, ValueError, OverflowError, RecursionError):
        return 0
