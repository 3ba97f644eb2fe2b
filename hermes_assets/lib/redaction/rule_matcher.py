"""The maintained rules compiled with RE2: which secrets a text holds, where, and by which rule.

Each rule runs only on a text holding one of its keywords (case-insensitively, as
Betterleaks does): one RE2 set of every keyword tells which, in one pass. A rule's
regex is compiled the first time a text holds one of its keywords (a process meets
a few dozen of the rules, and compiling all of them would cost more than running
them). A rule's secret is its secret group (or its first group that matched, or
the whole match); it is kept when it passes the rule's entropy floor and allow
lists and the rule file's global ones. Where two rules find overlapping secrets,
the one whose keyword is longest wins (``sk-ant-api03`` before ``sk-``), then the
longer secret: the most specific kind names the secret, wherever it appears.

Texts are searched as UTF-8 bytes (:meth:`RuleMatcher.findings_in`): the offsets of
a finding are byte offsets; :meth:`RuleMatcher.findings` takes and gives ``str``.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import re2  # type: ignore[import-untyped]

from hermes_assets.lib.redaction import encodings
from hermes_assets.lib.redaction.rule_set import Rule, RuleSet

#: a rule's matches its filter lets pass are searched again from their next character for at most
#: this many times the text's length (linear on hostile text)
RETRY_BUDGET = 4


def keyword_forms(keyword: str) -> set[str]:
    """A rule's keyword as a cell may write it (lower-case: keywords are matched without case)."""
    return {f.lower() for f in encodings.json_forms(keyword) | encodings.url_forms(keyword)}


def re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # nothing on the console (a DFA out of memory falls back to the NFA, silently)
    options.max_mem = 64 << 20
    return options


#: google-re2's one call that searches and gives every group's span (its ``search`` and ``finditer``
#: wrap it in a match object per result: twice the time per match on a cell of many candidates)
_UNANCHORED = re2._Anchor.UNANCHORED
_ANCHORED = re2._Anchor.ANCHOR_START


def search_spans(
    regex: Any, data: Any, pos: int = 0, *, anchored: bool = False, endpos: int | None = None
) -> list[tuple[int, int]] | None:
    """The spans of ``regex``'s first match in the bytes ``data`` (or any buffer) from ``pos`` (to
    ``endpos``): the whole match first, then each group's, ``(-1, -1)`` for a group that did not
    match; None: no match."""
    end = len(data) if endpos is None else endpos
    spans = regex._regexp.Match(_ANCHORED if anchored else _UNANCHORED, data, pos, end)
    return None if spans[0][0] < 0 else spans


