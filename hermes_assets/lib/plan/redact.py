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

Fast path: a cell is first screened with substring tests (:func:`Redactor.
screen`); the patterns only run on the few cells that contain a hint.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib import schemas
from hermes_assets.lib.plan.secret_formats import (
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
from hermes_assets.lib.plan.secret_sources import env_values, load_key

#: bumped whenever the patterns change what they find: files written under an older
#: version are redacted again by the next run
REDACTION_VERSION = 1
#: the Parquet key-value metadata key that records it
VERSION_KEY = b"hermes_assets.redaction_version"
KEY_BYTES = 32
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
    since the last :meth:`take_counts`."""

    key: bytes = field(repr=False)
    values: list[str] = field(default_factory=list, repr=False)
    counts: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._digests: dict[str, str] = {}
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

    def redact_column(self, values: list) -> list[tuple[int, str]]:
        """``(index, redacted cell)`` of the cells of ``values`` that held a secret."""
        out = []
        for i in self.screen_column(values):
            cell = values[i]
            if not isinstance(cell, str):
                continue
            new = self.text(cell)
            if new is not cell:
                out.append((i, new))
        return out

    def take_counts(self) -> Counter:
        counts, self.counts = self.counts, Counter()
        return counts

    # -- the marker ------------------------------------------------------------

    def marker(self, kind: str, secret: str) -> str:
        digest = self._digests.get(secret)
        if digest is None:
            digest = hmac.new(self.key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:8]
            self._digests[secret] = digest
        self.counts[kind] += 1
        return marker(kind, digest)

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
                    new, changed = self._walk(doc)
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
            if p.group == 0:
                return self.marker(p.kind, secret)
            start, end = m.span(p.group)
            base = m.start(0)
            whole = m.group(0)
            return whole[: start - base] + self.marker(p.kind, secret) + whole[end - base :]

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
            for item in value:
                new_item, c = self._walk(item)
                out_list.append(new_item)
                changed |= c
            return (out_list, True) if changed else (value, False)
        if isinstance(value, dict):
            changed = False
            out: dict = {}
            for k, v in value.items():
                if isinstance(v, str) and isinstance(k, str) and k.lower() in HEADER_NAMES:
                    header = f"{k}: "
                    new_header = self.text(header + v)
                    if new_header is not header + v and new_header.startswith(header):
                        out[k] = new_header[len(header) :]
                        changed = True
                        continue
                if isinstance(v, str) and isinstance(k, str) and name_says_secret(k) and value_is_secret(v):
                    if not any(h in v for h in ("{", "[")):
                        out[k] = self.marker("secret_assignment", v)
                        changed = True
                        continue
                new_v, c = self._walk(v)
                out[k] = new_v
                changed |= c
            return (out, True) if changed else (value, False)
        return value, False


# -- a session's cells ---------------------------------------------------------------

#: columns never redacted: ids, hashes, enumerations, the scope path (they hold no secret, and
#: their values are the identity of the rows)
KEEP_COLUMNS = frozenset(
    {
        "id",
        "session_id",
        "parent_session_id",
        "system_prompt_hash",
        "source",
        "created_source",
        "user_id",
        "session_key",
        "chat_id",
        "chat_type",
        "thread_id",
        "cwd",
        "role",
        "tool_call_id",
        "tool_name",
        "effect_disposition",
        "finish_reason",
        "platform_message_id",
        "display_kind",
        "message_uid",
        "absorbed_message_uids",
        "tool_call_uids",
        "tool_call_uid",
    }
)


@dataclass
class BundleCounts:
    """Secrets redacted in sessions' cells, by the table they were in."""

    sessions: Counter = field(default_factory=Counter)
    messages: Counter = field(default_factory=Counter)


def _text_columns(columns: tuple[tuple[str, str, object], ...]) -> tuple[str, ...]:
    return tuple(name for name, sql_type, _ in columns if sql_type == "TEXT" and name not in KEEP_COLUMNS)


#: the TEXT columns redacted, per table (a number is never a secret: Hermes declares these TEXT)
SESSION_TEXT = _text_columns(schemas.SESSION_COLUMNS)
MESSAGE_TEXT = _text_columns(schemas.MESSAGE_COLUMNS)
USAGE_TEXT = _text_columns(schemas.USAGE_COLUMNS)


def redact_bundles(redactor: Redactor, bundles: list[Any]) -> BundleCounts:
    """Redact, in place, every text cell of the sessions as read
    (:class:`~hermes_assets.lib.state_db.SessionBundle`): the sessions' cells (the resolved
    system prompt, the title, ``model_config`` ...), their messages', their per-model usage
    and the cells of columns this contract does not name. Ids, hashes, numbers are kept.

    Every text cell of the sessions is screened in one pass (:meth:`Redactor.screen_column`);
    only the cells it flags are redacted, one by one."""
    counts = BundleCounts()
    redactor.take_counts()
    tables = (
        ([b.session for b in bundles], SESSION_TEXT, counts.sessions),
        ([u for b in bundles for u in b.usage], USAGE_TEXT, counts.sessions),
        ([m for b in bundles for m in b.messages], MESSAGE_TEXT, counts.messages),
    )
    values: list = []
    #: (first index in ``values``, rows, column, counts) of each column gathered
    spans: list[tuple[int, list[dict], str, Counter]] = []
    for rows, columns, counter in tables:
        if not rows:
            continue
        first = rows[0]
        for name in columns:
            if name in first:
                spans.append((len(values), rows, name, counter))
                values += map(itemgetter(name), rows)
    starts = [span[0] for span in spans]
    for i in redactor.screen_column(values):
        start, rows, name, counter = spans[bisect.bisect_right(starts, i) - 1]
        cell = values[i]
        if isinstance(cell, bytes):  # a BLOB in a TEXT column: the text the dataset would hold
            cell = cell.decode("utf-8", "replace")
        elif not isinstance(cell, str):
            continue
        new = redactor.text(cell)
        if new is not cell:
            rows[i - start][name] = new
            counter.update(redactor.take_counts())
    for b in bundles:
        if b.extras:
            b.extras = _redact_tuple(b.extras, redactor.text)
            counts.sessions.update(redactor.take_counts())
        if b.message_extras:
            for mid, cells in b.message_extras.items():
                b.message_extras[mid] = _redact_tuple(cells, redactor.text)
            counts.messages.update(redactor.take_counts())
    return counts


def redact_bundle(redactor: Redactor, bundle: Any) -> BundleCounts:
    """:func:`redact_bundles` of one session."""
    return redact_bundles(redactor, [bundle])


def _redact_tuple(cells: tuple, text: Callable[[str], str]) -> tuple:
    if not any(isinstance(c, str) for c in cells):
        return cells
    return tuple(text(c) if isinstance(c, str) else c for c in cells)


_cached: dict[RedactionConfig, Redactor] = {}


def redactor_for(config: RedactionConfig) -> Redactor:
    """The redactor of ``config`` in this process (its key and ``.env`` values read once)."""
    found = _cached.get(config)
    if found is None:
        _cached.clear()
        found = _cached[config] = config.redactor()
    return found
