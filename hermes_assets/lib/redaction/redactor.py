"""Secrets redacted on capture, before any row is built (SPEC §7 "Secrets").

Hermes writes ``state.db`` verbatim: a key pasted in a turn, echoed by the
model, passed to a tool or printed by one is stored in the clear. Each
session's cells are redacted here, as read, so no dataset, path or store
ever holds one.

What is a secret (:mod:`.findings`): a credential the maintained rule set finds
(:mod:`.rule_set`), one of our own formats (:mod:`.rules`, :mod:`.private_keys`), the
value of a name that says secret (:mod:`.assignments`) and every value Hermes itself
holds in its ``.env`` files, wherever it appears and however it is encoded
(:mod:`.encodings`). Never: UUIDs, hex digests, ids, paths, URLs without credentials,
names of variables, prose.

What replaces a secret: ``[REDACTED:<kind>:<8 hex>]``, the hex an HMAC-SHA256 of the
secret under a key private to the warehouse (:func:`~.sources.load_key`), so one secret
has one marker everywhere, and a guess cannot be confirmed from a marker. The cell is
redacted as written: everything around a secret stays byte for byte (a JSON cell stays
the same JSON, its formatting kept).

Fast path: a whole column is screened in one RE2 pass (:meth:`Redactor.screen_column`,
:mod:`.screen`); the rules only run on the few cells it flags. Each marker written is
also reported where it was (:mod:`.sightings`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa
import re2  # type: ignore[import-untyped]

from hermes_assets.lib.redaction import json_paths
from hermes_assets.lib.redaction.fast_screen import ColumnScreen
from hermes_assets.lib.redaction.findings import CellFinder, Span
from hermes_assets.lib.redaction.rule_matcher import RuleMatcher, re2_options
from hermes_assets.lib.redaction.rule_set import load_rule_set
from hermes_assets.lib.redaction.rules import MARKER_PREFIX
from hermes_assets.lib.redaction.screen import env_literals, hyperscan_parts, screen_pattern
from hermes_assets.lib.redaction.sightings import Sighting, Sightings, Where
from hermes_assets.lib.redaction.sources import env_values, load_key
from hermes_assets.lib.redaction.version import VERSION_PARTS, env_fingerprint, redaction_version, what_changed

__all__ = ["VERSION_PARTS", "RedactionConfig", "Redactor", "marker", "redactor_for", "rule_matcher", "what_changed"]

#: how a cell wraps Hermes's JSON content (``\x00json:`` + JSON)
JSON_ENVELOPE = "\x00json:"


def marker(kind: str, digest: str) -> str:
    return f"{MARKER_PREFIX}{kind}:{digest}]"


#: no text shorter holds a secret: the shortest a rule finds is a connection URL's password
#: (``s://:p@``); every other rule's match, assignment or ``.env`` value is longer
SHORTEST = 7
#: a longer secret (a run of private keys, a blob) is named by the kind it was found as: the rules are
#: not run over it again
LONGEST_KIND = 65536


def rule_matcher(cache_dir: str | None = None) -> RuleMatcher:
    """The maintained rules compiled, once per process (``cache_dir``: where their file is kept)."""
    rule_set = load_rule_set(cache_dir)
    found = _matchers.get(rule_set.digest)
    if found is None:
        found = _matchers[rule_set.digest] = RuleMatcher(rule_set)
    return found


_matchers: dict[str, RuleMatcher] = {}


@dataclass(frozen=True)
class RedactionConfig:
    """What a run's redaction needs, as a plain value that travels to worker processes:
    where the key is and which ``.env`` files to read (read in each process, never sent)."""

    key_path: str
    env_files: tuple[str, ...] = ()

    def redactor(self) -> Redactor:
        cache_dir = os.path.dirname(os.path.abspath(self.key_path))
        return Redactor(
            load_key(self.key_path), env_values(self.env_files), rules=rule_matcher(cache_dir), cache_dir=cache_dir
        )


@dataclass
class Redactor:
    """Redacts text cells with one key. ``counts``: secrets by kind since the last
    :meth:`take_counts`; ``sightings``: each marker written, where it was (:attr:`where`: the
    cell the caller says it is redacting), since the last :meth:`take_sightings`."""

    key: bytes = field(repr=False)
    values: list[str] = field(default_factory=list, repr=False)
    counts: Counter = field(default_factory=Counter)
    where: Where = field(default_factory=Where)
    sightings: Sightings = field(default_factory=Sightings)
    #: the maintained rules (:mod:`.rule_set`), compiled
    rules: RuleMatcher = field(default_factory=rule_matcher, repr=False)
    #: where what the rules compile to is kept between processes (the key's folder; None: nowhere)
    cache_dir: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._digests: dict[str, str] = {}
        #: a secret's kind, once known: one kind per secret, wherever it appears
        self._kinds: dict[str, str] = {}
        self._value_set = frozenset(self.values)
        rule_set = self.rules.rule_set
        #: what the files this redactor writes record (:func:`~.version.redaction_version`)
        self.version = redaction_version(
            f"{rule_set.name}-{rule_set.version}-{rule_set.digest[:8]}", env_fingerprint(self.key, self.values)
        )

    @cached_property
    def _finder(self) -> CellFinder:
        """What finds the secrets of a cell (built when a first cell is redacted: a run whose files
        are all current never builds it)."""
        return CellFinder(self.rules, list(self.values))

    @cached_property
    def _screen(self) -> Any:
        """The column screen (:mod:`.screen`), compiled (without groups: only where a match is counts)."""
        options = re2_options()
        options.never_capture = True
        return re2.compile(screen_pattern(self.rules, self.values).encode(), options)

    @cached_property
    def _column_screen(self) -> ColumnScreen:
        """The column screen with its first pass (:class:`.fast_screen.ColumnScreen`: Hyperscan where it installs)."""
        return ColumnScreen(self._screen, hyperscan_parts(self.rules), env_literals(self.values), self.cache_dir)

    def __reduce__(self):  # never pickled with its key and values
        raise TypeError("a Redactor is not pickled: send its RedactionConfig")

    # -- columns ----------------------------------------------------------------------

    def screen_column(self, values: list) -> list[int]:
        """The indexes of the cells of ``values`` that may hold a secret: one RE2 search over the
        column's text as Arrow lays it out (:func:`~.screen.flagged`); a number is never one, a
        BLOB is read as the text it would become."""
        try:
            array = pa.array(values, pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a cell of another type (hostile data)
            return [
                i
                for i, v in enumerate(values)
                if isinstance(v, (str, bytes))
                and self.screen(v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
            ]
        return self._column_screen.flagged(array)

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
            new = self.text(cell, screened=True)
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

    def marker(self, kind: str, secret: str, prefix: str = "", path: str = "") -> str:
        """The marker of ``secret`` (found by rule ``kind``; ``prefix``: the provider's literal
        prefix it starts with; ``path``: where it was in a JSON cell), counted and reported where it was."""
        digest = self._digests.get(secret)
        if digest is None:
            digest = hmac.new(self.key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:8]
            self._digests[secret] = digest
        self.counts[kind] += 1
        made = marker(kind, digest)
        self.sightings.add(self.where, path, made, kind, prefix, secret)
        return made

    def kind_of(self, secret: str, found_as: str) -> str:
        """The kind a secret's marker names, a function of the secret alone (one kind per secret,
        in every cell, whichever rule met it first): the most specific maintained rule that finds
        it whole, else the first of our formats that does, else ``hermes_env`` for a value of
        Hermes's ``.env``, else the kind it was found as (an assignment's)."""
        kind = self._kinds.get(secret)
        if kind is None and len(secret) > LONGEST_KIND:
            return found_as
        if kind is None:
            kind = self._kinds[secret] = self.rules.kind_of(secret) or self._finder.our_kind(secret) or ""
        if kind:
            return kind
        return "hermes_env" if secret in self._value_set else found_as

    # -- a text -------------------------------------------------------------------

    def screen(self, text: str) -> bool:
        """Whether ``text`` may hold a secret (False: it certainly holds none): the column
        screen's search (:mod:`.screen`), on one text."""
        return self._screen.search(text.encode("utf-8", "surrogatepass")) is not None

    def text(self, text: str, *, screened: bool = False) -> str:
        """``text`` with every secret replaced by its marker (the same object when none);
        ``screened``: the column screen found it already."""
        if len(text) < SHORTEST:
            return text
        data = text.encode("utf-8", "surrogatepass")
        if not screened and self._screen.search(data) is None:
            return text
        spans = self._finder.spans(data)
        if not spans:
            return text
        paths = self._paths(text, data, spans)
        pieces, at = [], 0
        for s, path in zip(spans, paths, strict=True):
            made = self.marker(self.kind_of(s.secret, s.found_as), s.secret, s.provider_prefix, path)
            pieces += [data[at : s.start], made.encode()]
            at = s.end
        pieces.append(data[at:])
        return b"".join(pieces).decode("utf-8", "surrogatepass")

    def _paths(self, text: str, data: bytes, spans: list[Span]) -> list[str]:
        """The JSON path of each secret of a JSON cell (``""`` for plain text)."""
        body, skip = (text[len(JSON_ENVELOPE) :], len(JSON_ENVELOPE)) if text.startswith(JSON_ENVELOPE) else (text, 0)
        if not json_paths.looks_like_json(body):
            return [""] * len(spans)
        ascii_text = data.isascii()
        offsets = [
            (s.start if ascii_text else len(data[: s.start].decode("utf-8", "surrogatepass"))) - skip for s in spans
        ]
        return json_paths.paths(body, [(o, s.secret) for o, s in zip(offsets, spans, strict=True)])


_cached: dict[RedactionConfig, Redactor] = {}


def redactor_for(config: RedactionConfig) -> Redactor:
    """The redactor of ``config`` in this process (its key and ``.env`` values read once)."""
    found = _cached.get(config)
    if found is None:
        _cached.clear()
        found = _cached[config] = config.redactor()
    return found