def all_spans(regex: Any, data: bytes) -> list[list[tuple[int, int]]]:
    """The spans of every match of ``regex`` in ``data``, as :func:`search_spans` gives them
    (``finditer``'s matches, without a match object each)."""
    out = []
    pos, end = 0, len(data)
    match = regex._regexp.Match
    while pos <= end:
        spans = match(_UNANCHORED, data, pos, end)
        if spans[0][0] < 0:
            break
        out.append(spans)
        pos = spans[0][1] if spans[0][1] > pos else pos + 1
    return out


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value`` (what a rule's entropy floor measures)."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


@dataclass(frozen=True)
class Finding:
    start: int
    end: int
    rule: Rule
    secret: str
    #: how specific the rule is: the length of its longest keyword the text holds
    weight: int


class RuleMatcher:
    """The rules of a :class:`RuleSet`; :meth:`findings` of a text."""

    def __init__(self, rule_set: RuleSet) -> None:
        self.rule_set = rule_set
        self.rules: list[Rule] = list(rule_set.rules)
        #: each rule's program and allow list, compiled on first use (False: RE2 refused it)
        self._programs: list[tuple | bool | None] = [None] * len(self.rules)
        self._global_allowed: tuple | None = None
        self.uncompiled: list[str] = []
        self.keywords: tuple[str, ...] = tuple(sorted({k for r in self.rules for k in r.keywords}))
        by_keyword: dict[str, list[int]] = {k: [] for k in self.keywords}
        for i, rule in enumerate(self.rules):
            for k in rule.keywords:
                by_keyword[k].append(i)
        self._by_keyword = by_keyword

    @cached_property
    def _keyword_set(self) -> tuple[Any, list[str]]:
        """One RE2 set of each keyword as a cell may write it (JSON-escaped, percent-encoded), and the
        keyword each is (built when a first text is searched)."""
        forms = sorted({(f, k) for k in self.keywords for f in keyword_forms(k)})
        found = re2.Set.SearchSet(re2_options())
        for f, _ in forms:
            found.Add(re2.escape(f.encode("utf-8", "surrogatepass")))
        found.Compile()
        return found, [k for _, k in forms]

    def __reduce__(self):  # rebuilt where it is used: the rule set travels, not the compiled programs
        return (RuleMatcher, (self.rule_set,))

    def candidates(self, text: str | bytes) -> list[tuple[int, int]]:
        """``(rule index, keyword length)`` of the rules a text may match (it holds one of their keywords)."""
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        keyword_set, keyword_of = self._keyword_set
        found: dict[int, int] = {}
        for f in keyword_set.Match(data.lower()) or ():
            keyword = keyword_of[f]
            for i in self._by_keyword[keyword]:
                found[i] = max(found.get(i, 0), len(keyword))
        return sorted(found.items())

    def findings(self, text: str) -> list[Finding]:
        """Every secret the rules find in ``text``, overlaps resolved, in order (offsets in ``text``)."""
        data = text.encode("utf-8", "surrogatepass")
        found = self.findings_in(data)
        if data.isascii():
            return found
        return [_in_text(data, f) for f in found]

    def findings_in(
        self, data: bytes, candidates: list[tuple[int, int]] | None = None, *, resolve: bool = True
    ) -> list[Finding]:
        """Every secret the rules find in the UTF-8 ``data``, overlaps resolved (``resolve``; else every
        finding, for the caller to join), in order (byte offsets); ``candidates``: the rules to run
        (:meth:`candidates`, of this text or of the text it decodes)."""
        out: list[Finding] = []
        for i, weight in self.candidates(data) if candidates is None else candidates:
            program = self._program(i)
            if program is None:
                continue
            out += self._rule_findings(data, i, weight, *program)
        return _resolve(out) if resolve else out

    def _rule_findings(self, data: bytes, i: int, weight: int, regex: Any, allowed: Any) -> list[Finding]:
        """The secrets rule ``i`` finds in ``data``. A match its filter lets pass is searched again from
        its next character (a PEM header with no key up to a later block's footer hides no block),
        within :data:`RETRY_BUDGET` times the text's length; then matches only follow each other."""
        rule = self.rules[i]
        kept: dict[str, bool] = {}
        out: list[Finding] = []
        pos, size, budget = 0, len(data), RETRY_BUDGET * len(data)
        while pos <= size:
            spans = search_spans(regex, data, pos)
            if spans is None:
                break
            start, end = spans[0]
            span = _secret_span(spans, rule.secret_group)
            ok = False
            if span is not None and span[1] > span[0]:
                secret = data[span[0] : span[1]].decode("utf-8", "surrogatepass")
                known = kept.get(secret)
                ok = known if known is not None else kept.setdefault(secret, self._kept(rule, allowed, secret))
                if ok:
                    out.append(Finding(span[0], span[1], rule, secret, weight))
            if ok or budget <= 0:
                pos = end if end > pos else pos + 1
            else:
                budget -= end - start
                pos = start + 1
        return out

    def kind_of(self, value: str) -> str | None:
        """The kind of the most specific rule that finds ``value`` whole (None: none does)."""
        data = value.encode("utf-8", "surrogatepass")
        for f in self.findings_in(data):
            if f.start == 0 and f.end == len(data):
                return f.rule.kind
        return None

    def _program(self, i: int) -> tuple | None:
        program: tuple | bool | None = self._programs[i]
        if program is None:
            rule = self.rules[i]
            options = re2_options()
            try:
                regex = re2.compile(rule.regex, options)
                # the rule's own allowed values (the file's are one program for every rule: :meth:`_global`)
                allowed = _one_of(list(rule.allow_regexes), options)
            except re2.error:
                self.uncompiled.append(rule.id)
                program = self._programs[i] = False
            else:
                program = self._programs[i] = (regex, allowed)
        return program if isinstance(program, tuple) else None

    def _global(self) -> tuple:
        """The rule file's allowed values that RE2 compiles, compiled once for every rule: one search
        (each on its own if their alternation is too large)."""
        if self._global_allowed is None:
            kept = []
            for p in self.rule_set.allow_regexes:
                try:
                    kept.append(re2.compile(p, re2_options()))
                except re2.error:
                    continue
            try:
                joined = _one_of([k.pattern for k in kept], re2_options())
            except re2.error:
                self._global_allowed = tuple(kept)
            else:
                self._global_allowed = () if joined is None else (joined,)
        return self._global_allowed

    def _kept(self, rule: Rule, allowed: Any, secret: str) -> bool:
        if rule.entropy:
            e = shannon_entropy(secret)
            if e < rule.entropy or (e == rule.entropy and not rule.entropy_inclusive):
                return False
        if any(s in secret for s in rule.allow_substrings) or any(s in secret for s in self.rule_set.allow_substrings):
            return False
        if allowed is not None and allowed.search(secret) is not None:
            return False
        return all(g.search(secret) is None for g in self._global())


def _in_text(data: bytes, f: Finding) -> Finding:
    """A finding at byte offsets, at the offsets of the text ``data`` encodes."""
    start = len(data[: f.start].decode("utf-8", "surrogatepass"))
    return Finding(start, start + len(f.secret), f.rule, f.secret, f.weight)


def _one_of(patterns: list[str], options: re2.Options) -> Any:
    """One RE2 search for any of ``patterns`` (None: no pattern)."""
    return re2.compile("|".join(f"(?:{p})" for p in patterns), options) if patterns else None


def _secret_span(spans: list[tuple[int, int]], group: int) -> tuple[int, int] | None:
    """The span of a match's secret: its ``group``; else its first group that matched; else the match."""
    if group:
        if group >= len(spans):
            return None
        start, end = spans[group]
        return (start, end) if start >= 0 else None
    for start, end in spans[1:]:
        if start >= 0 and end > start:
            return start, end
    return spans[0]


def _resolve(found: list[Finding]) -> list[Finding]:
    """No two findings overlap: the most specific rule (longest keyword), then the longest secret,
    wins (each candidate checked against its chosen neighbours only: n log n)."""
    starts: list[int] = []
    chosen: list[Finding] = []
    for f in sorted(found, key=lambda f: (-f.weight, -(f.end - f.start), f.start, f.rule.id)):
        k = bisect.bisect_left(starts, f.start)
        if k > 0 and chosen[k - 1].end > f.start:
            continue
        if k < len(chosen) and chosen[k].start < f.end:
            continue
        starts.insert(k, f.start)
        chosen.insert(k, f)
    return chosen
