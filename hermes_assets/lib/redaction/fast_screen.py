"""The column screen's first pass in Hyperscan: the cells :func:`.screen.flagged` finds, found faster.

RE2 searches a day's text at about 2 ns a byte, plus the states its search builds the first time
in each process. Hyperscan (where its wheel installs: x86-64 and macOS) searches the same
alternatives with SIMD, about three times faster here; each search reports the first match that
ends in each cell, and RE2 decides that cell. So :meth:`ColumnScreen.flagged` returns exactly what
:func:`.screen.flagged` returns, in either engine.

**Why every cell RE2 finds holds the end of one of Hyperscan's matches.** Hyperscan reads each
alternative as bytes (its UTF-8 mode takes seconds to compile them), RE2 as characters of UTF-8.
On the same text they differ in two ways only, and each is covered:

* a case-insensitive ``k`` or ``s`` also matches, in RE2, the Kelvin sign and the long s: a cell
  holding either is always decided by RE2 (the two characters are alternatives of their own);
* an atom that may match a character other than ASCII (``.``, a negated class, ``\\S`` ...), read
  a bounded number of times (once, ``?``, ``{n}``, ``{m,n}``), reads one to four bytes per
  character in Hyperscan (:func:`for_bytes`: ``.{0,20}`` is searched as ``.{0,80}``).

* RE2's ``\\s`` is ``[\\t\\n\\f\\r ]``, Hyperscan's holds ``\\v`` too, so Hyperscan's ``\\S``
  (and ``[^\\s]``) would miss a vertical tab RE2's matches: :func:`for_bytes` writes out RE2's
  set (:func:`_re2_spaces`).

Every other construct the screen uses (ASCII classes, literals, ``\\w``, unbounded repeats) reads
a character of RE2 as the same bytes in Hyperscan, or more; an alternative with an anchor or a construct :func:`for_bytes` does not know leaves the
whole screen to RE2. A match Hyperscan finds that RE2 would not (across two cells, or only as
relaxed) is dropped when RE2 decides its cell.

The alternatives without a ``.env`` value (no secret in them) are compiled once per machine (about
0.3 s) and kept beside the rule set's copy (``redaction-rules/screen-<digest>.hs``, 0600); the
``.env`` values' forms are compiled in each process (literals: a few ms) and never written.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
import threading
from typing import Any

import pyarrow as pa
import re2  # type: ignore[import-untyped]

from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.redaction.rule_matcher import re2_options, search_spans
from hermes_assets.lib.redaction.rule_set import keep_private
from hermes_assets.lib.redaction.screen import flagged

hyperscan: Any
try:
    import hyperscan
except ImportError:  # no wheel for this machine (Linux on ARM): RE2 alone screens
    hyperscan = None

log = get_logger()

#: the characters other than ASCII a case-insensitive RE2 matches for an ASCII letter (K: Kelvin
#: sign, for k; long s, for s), as Hyperscan searches them
_FOLDED = ("\\xE2\\x84\\xAA", "\\xC5\\xBF")


class ColumnScreen:
    """The column screen (``program``, compiled by RE2) of the alternatives ``parts``
    (:func:`.screen.hyperscan_parts`) and the ``.env`` forms ``literals``: :meth:`flagged` as
    :func:`.screen.flagged`, with Hyperscan first where it installs and can read every alternative
    (:attr:`engine` says which)."""

    def __init__(
        self, program: Any, parts: list[tuple[str, int | None]], literals: list[str], cache_dir: str | None = None
    ) -> None:
        self.program = program
        self._databases: list[Any] = []
        self._local = threading.local()  # a scratch space per thread and database
        if hyperscan is None:
            return
        expressions = [for_bytes(p) for p, _ in parts]
        if None in expressions:
            log.warning("hermes.redaction.screen_engine", engine="re2", reason="an alternative Hyperscan cannot read")
            return
        try:
            databases = [_parts_database([e for e in expressions if e is not None], cache_dir)]
            if literals:
                db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                db.compile(expressions=[f.encode() for f in literals], flags=0, literal=True)
                databases.append(db)
        except hyperscan.error as exc:
            log.warning("hermes.redaction.screen_engine", engine="re2", reason=str(exc))
            return
        self._databases = databases
        #: per database, each expression's length (a literal's) or its own program (compiled when needed)
        self._lengths: list[list[int | None]] = [
            [n for _, n in parts] + [None] * len(_FOLDED),
            [len(f.encode()) for f in literals],
        ]
        self._parts = [p for p, _ in parts]
        self._programs: dict[int, Any] = {}

    @property
    def engine(self) -> str:
        return "hyperscan" if self._databases else "re2"

    def flagged(self, array: pa.LargeStringArray) -> list[int]:
        """The indexes of the cells of ``array`` the screen finds: those :func:`.screen.flagged` finds.

        Each database's search reports the first match that ends in each cell (the cell is then
        decided: a literal whole in the cell is a match of RE2's too; else RE2 searches the cell,
        with the alternative's own program, then the whole screen's). A cell where many matches end
        (a hostile one) stops the search, which resumes at the next cell: no match within a later
        cell is lost, since all of it lies in what is searched next."""
        if not self._databases or len(array) == 0 or array.null_count == len(array):
            return flagged(self.program, array)
        _, offsets_buffer, data_buffer = array.buffers()
        if data_buffer is None:
            return []
        offsets = memoryview(offsets_buffer).cast("q")[array.offset : array.offset + len(array) + 1]
        data = memoryview(data_buffer)
        end = offsets[len(array)]
        out: set[int] = set()
        for d, (db, scratch) in enumerate(zip(self._databases, self._scratches(), strict=True)):
            pos = offsets[0]
            while pos < end:
                ends = _Ends(offsets, pos)
                try:
                    db.scan(data[pos:end], match_event_handler=ends.match, scratch=scratch)
                    pos = end
                except hyperscan.ScanTerminated:
                    pos = offsets[ends.cells[-1][0] + 1]
                for i, expression, stop in ends.cells:
                    if i not in out and self._decides(d, expression, data, offsets[i], offsets[i + 1], stop):
                        out.add(i)
        return sorted(out)

    def _decides(self, database: int, expression: int, data: memoryview, start: int, end: int, stop: int) -> bool:
        """Whether the cell ``data[start:end]``, where ``expression`` of ``database`` ended a match at
        ``stop``, is one RE2's screen finds."""
        n = self._lengths[database][expression]
        if n is not None and stop - n >= start:  # a literal, whole in the cell
            return True
        own = self._program(database, expression)
        if own is not self.program and search_spans(own, data, start, endpos=end) is not None:
            return True
        return search_spans(self.program, data, start, endpos=end) is not None

    def _program(self, database: int, expression: int) -> Any:
        """What decides a cell where expression ``expression`` of database ``database`` ended a match:
        its own program (a part: its states are few), else the whole screen's."""
        if database != 0 or expression >= len(self._parts) or self._lengths[0][expression] is not None:
            return self.program
        found = self._programs.get(expression)
        if found is None:
            found = self._programs[expression] = _compile(self._parts[expression])
        return found

    def _scratches(self) -> list[Any]:
        found = getattr(self._local, "scratches", None)
        if found is None:
            found = self._local.scratches = [hyperscan.Scratch(db) for db in self._databases]
        return found


