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

import hashlib
import hmac
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.redaction.rules import (
    ASSIGN_COLON,
    ASSIGN_EQ,
    ASSIGN_YAML,
    HEADER_NAMES,
    MARKER_PREFIX,
    NAME_HINTS,
    PATTERNS,
    RE2_SCREENS,
    Pattern,
    name_says_secret,
    re2_literal,
    value_is_secret,
)
from hermes_assets.lib.redaction.sightings import Sighting, Sightings, Where
from hermes_assets.lib.redaction.sources import env_values, load_key

#: bumped whenever the patterns change what they find: files written under an older
#: version are redacted again by the next run
REDACTION_VERSION = 1
# -- the marker ----------------------------------------------------------------


def marker(kind: str, digest: str) -> str:
    return f"{MARKER_PREFIX}{kind}:{digest}]"


# -- the redactor ------------------------------------------------------------------


@dataclass(frozen=True)
class RedactionConfig:
    """What a run's redaction needs, as a plain value that travels to worker processes:
    where the key is and which ``.env`` files to read (read in each process, never sent)."""

    key_path: str
    env_files: tuple[str, ...] = ()

    def redactor(self) -> Redactor:
        return Redactor(load_key(self.key_path), env_values(self.env_files))


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

    def __post_init__(self) -> None:
        self._digests: dict[str, str] = {}
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
        self._hints = tuple(sorted({h for p in PATTERNS for h in p.hints}))
        self._screens = tuple(p.screen for p in PATTERNS if p.screen is not None)
        self._re2 = "|".join([*RE2_SCREENS, *(re2_literal(v) for v in self.values)])

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
        """Whether ``text`` may hold a secret (False: it certainly holds none)."""
        for hint in self._hints:
            if hint in text:
                return True
        if ":" in text:
            for screen in self._screens:
                if screen.search(text):
                    return True
        if "=" in text or ":" in text:
            low = text.lower()
            for hint in NAME_HINTS:
                if hint in low:
                    return True
        return any(value in text for value in self.values)

    # -- text -------------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by its marker (the same object when none)."""
        if not text or not self.screen(text):
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
                    if not changed:
                        return text
                    compact = '": ' not in text and '", ' not in text
                    return json.dumps(new, ensure_ascii=False, separators=(",", ":") if compact else None)
        if text.startswith("\x00json:"):
            rest = text[len("\x00json:") :]
            done = self.text(rest)
            return text if done is rest else "\x00json:" + done
        return self._patterns(text)

    def _patterns(self, text: str) -> str:
        out = text
        for p in PATTERNS:
            if not p.may_match(out):
                continue
            out = p.regex.sub(self._replacer(p), out)
        for value, regex in self._values:
            if value in out:
                out = regex.sub(lambda m: self.marker("hermes_env", m.group(0)), out)
        if "=" in out or ":" in out:
            low = out.lower()
            if any(h in low for h in NAME_HINTS):
                out = self._assignments(out)
        return text if out == text else out

    def _replacer(self, p: Pattern) -> Callable[[re.Match[str]], str]:
        def replace(m: re.Match[str]) -> str:
            secret = m.group(p.group)
            if secret.startswith(MARKER_PREFIX) or (p.accept is not None and not p.accept(secret)):
                return m.group(0)
            prefix = next((h for h in p.hints if secret.startswith(h)), "")
            if p.group == 0:
                return self.marker(p.kind, secret, prefix)
            start, end = m.span(p.group)
            base = m.start(0)
            whole = m.group(0)
            return whole[: start - base] + self.marker(p.kind, secret, prefix) + whole[end - base :]

        return replace

    def _assignments(self, text: str) -> str:
        def eq(m: re.Match[str]) -> str:
            name, value = m.group(1), m.group(3)
            if not name_says_secret(name) or not value_is_secret(value):
                return m.group(0)
            return m.group(0)[: m.start(3) - m.start(0)] + self.marker("secret_assignment", value)

        def colon(m: re.Match[str]) -> str:
            name, value = m.group(2), m.group(4)
            if not name_says_secret(name) or not value_is_secret(value):
                return m.group(0)
            s, e = m.start(4) - m.start(0), m.end(4) - m.start(0)
            whole = m.group(0)
            return whole[:s] + self.marker("secret_assignment", value) + whole[e:]

        def yaml(m: re.Match[str]) -> str:
            name, value = m.group(1), m.group(2)
            if not name_says_secret(name) or not value_is_secret(value) or " " in value:
                return m.group(0)
            s = m.start(2) - m.start(0)
            whole = m.group(0)
            return whole[:s] + self.marker("secret_assignment", value) + whole[s + len(value) :]

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
                return self.marker("secret_assignment", v), True
        return self._walk(v)


_cached: dict[RedactionConfig, Redactor] = {}


def redactor_for(config: RedactionConfig) -> Redactor:
    """The redactor of ``config`` in this process (its key and ``.env`` values read once)."""
    found = _cached.get(config)
    if found is None:
        _cached.clear()
        found = _cached[config] = config.redactor()
    return found
