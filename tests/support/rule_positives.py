"""Positives built at run time from a rule's own regex: a text each rule finds (never committed).

:func:`positive` walks the regex's syntax tree (Python's parser, after
:func:`~hermes_assets.lib.redaction.go_regex.translate`) and
draws characters from each class, repetitions a few times past their minimum,
one branch of each alternation; lookarounds and anchors are left to the check
that follows: a drawn text counts only when the rule's compiled RE2 program finds
it. Characters are drawn from ``rng``, so a property test's examples vary.
"""

from __future__ import annotations

import random
import re._constants as C
import re._parser as sre
import string

from hermes_assets.lib.redaction.go_regex import translate

_PRINTABLE = string.ascii_letters + string.digits
_CATEGORY = {
    C.CATEGORY_DIGIT: string.digits,
    C.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    C.CATEGORY_SPACE: " ",
    C.CATEGORY_NOT_SPACE: _PRINTABLE,
    C.CATEGORY_NOT_DIGIT: string.ascii_letters,
    C.CATEGORY_NOT_WORD: " ",
}


def positive(regex: str, rng: random.Random, extra: int = 3) -> str:
    """A text drawn from ``regex`` (repetitions between their minimum and ``extra`` more)."""
    out: list[str] = []
    groups: dict[int, str] = {}

    def draw(items) -> None:
        for op, av in items:
            if op == C.LITERAL:
                out.append(chr(av))
            elif op == C.NOT_LITERAL:
                out.append(rng.choice([c for c in _PRINTABLE if ord(c) != av]))
            elif op == C.ANY:
                out.append(rng.choice(_PRINTABLE))
            elif op == C.IN:
                out.append(_pick(av, rng))
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
                low, high, sub = av
                high = low + extra if high == C.MAXREPEAT else min(high, low + extra)
                for _ in range(rng.randint(low, max(low, high))):
                    draw(sub)
            elif op == C.SUBPATTERN:
                gid, _, _, sub = av
                start = len("".join(out))
                draw(sub)
                if gid:
                    groups[gid] = "".join(out)[start:]
            elif op == C.BRANCH:
                draw(rng.choice(av[1]))
            elif op == C.GROUPREF:
                out.append(groups.get(av, ""))
            elif op == C.CATEGORY:
                out.append(rng.choice(_CATEGORY[av]))
            elif op in (C.AT, C.ASSERT, C.ASSERT_NOT):
                continue
            else:
                raise ValueError(f"cannot draw {op}")

    draw(sre.parse(translate(regex)))
    return "".join(out)


def _pick(items, rng: random.Random) -> str:
    negate = any(op == C.NEGATE for op, _ in items)
    chars: set[str] = set()
    for op, av in items:
        if op == C.LITERAL:
            chars.add(chr(av))
        elif op == C.RANGE:
            chars.update(chr(x) for x in range(av[0], min(av[1], 0x7E) + 1))
        elif op == C.CATEGORY:
            chars.update(_CATEGORY[av])
    if negate:
        return rng.choice([c for c in _PRINTABLE if c not in chars] or ["~"])
    pool = sorted(c for c in chars if c.isprintable() and c not in "\r\x0b\x0c") or sorted(chars)
    return rng.choice(pool)