def _compile(pattern: str) -> Any:
    options = re2_options()
    options.never_capture = True
    return re2.compile(pattern.encode(), options)


class _Ends:
    """The first match a search reports in each cell, as ``(cell, expression, end)``: a search over
    ``offsets``' cells from ``start``, stopped after :data:`_MATCHES_IN_A_CELL` more in one cell."""

    def __init__(self, offsets: memoryview, start: int) -> None:
        self.offsets = offsets
        self.start = start
        self.cells: list[tuple[int, int, int]] = []
        self.bound = -1  # the end of the last cell recorded (from the search's start)
        self.more = 0

    def match(self, expression: int, _start: int, end: int, _flags: int, _context: object) -> bool | None:
        if end <= self.bound:
            self.more += 1
            return self.more > _MATCHES_IN_A_CELL or None  # True: the search stops
        stop = self.start + end
        i = bisect.bisect_right(self.offsets, stop - 1) - 1
        self.cells.append((i, expression, stop))
        self.bound = self.offsets[i + 1] - self.start
        self.more = 0
        return None


#: matches in one cell after its first before a search stops there (and resumes at the next cell)
_MATCHES_IN_A_CELL = 64


def _parts_database(parts: list[str], cache_dir: str | None) -> Any:
    """The Hyperscan database of ``parts`` and :data:`_FOLDED`: this process's, else the one kept
    in ``cache_dir``, else compiled (and kept there)."""
    expressions = [p.encode() for p in [*parts, *_FOLDED]]
    digest = hashlib.sha256(b"\0".join([hyperscan.__version__.encode(), *expressions])).hexdigest()[:16]
    found = _compiled.get(digest)
    if found is not None:
        return found
    path = os.path.join(cache_dir, "redaction-rules", f"screen-{digest}.hs") if cache_dir else None
    if path is not None:
        try:
            with open(path, "rb") as f:
                found = hyperscan.loadb(f.read(), hyperscan.HS_MODE_BLOCK)
        except (OSError, hyperscan.error):
            found = None  # compiled again
    if found is None:
        found = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        found.compile(expressions=expressions, flags=0)
        if path is not None:
            keep_private(path, hyperscan.dumpb(found))
    _compiled[digest] = found
    return found


