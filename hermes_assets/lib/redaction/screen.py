"""The one RE2 search every cell a rule could redact matches, built from the rules themselves.

The redactor screens every text cell of a column in one pass of Arrow's RE2 kernel
(:meth:`Redactor.screen_column <hermes_assets.lib.redaction.redactor.Redactor.screen_column>`);
only the cells it finds meet the rules. It is the alternation of what every match of
every rule holds, as written in the cell, whatever its encoding:

* a keyword of each maintained rule (case-insensitively, as Betterleaks screens them; a rule
  only runs on a text holding one), also as JSON escapes it (``\\/``) and percent-encoded;
* each of our formats' screen (:attr:`.rules.Pattern.screen`: a ``/`` in it also escaped);
* each form's screen of a name and its value (:attr:`.assignments.Form.screen`);
* every form of every ``.env`` value (:func:`.encodings.literal_forms`).

Each alternative is written once, and the forms' screens that begin with the name that says
secret (:data:`.assignments.SECRET_IN_NAME`) share it: the same text matches, the one program
the screen compiles to is smaller, and it builds fewer states as it reads (its first pass over a
column in a process costs about as much as its search).

Decoding a cell's escapes never makes a keyword, a prefix or a name appear that was not
written (a JSON escape or a percent-escape of a letter or a digit is legal, but no writer
makes one), so a secret found in a decoded view is always screened in.
"""

from __future__ import annotations

import bisect
from typing import Any

import pyarrow as pa

from hermes_assets.lib.redaction import encodings
from hermes_assets.lib.redaction.assignments import FORMS, SECRET_IN_NAME
from hermes_assets.lib.redaction.rule_matcher import RuleMatcher, keyword_forms, search_spans
from hermes_assets.lib.redaction.rules import PATTERNS, re2_literal

#: after an assignment-shaped rule's names, in a screen: Betterleaks's operators between what may
#: come around them (a backslash too: an escaped quote, in a cell as written)
_ASSIGNED = r"""[ \t\w.\\-]*[\s'"\\]*(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)[\x60'"\s=\\]*"""
#: the first characters of every assignment-shaped rule's value (a base64, hex, or id alphabet; an
#: escaped slash as written)
_VALUE = r"[A-Za-z0-9_+/.:=%~\\-]{8}"


def screen_parts(matcher: RuleMatcher) -> list[str]:
    """The screen's alternatives that are not ``.env`` values (no secret is in them), each once: the
    keywords (one alternative), the context rules' names and values, our formats and the forms."""
    return list(dict.fromkeys(whole for whole, _ in _alternatives(matcher)))


def hyperscan_parts(matcher: RuleMatcher) -> list[tuple[str, int | None]]:
    """:func:`screen_parts` as Hyperscan compiles them, each with the length in bytes of every match
    (None: it varies): each keyword alone (its match, a literal, is as long as it), and the context
    rules' alternative one per name (as one, it is larger than Hyperscan compiles)."""
    return list(dict.fromkeys(p for _, split in _alternatives(matcher) for p in split))


def _alternatives(matcher: RuleMatcher) -> list[tuple[str, list[tuple[str, int | None]]]]:
    """Each alternative of :func:`screen_parts`, and the same language in parts (:func:`hyperscan_parts`)."""
    keywords = sorted({f for r in matcher.rules if r.context is None for k in r.keywords for f in keyword_forms(k)})
    out: list[tuple[str, list[tuple[str, int | None]]]] = [
        (
            "(?i:" + "|".join(re2_literal(k) for k in keywords) + ")",
            [(f"(?i:{re2_literal(k)})", len(k.encode())) for k in keywords],
        )
    ]
    contexts = sorted({r.context for r in matcher.rules if r.context})
    if contexts:
        whole = "(?i:" + "|".join(contexts) + ")" + _ASSIGNED + _VALUE
        out.append((whole, [(f"(?i:{c}){_ASSIGNED}{_VALUE}", None) for c in contexts]))
    out += [(p.screen, [(p.screen, None)]) for p in PATTERNS]
    out += [(f, [(f, None)]) for f in _shared_name([f.screen for f in FORMS])]
    return out


def env_literals(values: list[str] | tuple[str, ...]) -> list[str]:
    """Every form of every ``.env`` value (:func:`.encodings.literal_forms`), the longest first."""
    return sorted({f for v in values for f in encodings.literal_forms(v)}, key=lambda f: (-len(f), f))


def screen_pattern(matcher: RuleMatcher, values: list[str] | tuple[str, ...] = ()) -> str:
    """The column screen of ``matcher``'s rules, our formats and forms, and the ``.env`` ``values``."""
    parts = screen_parts(matcher) + [re2_literal(f) for f in env_literals(values)]
    return "|".join(f"(?:{p})" for p in dict.fromkeys(parts))  # each alternative once


def _shared_name(screens: list[str]) -> list[str]:
    """The forms' ``screens``, those that begin with :data:`.assignments.SECRET_IN_NAME` as one
    alternative: the name once, then what follows it in each (the same language)."""
    named = [s for s in screens if s.startswith(SECRET_IN_NAME)]
    rests = [s[len(SECRET_IN_NAME) :] for s in named]
    if len(named) < 2 or any(not r or r[0] in "*+?{" for r in rests):  # a rest must stand on its own
        return screens
    first = screens.index(named[0])
    joined = SECRET_IN_NAME + "(?:" + "|".join(f"(?:{r})" for r in rests) + ")"
    return [s for s in screens[:first] if s not in named] + [joined] + [s for s in screens[first:] if s not in named]


def flagged(program: Any, array: pa.LargeStringArray) -> list[int]:
    """The indexes of the cells of ``array`` that ``program`` (the screen, compiled) finds: one RE2
    search over the array's data buffer as it lies in memory (its cells end to end), resumed at the
    next cell after each hit; a match that runs past its cell's end is searched again within the cell.
    A screen holds no anchor and no word boundary (:func:`screen_pattern`), so a cell's start or end
    changes nothing of what it finds."""
    if len(array) == 0 or array.null_count == len(array):
        return []
    _, offsets_buffer, data_buffer = array.buffers()
    if data_buffer is None:
        return []
    offsets = memoryview(offsets_buffer).cast("q")[array.offset : array.offset + len(array) + 1]
    data = memoryview(data_buffer)
    out: list[int] = []
    pos, end = offsets[0], offsets[len(array)]
    while pos < end:
        spans = search_spans(program, data, pos, endpos=end)
        if spans is None:
            break
        start, stop = spans[0]
        i = bisect.bisect_right(offsets, start) - 1
        cell_end = offsets[i + 1]
        if stop <= cell_end or search_spans(program, data, offsets[i], endpos=cell_end) is not None:
            out.append(i)
        pos = cell_end
    return out
