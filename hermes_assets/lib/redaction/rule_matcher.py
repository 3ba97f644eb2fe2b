"""The maintained rules compiled with RE2: which secrets a text holds, where, and by which rule.

Each rule runs only on a text holding one of its keywords (case-insensitively, as
Betterleaks does): one RE2 set of every keyword tells which, in one pass. A rule's
secret is its secret group (or its first group that matched, or the whole match);
it is kept when it passes the rule's entropy floor and allow lists and the rule
file's global ones. Where two rules find overlapping secrets, the one whose
keyword is longest wins (``sk-ant-api03`` before ``sk-``), then the longer secret:
the most specific kind names the secret, wherever it appears.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass

import re2  # type: ignore[import-untyped]

from hermes_assets.lib.redaction.rule_set import Rule, RuleSet


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # nothing on the console (a DFA out of memory falls back to the NFA, silently)
    options.max_mem = 64 << 20
    return options


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
    """The rules of a :class:`RuleSet`, compiled; :meth:`findings` of a text."""

    def __init__(self, rule_set: RuleSet) -> None:
        options = _options()
        self.rule_set = rule_set
        self.rules: list[Rule] = []
        self._compiled: list = []
        self._allowed: list = []
        self.uncompiled: list[str] = []
        global_allowed = tuple(_compile_all(rule_set.allow_regexes, options))
        for rule in rule_set.rules:
            try:
                compiled = re2.compile(rule.regex, options)
                # the rule's allowed values and the file's, as one search
                allowed = _one_of([*rule.allow_regexes, *(a.pattern for a in global_allowed)], options)
            except re2.error:
                self.uncompiled.append(rule.id)
                continue
            self.rules.append(rule)
            self._compiled.append(compiled)
            self._allowed.append(allowed)
        self.keywords: tuple[str, ...] = tuple(sorted({k for r in self.rules for k in r.keywords}))
        index = {k: i for i, k in enumerate(self.keywords)}
        self._by_keyword: list[list[int]] = [[] for _ in self.keywords]
        for i, rule in enumerate(self.rules):
            for k in rule.keywords:
                self._by_keyword[index[k]].append(i)
        self._set = re2.Set.SearchSet(options)
        for k in self.keywords:
            self._set.Add(re2.escape(k))
        self._set.Compile()

    def __reduce__(self):  # rebuilt where it is used: the rule set travels, not the compiled programs
        return (RuleMatcher, (self.rule_set,))

    def candidates(self, text: str) -> list[tuple[int, int]]:
        """``(rule index, keyword length)`` of the rules a text may match (it holds one of their keywords)."""
        found: dict[int, int] = {}
        for k in self._set.Match(text.lower()) or ():
            for i in self._by_keyword[k]:
                found[i] = max(found.get(i, 0), len(self.keywords[k]))
        return sorted(found.items())

    def findings(self, text: str) -> list[Finding]:
        """Every secret the rules find in ``text``, overlaps resolved, in order."""
        out: list[Finding] = []
        for i, weight in self.candidates(text):
            rule, compiled = self.rules[i], self._compiled[i]
            for m in compiled.finditer(text):
                span = _secret_span(m, rule.secret_group)
                if span is None:
                    continue
                secret = text[span[0] : span[1]]
                if secret and self._kept(i, secret):
                    out.append(Finding(span[0], span[1], rule, secret, weight))
        return _resolve(out)

    def kind_of(self, value: str) -> str | None:
        """The kind of the most specific rule that finds ``value`` whole (None: none does)."""
        for f in self.findings(value):
            if f.start == 0 and f.end == len(value):
                return f.rule.kind
        return None

    def _kept(self, i: int, secret: str) -> bool:
        rule = self.rules[i]
        if rule.entropy:
            e = shannon_entropy(secret)
            if e < rule.entropy or (e == rule.entropy and not rule.entropy_inclusive):
                return False
        if any(s in secret for s in rule.allow_substrings) or any(s in secret for s in self.rule_set.allow_substrings):
            return False
        allowed = self._allowed[i]
        return allowed is None or allowed.search(secret) is None


def _one_of(patterns: list[str], options: re2.Options) -> re2._Regexp | None:
    """One RE2 search for any of ``patterns`` (None: no pattern)."""
    return re2.compile("|".join(f"(?:{p})" for p in patterns), options) if patterns else None


def _compile_all(patterns: tuple[str, ...], options: re2.Options) -> list:
    out = []
    for p in patterns:
        try:
            out.append(re2.compile(p, options))
        except re2.error:
            continue
    return out


def _secret_span(m: re2._Match, group: int) -> tuple[int, int] | None:
    """The span of a match's secret: its ``group``; else its first group that matched; else the match."""
    if group:
        try:
            start, end = m.span(group)
        except (IndexError, re2.error):
            return None
        return (start, end) if start >= 0 else None
    for g in range(1, m.re.groups + 1):
        start, end = m.span(g)
        if start >= 0 and end > start:
            return start, end
    return m.span(0)


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