_compiled: dict[str, Any] = {}


# -- each alternative as Hyperscan reads bytes ----------------------------------------------

_TOKEN = re.compile(
    r"""(?P<flags>\(\?[imsU-]+\))
      | (?P<open>\((?:\?(?:[imsU-]*:|P?<\w+>))?)
      | (?P<close>\))
      | (?P<alt>\|)
      | (?P<quant>[*+?]\??|\{\d+(?:,\d*)?\}\??)
      | (?P<class>\[\^?\]?(?:\[:\^?[a-z]+:\]|\\.|[^\]\\])*\])
      | (?P<escape>\\(?:x\{[0-9A-Fa-f]+\}|x[0-9A-Fa-f]{2}|[pP](?:\{\w+\}|\w)|.))
      | (?P<anchor>[\^$])
      | (?P<char>.)""",
    re.VERBOSE | re.DOTALL,
)
_BOUNDED = re.compile(r"\{(\d+)(?:(,)(\d*))?\}(\??)")
#: the most bytes one character of UTF-8 takes
_UTF8_MAX = 4


def for_bytes(pattern: str) -> str | None:
    """``pattern`` as Hyperscan, reading bytes, finds a match end in every cell where RE2, reading
    characters, finds one: each atom that may match a character other than ASCII (``.``, a negated
    class, ``\\S`` ...), read a bounded number of times, may read up to four bytes a character
    (``.{0,20}`` -> ``.{0,80}``, ``[^x]`` -> ``[^x]{1,4}``); an unbounded repeat already reads
    as many bytes as it takes, and every other atom reads the same bytes in both. None: not read
    here (an anchor, a mode switched for the rest of the pattern, a construct not known)."""
    out = []
    at = 0
    tokens = []
    while at < len(pattern):
        m = _TOKEN.match(pattern, at)
        if m is None or m.lastgroup in ("anchor", "flags"):
            return None
        tokens.append(_re2_spaces(m.lastgroup, m.group()))
        at = m.end()
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        out.append(text)
        i += 1
        if not _wide_atom(kind, text):
            continue
        quant = tokens[i][1] if i < len(tokens) and tokens[i][0] == "quant" else ""
        if quant:
            i += 1
        bounded = _BOUNDED.fullmatch(quant)
        if quant.rstrip("?") in ("*", "+") or (bounded and bounded.group(2) and not bounded.group(3)):
            out.append(quant)  # unbounded: as many bytes as it takes
        elif bounded:
            low, high = bounded.group(1), bounded.group(3) if bounded.group(2) else bounded.group(1)
            out.append(f"{{{low},{int(high) * _UTF8_MAX}}}{bounded.group(4)}")
        else:  # once, or "?" (and its lazy form)
            out.append(f"{{{0 if quant.startswith('?') else 1},{_UTF8_MAX}}}")
    return "".join(out)


#: RE2's ``\\s``, written out (Hyperscan's ``\\s`` also holds ``\\v``)
_RE2_SPACES = "\\t\\n\\f\\r "
_CLASS_ESCAPE = re.compile(r"\\(?:x\{[0-9A-Fa-f]+\}|x[0-9A-Fa-f]{2}|[pP](?:\{\w+\}|\w)|.)|.", re.DOTALL)


def _re2_spaces(kind: str | None, text: str) -> tuple[str | None, str]:
    """A token whose ``\\s`` or ``\\S`` Hyperscan would read otherwise than RE2, as RE2 reads it:
    ``\\s`` as RE2's set, ``\\S`` as the class of all else; in a class, ``\\s`` as the set's
    characters and ``\\S`` with ``\\v`` beside it (Hyperscan's ``\\S`` lacks only that one)."""
    if kind == "escape" and text in ("\\s", "\\S"):
        return "class", ("[^" if text == "\\S" else "[") + _RE2_SPACES + "]"
    if kind == "class" and ("\\s" in text or "\\S" in text):
        head = "[^" if text.startswith("[^") else "["
        body = text[len(head) : -1]
        parts = [_RE2_SPACES if e == "\\s" else "\\S\\v" if e == "\\S" else e for e in _CLASS_ESCAPE.findall(body)]
        return kind, head + "".join(parts) + "]"
    return kind, text


def _wide_atom(kind: str | None, text: str) -> bool:
    """Whether one step of this atom may match a character that is not ASCII (several bytes)."""
    if kind == "char":
        return text == "." or not text.isascii()
    if kind == "escape":
        return text[1] in "SWDpPC" or (text.startswith("\\x") and int(text.strip("\\x{}"), 16) > 0x7F)
    if kind == "class":
        return text.startswith("[^") or bool(re.search(r"\\[SWDpP]|\\x\{?[89A-Fa-f][0-9A-Fa-f]|[^\x00-\x7f]", text))
    return False
