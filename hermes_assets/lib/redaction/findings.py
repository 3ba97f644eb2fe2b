"""Every secret of one cell's text, as written: where it is, what it is, found every way.

:class:`CellFinder` searches a cell's UTF-8 bytes, and each decoded view of them
(:mod:`.encodings`: JSON escapes once and twice, percent-escapes), with:

* the maintained rules (:mod:`.rule_matcher`), each on a text holding one of its keywords;
* our formats (:data:`.rules.PATTERNS`), the forms of a name and its value
  (:data:`.assignments.FORMS`) and the values of Hermes's ``.env`` files in every form they
  take (:func:`.encodings.literal_forms`), each on a text its screen finds: one RE2 set
  says which (:attr:`CellFinder.dispatch`).

A secret found in a decoded view is redacted where it is written in the cell
(:meth:`.encodings.View.written_at`). Overlapping findings are one secret (their union);
a marker already in the text is never inside one. The cell is never parsed: what is
around a secret stays byte for byte.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import re2  # type: ignore[import-untyped]

from hermes_assets.lib.redaction import encodings
from hermes_assets.lib.redaction.assignments import FORMS
from hermes_assets.lib.redaction.private_keys import GAP
from hermes_assets.lib.redaction.rule_matcher import RuleMatcher, all_spans, re2_options
from hermes_assets.lib.redaction.rules import MARKER_PREFIX, PATTERNS, re2_literal

#: a marker written before: never a secret, never inside one
MARKER = re2.compile(rb"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]", re2_options())

#: how surely a finding names its secret, best first: a maintained rule, one of our formats,
#: a ``.env`` value, the value of a name that says secret
MAINTAINED, OURS, ENV, ASSIGNED = range(4)


@dataclass(frozen=True, slots=True)
class Span:
    """A secret of a cell: its byte span as written, the secret itself (decoded), the kind it was
    found as, the provider's literal prefix (``""``: none), and how surely (:data:`MAINTAINED` ...)."""

    start: int
    end: int
    secret: str
    found_as: str
    prefix: str
    rank: int
    #: the decoded view it was found in (:attr:`.encodings.View.lineage`; ``()``: the text as written)
    lineage: tuple[str, ...] = ()
    #: for a maintained rule's finding, how specific the rule is (its longest keyword the text holds)
    weight: int = 0
    #: for a maintained rule's finding, the rule's keywords (its :attr:`provider_prefix` is one)
    keywords: tuple[str, ...] = ()

    @property
    def depth(self) -> int:
        """How many decodings part the text it was found in from the text as written."""
        return len(self.lineage)

    @property
    def provider_prefix(self) -> str:
        """The provider's literal prefix the secret starts with (``""``: none)."""
        if self.prefix or not self.keywords:
            return self.prefix
        low = self.secret.lower()
        return next((self.secret[: len(k)] for k in self.keywords if low.startswith(k)), "")


class CellFinder:
    """The secrets of one cell's text, for one set of rules and ``.env`` values."""

    def __init__(self, matcher: RuleMatcher, values: list[str]) -> None:
        self.matcher = matcher
        literals: dict[str, str] = {}
        for value in values:
            for form, plain in encodings.literal_forms(value).items():
                literals.setdefault(form, plain)
        #: every form of a ``.env`` value -> the value
        self.literals = literals
        screens = [p.screen for p in PATTERNS] + [f.screen for f in FORMS]
        self._env = None
        if literals:
            ordered = sorted(literals, key=lambda f: (-len(f), f))  # a form never shadows a longer one
            alternation = "|".join(re2_literal(f) for f in ordered)
            screens.append(alternation)
            self._env = re2.compile(f"({alternation})".encode(), re2_options())
        #: the dispatch indexes of our formats that a JSON escape can break (they read ``/``)
        self._decoded = frozenset(i for i, p in enumerate(PATTERNS) if p.decoded)
        self.dispatch = re2.Set.SearchSet(re2_options())
        for screen in screens:
            self.dispatch.Add(screen.encode())
        self.dispatch.Compile()

    def spans(self, data: bytes) -> list[Span]:
        """The secrets of the UTF-8 text ``data``, in order, none overlapping another or a marker."""
        candidates = self.matcher.candidates(data)
        hits = self.dispatch.Match(data) or []
        if not candidates and not hits:
            return []
        found = self._in(data, candidates, hits)
        # a decoded view holds the maintained rules' keywords its text as written holds (their encoded
        # forms are keywords too: :mod:`.screen`), so the same rules are the ones to run on it
        # JSON escapes are decoded where they may hide a secret: for the maintained rules (whose classes
        # read quotes and backslashes as written), for our formats that read ``/``, or where an escape
        # stands for a secret's character (a newline, a tab, a quote only ever end a secret)
        json = (
            bool(candidates) or bool(self._decoded.intersection(hits)) or encodings.DEEP_ESCAPE.search(data) is not None
        )
        for view in encodings.views(data, json=json):
            # our screens read a view as decoded (a percent-encoded command's spaces are spaces there)
            in_view = self._in(view.data, candidates, self.dispatch.Match(view.data) or [])
            if in_view:
                found += _written(view, in_view)
        if not found:
            return []
        found = _decoded_first(found)
        markers = [m[0] for m in all_spans(MARKER, data)] if MARKER_PREFIX.encode() in data else []
        return _union(data, [s for s in found if not _overlaps(markers, s.start, s.end)])

    def _in(self, data: bytes, candidates: list[tuple[int, int]], hits: list[int]) -> list[Span]:
        """The secrets of one view (offsets in it): the ``candidates`` maintained rules, and the
        patterns, forms and ``.env`` values of the dispatch's ``hits``."""
        out: list[Span] = []
        if candidates:
            for f in self.matcher.findings_in(data, candidates, resolve=False):
                out.append(Span(f.start, f.end, f.secret, f.rule.kind, "", MAINTAINED, (), f.weight, f.rule.keywords))
        n_patterns, n_forms = len(PATTERNS), len(FORMS)
        for i in hits:
            if i < n_patterns:
                p = PATTERNS[i]
                for start, end in p.spans(data):
                    secret = _text(data, start, end)
                    out.append(Span(start, end, secret, p.kind, p.prefix_of(secret), OURS))
            elif i < n_patterns + n_forms:
                for start, end in FORMS[i - n_patterns].spans(data):
                    out.append(Span(start, end, _text(data, start, end), "secret_assignment", "", ASSIGNED))
            elif self._env is not None:
                out += self._env_values(data)
        return out

    def our_kind(self, secret: str) -> str | None:
        """The kind of the first of our formats that finds ``secret`` whole (None: none does)."""
        data = secret.encode("utf-8", "surrogatepass")
        for i in sorted(self.dispatch.Match(data) or ()):
            if i < len(PATTERNS) and PATTERNS[i].spans(data) == [(0, len(data))]:
                return PATTERNS[i].kind
        return None

    def _env_values(self, data: bytes) -> list[Span]:
        out = []
        for _, (start, end) in all_spans(self._env, data):
            form = _text(data, start, end)
            value = self.literals[form]
            if form == value and not _whole(data, start, end):
                continue  # a value inside a longer word is another word
            out.append(Span(start, end, value, "hermes_env", "", ENV))
        return out


