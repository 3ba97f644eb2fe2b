"""Secrets redacted on capture, before any row is built (SPEC §7 "Secrets").

Hermes writes ``state.db`` verbatim: a key pasted in a turn, echoed by the
model, passed to a tool or printed by one is stored in the clear. Each
session's cells are redacted here, as read, so no dataset, path or store
ever holds one.

What is a secret: a credential in the format its issuer documents (the
:data:`PATTERNS` table, each entry naming its source), the value of an
assignment whose name says secret (shell, ``.env``, INI, YAML, JSON forms),
and every value Hermes itself holds in its ``.env`` files (the Hermes home's
and each profile's), wherever it appears. Never: UUIDs, hex digests, ids,
paths, URLs without credentials, names of variables, prose. There is no
entropy scoring (it would eat every hash).

What replaces a secret: ``[REDACTED:<kind>:<8 hex>]``, the hex an
HMAC-SHA256 of the secret under a key private to the warehouse
(:func:`load_key`), so one secret has one marker everywhere, and a guess
cannot be confirmed from a marker. The text around a secret is kept; JSON
stays JSON (keys kept, values redacted inside, nested JSON strings too).

Fast path: a whole column is screened in one RE2 pass (:meth:`Redactor.screen_column`);
the patterns only run on the few cells it flags. Each marker written is also
reported where it was (:mod:`~hermes_assets.lib.redaction.sightings`).
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import re2  # type: ignore[import-untyped]

from hermes_assets.lib.redaction.rule_matcher import RuleMatcher
from hermes_assets.lib.redaction.rule_set import ASSIGNED, load_rule_set
from hermes_assets.lib.redaction.rules import (
    ASSIGN_COLON,
    ASSIGN_EQ,
    ASSIGN_YAML,
    ASSIGNMENT_SCREEN,
    HEADER_NAMES,
    MARKER_PREFIX,
    NAME_HINTS,
    PATTERNS,
    Pattern,
    name_says_secret,
    re2_literal,
    value_is_secret,
)
from hermes_assets.lib.redaction.sightings import Sighting, Sightings, Where
from hermes_assets.lib.redaction.sources import env_values, load_key

#: the modules that decide what is redacted: a change to any of them is a change of our rules
OWN_RULES = ("rules", "redactor", "rule_matcher", "rule_set", "session_cells")


@lru_cache(maxsize=1)
def own_rules_digest() -> str:
    """The first 8 hex of a SHA-256 of :data:`OWN_RULES`' source: a new pattern, a new look-alike,
    a new way of reading a cell is a new version of the redaction, with no number to raise."""
    digest = hashlib.sha256()
    folder = os.path.dirname(os.path.abspath(__file__))
    for name in OWN_RULES:
        with open(os.path.join(folder, f"{name}.py"), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:8]


def redaction_version(rule_set_label: str, env_fingerprint: str) -> str:
    """What a file records of the redaction its cells went through: the maintained rule set
    (name, version, the digest of its file), our rules' digest and the keyed fingerprint of the
    ``.env`` values, e.g. ``betterleaks-2.0.0-rc.4-97c2aa0a+ours-1a2b3c4d+env-5e6f7a8b``. Any change
    of one of them makes every file written before older: the next run redacts it again."""
    return f"{rule_set_label}+ours-{own_rules_digest()}+env-{env_fingerprint}"


#: the ``env`` part of a version when Hermes's ``.env`` files hold no value: the same under every key
NO_ENV_VALUES = "none"


def env_fingerprint(key: bytes, values: Collection[str]) -> str:
    """The ``.env`` values' part of a version: keyed (a guess at a value cannot be confirmed from
    it), and the same under any key when there is none (a store without ``.env`` values is
    written byte for byte alike by two installations with their own keys)."""
    if not values:
        return NO_ENV_VALUES
    return hmac.new(key, "\x00".join(sorted(values)).encode("utf-8", "surrogatepass"), "sha256").hexdigest()[:8]


#: the parts of a version, in order, and what a change of each means
VERSION_PARTS = (
    ("rules", "the maintained rule set changed"),
    ("ours", "our own rules changed"),
    ("env", "the values of Hermes's .env files changed"),
)


def what_changed(old: str | None, new: str) -> list[str]:
    """Why a file that records ``old`` is redacted again under ``new`` (one line per reason)."""
    if old is None:
        return ["written without redaction (or before it existed)"]
    olds, news = old.split("+"), new.split("+")
    if len(olds) != len(news):
        return ["written by an older redaction"]
    return [why for (_, why), a, b in zip(VERSION_PARTS, olds, news, strict=True) if a != b]


# -- the marker ----------------------------------------------------------------


def marker(kind: str, digest: str) -> str:
    return f"{MARKER_PREFIX}{kind}:{digest}]"


#: no text shorter holds a secret: the shortest a rule finds is a connection URL's password
#: (``s://:p@``); every other rule's match, assignment or ``.env`` value is longer
SHORTEST = 7

#: a marker written before: never a secret, never inside one
MARKER = re.compile(r"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]")


def rule_matcher(cache_dir: str | None = None) -> RuleMatcher:
    """The maintained rules compiled, once per process (``cache_dir``: where their file is kept)."""
    rule_set = load_rule_set(cache_dir)
    found = _matchers.get(rule_set.digest)
    if found is None:
        found = _matchers[rule_set.digest] = RuleMatcher(rule_set)
    return found


_matchers: dict[str, RuleMatcher] = {}


def screen_pattern(matcher: RuleMatcher, values: list[str] | tuple[str, ...] = ()) -> str:
    """The one RE2 search every cell a rule could redact matches, built from the rules themselves:
    the maintained rules' keywords (case-insensitively, as Betterleaks screens them), or for a rule
    of Betterleaks's assignment shape the beginning of its own regex (its names, then an operator:
    every match holds it); each of our patterns' screen, the assignments' screen, and the ``.env``
    values as literals."""
    keywords = sorted({k for r in matcher.rules if r.context is None for k in r.keywords})
    contexts = sorted({r.context for r in matcher.rules if r.context is not None})
    parts = ["(?i:" + "|".join(re2_literal(k) for k in keywords) + ")"]
    if contexts:
        parts.append("(?i:(?:" + "|".join(contexts) + ")" + ASSIGNED + ")")
    ours = [p.re2_screen for p in PATTERNS]
    return "|".join([*parts, *ours, ASSIGNMENT_SCREEN, *(re2_literal(v) for v in values)])


# -- the redactor ------------------------------------------------------------------


@dataclass(frozen=True)
class RedactionConfig:
    """What a run's redaction needs, as a plain value that travels to worker processes:
    where the key is and which ``.env`` files to read (read in each process, never sent)."""

    key_path: str
    env_files: tuple[str, ...] = ()

    def redactor(self) -> Redactor:
        matcher = rule_matcher(os.path.dirname(os.path.abspath(self.key_path)))
        return Redactor(load_key(self.key_path), env_values(self.env_files), rules=matcher)


@dataclass
class Redactor:
    """Redacts text, JSON and session cells with one key. ``counts``: secrets by kind
    since the last :meth:`take_counts`; ``sightings``: each marker written, where it was
    (:attr:`where`: the cell the caller says it is redacting), since the last :meth:`take_sightings`."""

    key: bytes = field(repr=False)
    values: list[str] = field(default_factory=list, repr=False)
    counts: Counter = field(default_factory=Counter)
    where: Where = field(default_factory=Where)
    sightings: Sightings = field(default_factory=Sightings)
    #: the maintained rules (:mod:`.rule_set`), compiled
    rules: RuleMatcher = field(default_factory=rule_matcher, repr=False)

    def __post_init__(self) -> None:
        self._digests: dict[str, str] = {}
        #: a secret's kind, once known: one kind per secret, wherever it appears
        self._kinds: dict[str, str] = {}
        #: inside a JSON cell: the path of the string being redacted
        self._path: list[str] = []
        self._values = [
            (
                v,
                re.compile(
                    ("(?<![A-Za-z0-9])" if v[0].isalnum() else "")
                    + re.escape(v)
                    + ("(?![A-Za-z0-9])" if v[-1].isalnum() else "")
                ),
            )
            for v in self.values
        ]
        self._value_set = frozenset(self.values)
        self._re2 = screen_pattern(self.rules, self.values)
        self._screen = re2.compile(self._re2, _screen_options())
        rule_set = self.rules.rule_set
        #: what the files this redactor writes record (:func:`redaction_version`)
        self.version = redaction_version(
            f"{rule_set.name}-{rule_set.version}-{rule_set.digest[:8]}", env_fingerprint(self.key, self.values)
        )

    def __reduce__(self):  # never pickled with its key and values
        raise TypeError("a Redactor is not pickled: send its RedactionConfig")

    def screen_column(self, values: list) -> list[int]:
        """The indexes of the cells of ``values`` that may hold a secret: one pass of RE2 (in
        Arrow's C++ kernels) over the whole column; a number is never one, a BLOB is read as
        the text it would become."""
        try:
            array = pa.array(values, pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a cell of another type (hostile data)
            return [
                i
                for i, v in enumerate(values)
                if isinstance(v, (str, bytes))
                and self.screen(v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
            ]
        if array.null_count == len(array):
            return []
        hits = pc.match_substring_regex(array, self._re2)
        return pc.indices_nonzero(pc.fill_null(hits, False)).to_pylist()

    def redact_column(self, values: list, where: Callable[[int], Where] | None = None) -> list[tuple[int, str]]:
        """``(index, redacted cell)`` of the cells of ``values`` that held a secret. ``where``: the
        cell at an index, for the sightings."""
        out = []
        for i in self.screen_column(values):
            cell = values[i]
            if not isinstance(cell, str):
                continue
            if where is not None:
                self.where = where(i)
            new = self.text(cell)
            if new is not cell:
                out.append((i, new))
        self.where = Where()
        return out

    def take_counts(self) -> Counter:
        counts, self.counts = self.counts, Counter()
        return counts

    def take_sightings(self) -> tuple[Sighting, ...]:
        return self.sightings.take()

    # -- the marker ------------------------------------------------------------

    def marker(self, kind: str, secret: str, prefix: str = "") -> str:
        """The marker of ``secret`` (found by rule ``kind``; ``prefix``: the provider's literal
        prefix it starts with), counted and reported where it was."""
        digest = self._digests.get(secret)
        if digest is None:
            digest = hmac.new(self.key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:8]
            self._digests[secret] = digest
        self.counts[kind] += 1
        made = marker(kind, digest)
        self.sightings.add(self.where, "".join(self._path), made, kind, prefix, secret)
        return made

    # -- the screen ---------------------------------------------------------------

    def screen(self, text: str) -> bool:
        """Whether ``text`` may hold a secret (False: it certainly holds none): the column
        screen's search (:func:`screen_pattern`), on one text."""
        return self._screen.search(text) is not None

    def kind_of(self, secret: str, found_as: str) -> str:
        """The kind a secret's marker names, a function of the secret alone (one kind per secret,
        in every cell, whichever rule met it first): the most specific maintained rule that finds
        it whole, else the first of our formats that does, else ``hermes_env`` for a value of
        Hermes's ``.env``, else the kind it was found as (an assignment's)."""
        kind = self._kinds.get(secret)
        if kind is None:
            kind = self._kinds[secret] = self.rules.kind_of(secret) or _our_kind(secret) or ""
        if kind:
            return kind
        return "hermes_env" if secret in self._value_set else found_as

    # -- text -------------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by its marker (the same object when none)."""
        if len(text) < SHORTEST or not self.screen(text):
            return text
        stripped = text.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                doc = json.loads(text)
            except (ValueError, RecursionError):
                pass
            else:
                if isinstance(doc, (dict, list)):
                    root = not self._path
                    if root:
                        self._path.append("$")
                    try:
                        new, changed = self._walk(doc)
                    finally:
                        if root:
                            self._path.pop()
                    if changed:
                        compact = '": ' not in text and '", ' not in text
                        text = json.dumps(new, ensure_ascii=False, separators=(",", ":") if compact else None)
                    # then the maintained rules on the text as written: a token whose escapes make it
                    # another text once decoded (``\\n`` inside it) is found too, replaced in place
                    return self._maintained(text)
        if text.startswith("\x00json:"):
            rest = text[len("\x00json:") :]
            done = self.text(rest)
            return text if done is rest else "\x00json:" + done
        return self._patterns(text)

    def _maintained(self, text: str) -> str:
        """The maintained rules' secrets of ``text`` replaced (a marker already there is kept)."""
        findings = self.rules.findings(text)
        if not findings:
            return text
        markers = [m.span() for m in MARKER.finditer(text)] if MARKER_PREFIX in text else []
        spans = []
        for f in findings:
            if f.secret.startswith(MARKER_PREFIX) or _inside(markers, f.start, f.end):
                continue
            prefix = next((f.secret[: len(k)] for k in f.rule.keywords if f.secret.lower().startswith(k)), "")
            spans.append((f.start, f.end, self.kind_of(f.secret, f.rule.kind), prefix))
        return self._replace_spans(text, spans)

    def _replace_spans(self, text: str, spans: list[tuple[int, int, str, str]]) -> str:
        """``text`` with each ``(start, end, kind, prefix)`` span (in order, not overlapping)
        replaced by its marker, in one pass."""
        if not spans:
            return text
        pieces, at = [], 0
        for start, end, kind, prefix in spans:
            secret = text[start:end]
            pieces += [text[at:start], self.marker(kind, secret, prefix)]
            at = end
        pieces.append(text[at:])
        return "".join(pieces)

    def _patterns(self, text: str) -> str:
        out = self._maintained(text)
        for p in PATTERNS:
            if not p.may_match(out):
                continue
            if p.finder is not None:
                out = self._found(p, out)
                continue
            out = p.regex.sub(self._replacer(p), out)
        for value, regex in self._values:
            if value in out:
                out = regex.sub(lambda m: self.marker(self.kind_of(m.group(0), "hermes_env"), m.group(0)), out)
        if "=" in out or ":" in out:
            low = out.lower()
            if any(h in low for h in NAME_HINTS):
                out = self._assignments(out)
        return text if out == text else out

    def _found(self, p: Pattern, text: str) -> str:
        """``text`` with the secrets ``p.finder`` finds replaced (a marker already there kept)."""
        found = p.finder(text) if p.finder else []
        spans = [
            (start, end, self.kind_of(text[start:end], p.kind), "")
            for start, end in found
            if not text.startswith(MARKER_PREFIX, start)
        ]
        return self._replace_spans(text, spans)

    def _replacer(self, p: Pattern) -> Callable[[re.Match[str]], str]:
        def replace(m: re.Match[str]) -> str:
            secret = m.group(p.group)
            if secret.startswith(MARKER_PREFIX) or (p.accept is not None and not p.accept(secret)):
                return m.group(0)
            prefix = next((h for h in p.hints if secret.startswith(h)), "")
            made = self.marker(self.kind_of(secret, p.kind), secret, prefix)
            if p.group == 0:
                return made
            start, end = m.span(p.group)
            base = m.start(0)
            whole = m.group(0)
            return whole[: start - base] + made + whole[end - base :]

        return replace

    def _assignments(self, text: str) -> str:
        def eq(m: re.Match[str]) -> str:
            name, value = m.group(1), m.group(3)
            if not name_says_secret(name) or not value_is_secret(value):
                return m.group(0)
            return m.group(0)[: m.start(3) - m.start(0)] + self.marker(self.kind_of(value, "secret_assignment"), value)

        def colon(m: re.Match[str]) -> str:
            name, value = m.group(2), m.group(4)
            if not name_says_secret(name) or not value_is_secret(value):
                return m.group(0)
            s, e = m.start(4) - m.start(0), m.end(4) - m.start(0)
            whole = m.group(0)
            return whole[:s] + self.marker(self.kind_of(value, "secret_assignment"), value) + whole[e:]

        def yaml(m: re.Match[str]) -> str:
            name, value = m.group(1), m.group(2)
            if not name_says_secret(name) or not value_is_secret(value) or " " in value:
                return m.group(0)
            s = m.start(2) - m.start(0)
            whole = m.group(0)
            return whole[:s] + self.marker(self.kind_of(value, "secret_assignment"), value) + whole[s + len(value) :]

        if "=" in text:
            text = ASSIGN_EQ.sub(eq, text)
        if ":" in text:
            text = ASSIGN_COLON.sub(colon, text)
            text = ASSIGN_YAML.sub(yaml, text)
        return text

    # -- JSON ----------------------------------------------------------------------

    def _walk(self, value: Any) -> tuple[Any, bool]:
        """A JSON value with its strings redacted (keys kept); whether anything changed.
        A string under a key that says secret is a secret whole."""
        if isinstance(value, str):
            new = self.text(value)
            return new, new is not value
        if isinstance(value, list):
            changed = False
            out_list = []
            self._path.append("[*]")
            for item in value:
                new_item, c = self._walk(item)
                out_list.append(new_item)
                changed |= c
            self._path.pop()
            return (out_list, True) if changed else (value, False)
        if isinstance(value, dict):
            changed = False
            out: dict = {}
            for k, v in value.items():
                self._path.append(f".{k}")
                try:
                    new_v, c = self._member(k, v)
                finally:
                    self._path.pop()
                out[k] = new_v
                changed |= c
            return (out, True) if changed else (value, False)
        return value, False

    def _member(self, k: Any, v: Any) -> tuple[Any, bool]:
        """One member of a JSON object, redacted; whether it changed."""
        if isinstance(v, str) and isinstance(k, str) and k.lower() in HEADER_NAMES:
            header = f"{k}: "
            new_header = self.text(header + v)
            if new_header is not header + v and new_header.startswith(header):
                return new_header[len(header) :], True
        if isinstance(v, str) and isinstance(k, str) and name_says_secret(k) and value_is_secret(v):
            if not any(h in v for h in ("{", "[")):
                return self.marker(self.kind_of(v, "secret_assignment"), v), True
        return self._walk(v)


def _screen_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 64 << 20
    return options


def _our_kind(secret: str) -> str | None:
    """The kind of the first of our formats that finds ``secret`` whole (None: none does)."""
    for p in PATTERNS:
        if p.finder is not None or not p.may_match(secret):
            continue
        m = p.regex.search(secret)
        if m is not None and m.group(p.group) == secret and (p.accept is None or p.accept(secret)):
            return p.kind
    return None


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether ``[start, end)`` overlaps one of ``spans`` (sorted, not overlapping)."""
    k = bisect.bisect_right(spans, (start, 1 << 62))
    return (k > 0 and spans[k - 1][1] > start) or (k < len(spans) and spans[k][0] < end)


_cached: dict[RedactionConfig, Redactor] = {}


def redactor_for(config: RedactionConfig) -> Redactor:
    """The redactor of ``config`` in this process (its key and ``.env`` values read once)."""
    found = _cached.get(config)
    if found is None:
        _cached.clear()
        found = _cached[config] = config.redactor()
    return found
