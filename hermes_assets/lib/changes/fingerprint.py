"""Per-day fingerprints of a store's ``sessions`` table, in two tiers (SPEC §8 step 2, D17).

Hermes changes a session's row long after creating it (ends, totals, costs,
title, archive and handoff state ...) and nothing in the store says when: there
is no ``updated_at``. The sensor therefore digests the rows of each day and
compares the digests with its cursor. Digesting whole rows on every tick
costs over a second on a store of 60,000 sessions (100 MB of system prompts;
in SQLite every cell read or aggregated costs 20-200 ns, whatever its size,
and one pass over the table's pages alone ~85 ms), so the digest has two
tiers:

**Tier 1** (:meth:`Fingerprinter.tier1`), on every tick whose store files
changed: ONE statement, one pass over ``sessions`` grouped by the day SQL
computes for each row; Python receives one row per day, never one per
session. The same statement over the rows of given days only (found through
``idx_sessions_started``, read in rowid order as the pass reads them) gives
those days' digests to the bit: what a tick runs when the ``-wal`` names the
rows written since the last one (:mod:`hermes_assets.lib.changes.wal_delta`).
Per day:

- the table's columns and declared types (a Hermes upgrade adding a column
  changes every day);
- the number of sessions;
- ``group_concat`` of the content of :data:`TIER1_TEXT` (title, model,
  handoff state, and Hermes v0.22's title source and prompt hash: short by
  nature; a hostile 10 MB title is carried whole, it only costs time), the
  columns of a row joined into one text first (one ``group_concat``, not one
  per column: each costs ~10 ms at 59k sessions);
- ``sum(w * Σ k_i v_i)`` of ``ended_at`` and :data:`TIER1_NUMBERS` (token
  totals, costs in micro-dollars, message, tool call, API call and rewind
  counts, ``archived``, and v0.22's ``auto_archived``, ``pinned``, ``hidden``)
  plus, for a session ever rewound or with no live
  message, its count of inactive messages (one seek into
  ``idx_messages_session_active``: the undo of a rewind flips rows and no
  ``sessions`` column) and, from schema 25 on, whether its prompt hash has a
  ``system_prompts`` row (a row appearing for a hash changes what the
  session's prompt is, SPEC D19, and no ``sessions`` cell). ``w`` is a weight
  in [1, 2) drawn from the rowid and
  ``k_i`` one per column, so two changes on one day cancel out only if they
  match those weights exactly; NULL counts as an odd constant, never as 0.
  One float sum per day: a change smaller than ~1e-15 of the day's sum (a
  fraction of a millisecond of ``ended_at``) is below its resolution.

``session_model_usage`` feeds the datasets too (``usage_by_model``), and
Hermes's ``record_auxiliary_usage`` writes only there: tier 1 watches it by
its marks (:mod:`hermes_assets.lib.changes.usage_marks`, the rows written since the
last tick, by rowid and ``last_seen``), and
tier 2 digests each day's usage rows with the day's sessions.

**Tier 2** (:meth:`Fingerprinter.tier2`), for the days the rotation of
:mod:`hermes_assets.lib.changes.store_scan` picks (and the days requested on the tick):
the content of every column of every session of the day (``system_prompt``
and any long cell, ``model_config``, the billing, gateway, git and
compression columns, every column of schema 31 and the next ...), the prompt
its ``system_prompt_hash`` resolves to, every session's inactive count, and
every cell of the day's ``session_model_usage`` rows: anything tier 1 does
not compare. A day's few hundred rows come to Python, hashed whole.

**Placement** (SPEC §2) is computed in SQL where it is safe: a ``started_at``
stored as a number inside the sane window and more than one second from its
edges, placed with the arithmetic of :func:`~hermes_assets.lib.basics.timestamps.epoch_ms`
(:func:`~hermes_assets.lib.basics.timestamps.round_ms_sql`, UTC days of 86,400,000 ms). Every other session
(NULL, text, out of range, on an edge; found through ``idx_sessions_started``,
so few) is read alone and placed by :meth:`StoreReader.place_session`, the
code of the assets' session index; its row's aggregates join its day's digest.

Every statement is its own short read transaction; TEXT is fetched as bytes
(never decoded, so a bad cell costs nothing).
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_assets.lib.basics.timestamps import DAY_MS, day_number_sql, day_start_ms, ms_day, sane_interior_s
from hermes_assets.lib.source.state_db import StoreReader
from hermes_assets.lib.source.text_cells import as_text

#: short text columns whose content tier 1 compares on every tick: those Hermes rewrites
#: alone (``end_reason`` always changes with ``ended_at``, which tier 1 compares); the
#: last two are Hermes v0.22's (schema 31), absent (and skipped) in older stores
TIER1_TEXT = ("title", "model", "handoff_state", "title_source", "system_prompt_hash")
#: number columns tier 1 compares on every tick (besides ``ended_at``); costs are
#: scaled to micro-dollars so that they share one float sum with the counts
TIER1_NUMBERS = (
    ("input_tokens", 1),
    ("output_tokens", 1),
    ("cache_read_tokens", 1),
    ("cache_write_tokens", 1),
    ("reasoning_tokens", 1),
    ("estimated_cost_usd", 1_000_000),
    ("actual_cost_usd", 1_000_000),
    ("message_count", 1),
    ("tool_call_count", 1),
    ("api_call_count", 1),
    ("rewind_count", 1),
    ("archived", 1),
    ("auto_archived", 1),  # the last three: Hermes v0.22 (schema 31)
    ("pinned", 1),
    ("hidden", 1),
)

_BATCH = 500  # rowids or ids per IN (...) statement
#: a NULL in a number column: not 0 and not a value Hermes writes
_NULL = "-0.5772156649015329"
#: the per-row weight, in [1, 2): a multiplicative hash of the rowid
_WEIGHT = "(1.0 + ((s.rowid * 2654435761) % 4294967291) / 4294967291.0)"


def _k(i: int) -> str:
    """The ``i``-th column multiplier, in [1, 2), distinct for every ``i``."""
    return repr(1.0 + (i * 0.6180339887498949) % 1.0)


def _q(name: str, table: str = "s") -> str:
    return f'{table}."' + name.replace('"', '""') + '"'


def day_name(day_number: int) -> str:
    """The day of a day number (days since 1970-01-01, as the SQL placement computes them)."""
    return ms_day(day_number * DAY_MS)


def digest(rows: Iterable[Sequence[Any]]) -> str:
    """16 hex of blake2b over rows of SQLite cells (bytes, int, float, None), type-tagged."""
    h = hashlib.blake2b(digest_size=8)
    for row in rows:
        for v in row:
            if v is None:
                h.update(b"\x00n")
            elif isinstance(v, bytes):
                h.update(b"\x00b%d:" % len(v))
                h.update(v)
            elif isinstance(v, float):
                h.update(b"\x00f" + v.hex().encode())
            else:
                h.update(b"\x00i%d" % v)
        h.update(b"\x1e")
    return h.hexdigest()


@dataclass
class Tier1:
    """Tier 1 of one store: a digest per day."""

    days: dict[str, str]  # day -> 16 hex
    sessions: int
    unplaced: int  # sessions with no sane time at all (no day)
    #: day -> sessions SQL placed on it (the sessions placed one by one are not counted)
    counts: dict[str, int] = field(default_factory=dict)
    #: day -> rowids of the sessions whose inactive count tier 1 reads (rewound, or no live message)
    seldom: dict[str, list[int]] = field(default_factory=dict)


class Fingerprinter:
    """The fingerprint statements of one open store (its schema decides the SQL)."""

    def __init__(self, reader: StoreReader):
        self.reader = reader
        info = reader.fetch_raw("PRAGMA table_info(sessions)")
        names = sorted(as_text(r[1]) for r in info)
        present = set(names)
        #: the columns and their declared types: part of every day's tier 1, so that a
        #: schema change (a Hermes upgrade adding columns) is a change of every day
        self.schema = repr(sorted((as_text(r[1]), as_text(r[2])) for r in info)).encode()
        indexes = reader.indexes
        col = lambda name: _q(name) if name in present else "NULL"  # noqa: E731
        self.started, self.ended = col("started_at"), col("ended_at")
        now = reader.clock_s
        # numbered parameters: the interior of the sane window in seconds (SPEC §2), less
        # one second at each edge; statements add theirs from ?3
        self.params = sane_interior_s(now)
        self.day_sql = day_number_sql(self.started)
        inactive = "0"
        if "active" in reader.columns.get("messages", ()) and "idx_messages_session_active" in indexes:
            inactive = "(SELECT count(*) FROM messages AS m WHERE m.session_id = s.id AND m.active = 0)"
        seldom = inactive
        #: the sessions whose inactive count tier 1 reads: None, every one (or none: no ``active``)
        self.seldom_where: str | None = None
        self.inactive = inactive
        if inactive != "0" and {"rewind_count", "message_count"} <= present:
            self.seldom_where = "s.rewind_count > 0 OR s.message_count = 0"
            seldom = f"(CASE WHEN {self.seldom_where} THEN {inactive} ELSE 0 END)"

        # the number columns in one float sum per row: a column Hermes may leave NULL gets
        # its own ifnull; those with a default (counts, totals, flags) are summed bare and
        # the sum is NULL-guarded once (a NULL there is raw SQL: tier 2 sees the rest)
        declared = {as_text(r[1]): (bool(r[3]) or r[4] is not None) for r in info}
        nullable: list[str] = []
        defaulted: list[str] = []
        for i, (c, scale) in enumerate((("ended_at", 1), *TIER1_NUMBERS)):
            if c in present:
                term = f"{_k(i)} * {_q(c)}" + (f" * {scale}" if scale != 1 else "")
                (defaulted if declared[c] else nullable).append(term)
        terms = [f"ifnull({t}, {_NULL})" for t in nullable]
        terms.append(f"ifnull({' + '.join(defaulted) or '0'}, {_NULL})")
        terms.append(f"{_k(len(TIER1_NUMBERS) + 1)} * {seldom}")
        prompts = "system_prompts" in reader.tables and "system_prompt_hash" in present
        if prompts:  # schema 25+: whether the session's prompt hash resolves (a row may appear later)
            terms.append(
                f"{_k(len(TIER1_NUMBERS) + 2)} * ifnull(s.system_prompt_hash IN "
                f"(SELECT hash FROM system_prompts), {_NULL})"
            )
        # per row: the weighted number sum and the texts, joined into one; a co-routine computes
        # them before the GROUP BY sort, so the sorter carries 3 values a row, not the ~25 columns
        # read (one text, not one per column: each group_concat costs ~10 ms at 59k sessions)
        texts = " || x'1e' || ".join(f"ifnull({_q(c)}, x'00')" for c in TIER1_TEXT if c in present) or "x'00'"
        self._row = f"{_WEIGHT} * ({' + '.join(terms)}) AS x, {texts} AS t"
        self._tier1_aggs = "count(*), total(x), group_concat(t, x'1f')"
        # not digested: the rowids of the day's sessions whose inactive count is read (what the
        # WAL delta of :mod:`hermes_assets.lib.changes.wal_delta` reads again on every tick)
        marked = f"CASE WHEN {self.seldom_where} THEN s.rowid END" if self.seldom_where else "NULL"
        self._tier1_rows = f"{self._row}, {marked} AS r"
        self._tier1_marked = "group_concat(r)"
        # tier 2: every cell, and the prompt the hash resolves to (SPEC D19)
        resolved = "(SELECT p.prompt FROM system_prompts AS p WHERE p.hash = s.system_prompt_hash)"
        self._tier2_cells = ", ".join([inactive, *(_q(c) for c in names), *([resolved] if prompts else [])])
        # a day's usage rows in tier 2, digested in SQL (one row back per day, not one per usage row:
        # those Python objects cost more than the SQL): count, the weighted sum of the number
        # cells, the text cells joined
        usage = (
            reader.fetch_raw("PRAGMA table_info(session_model_usage)") if "session_model_usage" in reader.tables else []
        )
        kinds = {as_text(r[1]): str(as_text(r[2]) or "").upper() for r in usage}
        numbers = [c for c, t in sorted(kinds.items()) if "INT" in t or "REAL" in t]
        usage_texts = [c for c in sorted(kinds) if c not in numbers]
        weighted = " + ".join(f"ifnull({_k(i)} * {_q(c, 'u')}, {_NULL})" for i, c in enumerate(numbers)) or "0"
        joined = " || x'1e' || ".join(f"ifnull({_q(c, 'u')}, x'00')" for c in usage_texts) or "NULL"
        weight = _WEIGHT.replace("s.rowid", "u.rowid")
        #: the usage rows' digest columns: "" when the store has no ``session_model_usage``
        self.usage_digest = f"count(*), total({weight} * ({weighted})), group_concat({joined}, x'1f')" if usage else ""
        #: whether the usage rows carry ``last_seen`` (the marks of :mod:`~hermes_assets.lib.changes.usage_marks`)
        self.usage_seen = "last_seen" in kinds
        self._by_started = "idx_sessions_started" in indexes
        self._odd: dict[int, tuple[str, str | None]] | None = None

    # -- placement -------------------------------------------------------------

    def odd_sessions(self) -> dict[int, tuple[str, str | None]]:
        """``rowid -> (sid, day)`` of the sessions SQL does not place, placed one by one."""
        if self._odd is None:
            where = "?1 AND ?2"  # no started_at column: every session is placed alone
            if self.started != "NULL":
                # three index searches (an OR of them would scan the table: ~100 ms on a big store);
                # text and blobs sort after every number, so "> ?2" finds them too
                where = (
                    "s.rowid IN (SELECT rowid FROM sessions WHERE started_at IS NULL UNION ALL "
                    "SELECT rowid FROM sessions WHERE started_at < ?1 UNION ALL "
                    "SELECT rowid FROM sessions WHERE started_at > ?2)"
                )
            rows = self.reader.fetch_raw(
                f"SELECT s.rowid, s.id, {self.started}, {self.ended} FROM sessions AS s WHERE {where}", self.params
            )
            self._odd = {
                rowid: (
                    str(as_text(raw_id)),
                    self.reader.place_session(as_text(raw_id), as_text(started), as_text(ended)),
                )
                for rowid, raw_id, started, ended in rows
            }
        return self._odd

    def days_of(self, sids: Iterable[str]) -> dict[str, str | None]:
        """``sid -> day`` of the given sessions (those still in the store)."""
        out: dict[str, str | None] = {}
        select = f"SELECT s.rowid, s.id, {self.day_sql} FROM sessions AS s"
        for rowid, raw_id, day_number in self.where_in(select, "s.id", list(sids)):
            if day_number is not None:
                out[str(as_text(raw_id))] = day_name(day_number)
            else:
                out[str(as_text(raw_id))] = self.odd_sessions().get(rowid, (None, None))[1]
        return out

    def days_by_rowid(self, rowids: Iterable[int]) -> dict[int, str | None]:
        """``rowid -> day`` of the given sessions (those still in the store)."""
        out: dict[int, str | None] = {}
        for rowid, day_number in self.rows_by_rowid(f"SELECT s.rowid, {self.day_sql} FROM sessions AS s", rowids):
            out[rowid] = (
                day_name(day_number) if day_number is not None else self.odd_sessions().get(rowid, ("", None))[1]
            )
        return out

    def rows_by_rowid(self, select: str, rowids: Iterable[int]) -> Iterator[tuple]:
        """The rows of ``select`` (over ``sessions AS s``) of the given rowids."""
        return self.where_in(select, "s.rowid", sorted(set(rowids)))

    @property
    def by_started(self) -> bool:
        """Whether the store has ``idx_sessions_started`` (a day's rows are found through it)."""
        return self._by_started

    def where_in(
        self, select: str, column: str, values: list, params: tuple | None = None, also: str = ""
    ) -> Iterator[tuple]:
        """The rows of ``select`` whose ``column`` is one of ``values``, a batch per statement.

        ``params``: the statement's two numbered parameters ``?1`` and ``?2`` (by default the
        sane window's, :attr:`params`); ``also``: a condition the rows must meet as well.
        """
        where = f"WHERE {also} AND" if also else "WHERE"
        for start in range(0, len(values), _BATCH):
            chunk = values[start : start + _BATCH]
            marks = ", ".join(f"?{i + 3}" for i in range(len(chunk)))
            yield from self.reader.fetch_raw(
                f"{select} {where} {column} IN ({marks})", (*(self.params if params is None else params), *chunk)
            )

    # -- the two tiers -------------------------------------------------------------

    def tier1(self, only: Iterable[str] | None = None) -> Tier1:
        """Every day's tier-1 digest: one pass over ``sessions``, one row per day back.

        ``only``: the digests of those days alone, the same as the pass over every row gives
        them (their rows, in rowid order as the pass reads them, found through
        ``idx_sessions_started``); the other days are left out.
        """
        if only is None:
            rows = self.reader.fetch_raw(
                f"SELECT d, {self._tier1_aggs}, {self._tier1_marked} FROM (SELECT {self.day_sql} AS d, "
                f"{self._tier1_rows} FROM sessions AS s NOT INDEXED LIMIT -1) GROUP BY d",
                self.params,
            )
            wanted = None
        else:
            wanted = set(only)
            started = _q("started_at", "i")  # the inner table's: an ``s.`` here would be the outer row's
            rows = []
            for start in range(0, len(wanted), _BATCH // 2):
                chunk = sorted(wanted)[start : start + _BATCH // 2]
                ranges, params = [], list(self.params)
                for day in chunk:  # started_at within the day, a second either side (as tier 2)
                    start_s = day_start_ms(day) // 1000
                    ranges.append(
                        f"SELECT i.rowid FROM sessions AS i WHERE {started} BETWEEN ?{len(params) + 1} "
                        f"AND ?{len(params) + 2}"
                    )
                    params += [start_s - 1, start_s + 86400 + 1]
                # rowid IN (...): the rows in rowid order, as the pass over every row reads them,
                # so each day's sum and joined text come out the same
                rows += self.reader.fetch_raw(
                    f"SELECT d, {self._tier1_aggs}, {self._tier1_marked} FROM (SELECT {self.day_sql} AS d, "
                    f"{self._tier1_rows} FROM sessions AS s WHERE s.rowid IN ({' UNION ALL '.join(ranges)}) "
                    "LIMIT -1) GROUP BY d",
                    params,
                )
            rows = [r for r in rows if r[0] is not None and day_name(r[0]) in wanted]
        odd = self.odd_sessions() if wanted is not None or any(r[0] is None for r in rows) else {}
        if wanted is not None:
            odd = {rowid: v for rowid, v in odd.items() if v[1] in wanted}
        extra = self._per_row(odd)
        days: dict[str, str] = {}
        counts: dict[str, int] = {}
        seldom: dict[str, list[int]] = {}
        for day_number, *aggs, marked in rows:
            if day_number is not None:
                day = day_name(day_number)
                days[day] = digest([(self.schema,), aggs, *extra.pop(day, [])])
                counts[day] = aggs[0]
                seldom[day] = [int(r) for r in as_text(marked).split(",")] if marked is not None else []
        unplaced = len(extra.pop(None, []))
        for other_day, per_row in extra.items():  # days with sessions only the per-row pass placed
            if other_day is not None:  # (popped above)
                days[other_day] = digest([(self.schema,), (0,), *per_row])
        return Tier1(days, sum(r[1] for r in rows), unplaced, counts, seldom)

    def tier2(self, days: Iterable[str]) -> dict[str, str]:
        """The tier-2 digest of each given day: every cell of its sessions, the prompt each hash
        resolves to, their inactive counts, and every cell of their ``session_model_usage`` rows.

        The sessions rows of a day (a few hundred) come to Python and are hashed whole
        (``marshal``, then SHA-1, the fastest hash here on 400 KB of prompts a day):
        cheaper than aggregating 45 columns in SQL (joining long prompts costs more than
        fetching them). The day's usage rows are small and many: digested in SQL.
        """
        days = sorted(set(days))
        if not days:
            return {}
        wanted = set(days)
        odd = {rowid: day for rowid, (_, day) in self.odd_sessions().items() if day in wanted}
        odd_rows: dict[str, list[tuple]] = {}
        select = f"SELECT s.rowid, {self._tier2_cells} FROM sessions AS s"
        for row in self.where_in(select, "s.rowid", sorted(odd)):
            odd_rows.setdefault(odd[row[0]], []).append(row)
        range_ = f"{self.started} BETWEEN ?4 AND ?5 AND " if self._by_started else ""
        # rows in the order of idx_sessions_started (else of the table): fixed for fixed data
        sql = f"SELECT s.rowid, {self._tier2_cells} FROM sessions AS s WHERE {range_}{self.day_sql} = ?3"
        # from the day's sessions to their usage rows (CROSS JOIN keeps that order: the other
        # way round SQLite scans every usage row of the store once per day)
        usage_join = "FROM sessions AS s CROSS JOIN session_model_usage AS u ON u.session_id = s.id"
        usage_sql = f"SELECT {self.usage_digest} {usage_join} WHERE {range_}{self.day_sql} = ?3"
        out = {}
        for day in days:
            start_s = day_start_ms(day) // 1000  # started_at within the day, a second either side
            params = (*self.params, start_s // 86400, start_s - 1, start_s + 86400 + 1)
            rows = self.reader.fetch_raw(sql, params)
            rows += sorted(odd_rows.get(day, []))
            usage = self.reader.fetch_raw(usage_sql, params) if self.usage_digest else []
            odd_ids = sorted(r for r, d in odd.items() if d == day)
            if self.usage_digest and odd_ids:  # odd sessions: few, each batch one digest row
                usage += list(self.where_in(f"SELECT {self.usage_digest} {usage_join}", "s.rowid", odd_ids))
            out[day] = hashlib.sha1(marshal.dumps((rows, usage), 2), usedforsecurity=False).hexdigest()[:16]
        return out

    def _per_row(self, odd: dict[int, tuple[str, str | None]]) -> dict[str | None, list[tuple]]:
        """``day -> [tier-1 values of each odd session]``, in rowid order."""
        out: dict[str | None, list[tuple]] = {}
        for row in sorted(self.where_in(f"SELECT s.rowid, {self._row} FROM sessions AS s", "s.rowid", sorted(odd))):
            out.setdefault(odd[row[0]][1], []).append(row)
        return out