def _text(data: bytes, start: int, end: int) -> str:
    return data[start:end].decode("utf-8", "surrogatepass")


#: a percent-escape ends a word before it (``k%3Dvalue``: a value percent-encoded twice, decoded once)
_ESCAPE_BEFORE = re2.compile(rb"%[0-9A-Fa-f]{2}$", re2_options())


def _whole(data: bytes, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is not inside a longer word (letters and digits)."""
    if start >= 3 and _ESCAPE_BEFORE.search(data[start - 3 : start]):
        start_ok = True
    else:
        before = data[start - 1 : start] if start else b""
        start_ok = not (before.isalnum() and data[start : start + 1].isalnum())
    after = data[end : end + 1]
    return start_ok and not (after.isalnum() and data[end - 1 : end].isalnum())


def _written(view: encodings.View, decoded: list[Span]) -> list[Span]:
    """The secrets found in a decoded view, where they are written in the cell."""
    return [
        Span(
            view.written_at(s.start),
            view.written_at(s.end),
            s.secret,
            s.found_as,
            s.prefix,
            s.rank,
            view.lineage,
            s.weight,
            s.keywords,
        )
        for s in decoded
    ]


def _decoded_first(found: list[Span]) -> list[Span]:
    """A finding whose secret holds an escape (a rule's class that takes a backslash: a JWT run on
    into an escaped newline; a PEM block's escaped newlines) gives way to what a view that decodes its
    own text further found there. Never to another decoding's: a JSON view still holds a URL's
    percent-escapes, so a finding of the percent-decoded view (a rule's match run over escaped text
    to a later key's header) stays, or what it covered there would be in no finding at all."""
    lineages = {s.lineage for s in found}
    if len(lineages) == 1:
        return found
    deeper = {
        lineage: _merged(sorted((d.start, d.end) for d in found if _decodes_further(d.lineage, lineage)))
        for lineage in lineages
    }
    return [s for s in found if "\\" not in s.secret or not _overlaps(deeper[s.lineage], s.start, s.end)]


def _decodes_further(lineage: tuple[str, ...], than: tuple[str, ...]) -> bool:
    """Whether a view of ``lineage`` decodes the text of a view of ``than`` further."""
    return len(lineage) > len(than) and lineage[: len(than)] == than


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans with the overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _overlaps(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether ``[start, end)`` overlaps one of ``spans`` (sorted, not overlapping)."""
    k = bisect.bisect_right(spans, (start, 1 << 62))
    return (k > 0 and spans[k - 1][1] > start) or (k < len(spans) and spans[k][0] < end)


#: the kind of findings that are one secret when only spaces or newlines part them (consecutive
#: private-key blocks: a key bundle is one secret, and a cell of blocks makes one marker)
BLOCKS = "private_key"


def _union(data: bytes, found: list[Span]) -> list[Span]:
    """Overlapping findings as one secret: their union, named by the surest finding that covers it
    whole (else the text of the union, found as the surest of them)."""
    out: list[Span] = []
    group: list[Span] = []
    end = -1
    for s in sorted(found, key=lambda s: (s.start, -s.end, s.rank)):
        if group and s.start >= end and not _consecutive_blocks(data, group[-1], s, end):
            out.append(_one(data, group, end))
            group = []
        group.append(s)
        end = max(end, s.end) if len(group) > 1 else s.end
    if group:
        out.append(_one(data, group, end))
    return out


def _consecutive_blocks(data: bytes, last: Span, s: Span, end: int) -> bool:
    return (
        s.found_as == BLOCKS and last.found_as == BLOCKS and GAP.match(data, end).end() >= s.start  # type: ignore[union-attr]
    )


def _one(data: bytes, group: list[Span], end: int) -> Span:
    start = group[0].start
    whole = [s for s in group if s.start == start and s.end == end]
    if whole:
        return min(whole, key=lambda s: (s.rank, -s.weight, -s.depth))
    surest = min(group, key=lambda s: (s.rank, -s.weight))
    prefix = surest.provider_prefix if surest.start == start else ""
    return Span(start, end, _text(data, start, end), surest.found_as, prefix, surest.rank)
