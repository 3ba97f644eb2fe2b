"""What is read from a Hermes ``state.db`` (SPEC §1, §2, §8): a reader of one store.

:class:`StoreReader` reads over one read-only connection
(:mod:`hermes_assets.lib.source.store_connection`: ``mode=ro``, busy retry, typed
errors): the session index that places every session on its day, one day's
sessions whole in one short read transaction (never one across days), columns
selected by name whatever the schema version, and the marks change detection
compares. :class:`ReaderFactory`, handed out by the Hermes stores resource,
opens readers with the run's busy budget.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter

from hermes_assets.lib.basics.hermes_tables import (
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    USAGE_COLUMNS,
    V23_MESSAGE_COLUMNS,
    V23_SESSION_COLUMNS,
)
from hermes_assets.lib.basics.timestamps import (
    DayNames,
    ms_day,
    sane_instant,
    session_start_ms,
)
from hermes_assets.lib.source import columns, prompts
from hermes_assets.lib.source.session_index import SessionIndexEntry, read_index
from hermes_assets.lib.source.store_connection import DEFAULT_BUSY_TIMEOUT_MS, StoreConnection
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.source.text_cells import bad_cells, bad_text_count

#: sessions per ``IN (...)`` statement: bounds one statement's memory and time.
SESSION_CHUNK = 200


# --------------------------------------------------------------------------
# the reader
# --------------------------------------------------------------------------


@dataclass
class SessionBundle:
    """One session with everything of it the projection needs, from one read.

    ``bad_cells``: ``(table, column, mid)`` of the TEXT cells that were not valid
    UTF-8 (decoded with U+FFFD): the projection counts them in the datasets they reach.
    ``session["system_prompt"]`` is the resolved prompt (D19); ``prompt_missing``: its
    hash named no ``system_prompts`` row. ``extras`` / ``message_extras`` (mid ->): the
    cells of the store's columns this contract does not name (D22), in the order of
    :meth:`StoreReader.unknown_columns`; None when the store has none.
    """

    store: Store
    sid: str
    day: str
    session: dict
    messages: list[dict]
    usage: list[dict]
    bad_cells: list[tuple[str, str, int | None]] = field(default_factory=list)
    prompt_missing: bool = False
    extras: tuple | None = None
    message_extras: dict[int, tuple] | None = None


@dataclass
class DayRead:
    """One day of one store as :meth:`StoreReader.read_day_lineage` read it: the sessions,
    and, when the store's rows can be copies (D20), the identity rows of their ancestors
    on other days (:data:`columns.IDENTITY_COLUMNS` order)."""

    bundles: list[SessionBundle]
    grouped: bool = False
    ancestors: list[tuple] = field(default_factory=list)


@dataclass
class StoreReader(StoreConnection):
    """A reader of one store, over one read-only connection. Use as a context manager.

    ``now_s``: the clock of the sanity window (SPEC §5.1) that places sessions on days;
    None: the time the reader is made. :attr:`clock_s` is the clock in force.
    """

    now_s: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.clock_s: float = time.time() if self.now_s is None else self.now_s
        self._indexes: dict[frozenset[str] | None, dict[str, SessionIndexEntry]] = {}
        self._day_of = DayNames()

    def _probe(self) -> None:
        super()._probe()
        # what this contract selects of the store's columns, and which it does not name
        self._unknown = {
            "sessions": columns.unknown(self.columns["sessions"], SESSION_COLUMNS),
            "messages": columns.unknown(self.columns["messages"], MESSAGE_COLUMNS),
        }
        # A column schema 23+ added that this store lacks is not selected at all (not even as
        # NULL): a store of 0.19 or older is read exactly as before, no wider per row.
        self.selected = {
            table: [name for name, _, _ in columns if name in self.columns[table] or name not in added]
            for table, columns, added in (
                ("sessions", SESSION_COLUMNS, V23_SESSION_COLUMNS),
                ("messages", MESSAGE_COLUMNS, V23_MESSAGE_COLUMNS),
            )
        }

    def unknown_columns(self) -> dict[str, list[str]]:
        """``table -> [column]``: the ``sessions``/``messages`` columns this contract does not
        name (a Hermes newer than schema 31, D22), tables with none left out."""
        return {table: names for table, names in self._unknown.items() if names}

    # -- selecting by name ------------------------------------------------------

    def _select_list(
        self,
        table: str,
        columns: Iterable[tuple[str, object, object]],
        *,
        extras: bool = False,
        skip: Collection[str] = frozenset(),
    ) -> str:
        """The named columns (a column the store lacks as its default, or left out when in
        ``skip``), then, with ``extras``, the table's columns this contract does not name."""
        present = self.columns.get(table, set())
        parts = []
        for name, _, default in columns:
            if name not in present and name in skip:
                continue
            if name in present:
                parts.append(f'"{name}"')
            else:
                parts.append(f'{"NULL" if default is None else repr(default)} AS "{name}"')
        if extras:
            parts += ['"' + name.replace('"', '""') + '"' for name in self._unknown.get(table, ())]
        return ", ".join(parts)

    # -- the session index: which day each session belongs to (SPEC §2) --------

    def session_index(self, days: Collection[str] | None = None) -> dict[str, SessionIndexEntry]:
        """``sid -> (raw id, day, scope facts)`` for every session of the store, the facts of
        the sessions of ``days`` and of their ancestors (None: of every session); see
        :mod:`~hermes_assets.lib.source.session_index`. The 1M store's 59,433 sessions, read at
        every capture run: from two index-only scans, the facts of a day's sessions by rowid,
        0.24 -> 0.16 s of CPU."""
        key = None if days is None else frozenset(days)
        if key not in self._indexes:
            self._indexes[key] = read_index(self, key)
        return self._indexes[key]

    def _fallback_day(self, raw_id: object, ended_at: object) -> str | None:
        """SPEC §2 for a session whose ``started_at`` is not sane (rare: one statement each)."""
        times = self._query(
            "SELECT timestamp FROM messages WHERE session_id = ?", (raw_id,), what="message_times_by_session"
        )
        ms = session_start_ms(None, (t for (t,) in times), ended_at, self.clock_s)
        return None if ms is None else ms_day(ms)

    # -- one day's sessions, whole, in one read transaction ---------------------

    def read_day(self, day: str, sessions: list[tuple[str, object]]) -> list[SessionBundle]:
        """The given ``(sid, raw id)`` sessions of ``day``, whole, from ONE read
        transaction (SPEC §1), in statements of ``SESSION_CHUNK`` sessions.

        A session deleted since the index scan is simply absent. Memory: the day's sessions.
        """
        return self.read_day_lineage(day, sessions).bundles

    def read_day_lineage(
        self, day: str, sessions: list[tuple[str, object]], ancestors: Sequence[tuple[str, object]] = ()
    ) -> DayRead:
        """:meth:`read_day`, and in the same read transaction, when the store's rows can
        be copies (schema 23+, D20), the identity columns of the rows of ``ancestors``
        (``(sid, raw id)`` of the sessions' ancestors on other days): one statement per
        ``SESSION_CHUNK`` of them, none when they are all on the day."""
        read = DayRead([], grouped=columns.copies_apply(self.columns["messages"]))
        if not sessions:
            return read
        with self.snapshot():
            for start in range(0, len(sessions), SESSION_CHUNK):
                chunk = sessions[start : start + SESSION_CHUNK]
                read.bundles += self._read_chunk(day, [c[0] for c in chunk], [c[1] for c in chunk])
            if read.grouped:
                names = [(name, None, None) for name in columns.IDENTITY_COLUMNS]
                for start in range(0, len(ancestors), SESSION_CHUNK):
                    raw_ids = [c[1] for c in ancestors[start : start + SESSION_CHUNK]]
                    read.ancestors += self._query(
                        f"SELECT {self._select_list('messages', names)} FROM messages "
                        f"WHERE session_id IN ({','.join('?' * len(raw_ids))}) ORDER BY id",
                        raw_ids,
                        what="ancestor_identities",
                    )
        return read

    def _read_chunk(self, day: str, sids: list[str], raw_ids: list) -> list[SessionBundle]:
        marks = ",".join("?" * len(raw_ids))
        before = bad_text_count()
        sessions = self._query(
            f"SELECT {self._select_list('sessions', SESSION_COLUMNS, extras=True, skip=V23_SESSION_COLUMNS)} "
            f"FROM sessions WHERE id IN ({marks})",
            raw_ids,
            what="sessions_by_id",
        )
        messages = self._query(
            f"SELECT {self._select_list('messages', MESSAGE_COLUMNS, extras=True, skip=V23_MESSAGE_COLUMNS)} "
            f"FROM messages "
            f"WHERE session_id IN ({marks}) ORDER BY session_id",  # the index's order, no sort: see below
            raw_ids,
            what="messages_by_session",
        )
        usage = []
        if "session_model_usage" in self.columns:
            usage = self._query(
                f"SELECT {self._select_list('session_model_usage', USAGE_COLUMNS)} "
                f"FROM session_model_usage WHERE session_id IN ({marks})",
                raw_ids,
                what="usage_by_session",
            )
        s_names, m_names = self.selected["sessions"], self.selected["messages"]
        u_names = [c[0] for c in USAGE_COLUMNS]
        session_dict = row_dict(tuple(s_names), len(s_names) + len(self._unknown["sessions"]))
        message_dict = row_dict(tuple(m_names), len(m_names) + len(self._unknown["messages"]))
        rows = {str(r[0]): session_dict(r) for r in sessions}  # the unknown columns left out
        missing = self._resolve_prompts(list(rows.values()))
        bad = (
            bad_cells(sessions, _in_id_order(messages), rows, self.selected, self._unknown)
            if bad_text_count() != before
            else {}
        )
        msgs_by_sid: dict[str, list[dict]] = {}
        for raw_id, group in itertools.groupby(messages, key=itemgetter(1)):  # the rows come by session
            if type(raw_id) is str:
                msgs = list(map(message_dict, group))
                if raw_id in msgs_by_sid:
                    msgs_by_sid[raw_id] += msgs
                else:
                    msgs_by_sid[raw_id] = msgs
            else:  # hostile ids (a number, a BLOB): those SQLite holds equal may differ as text
                for row in group:
                    msgs_by_sid.setdefault(str(row[1]), []).append(message_dict(row))
        usage_by_sid: dict[str, list[dict]] = defaultdict(list)
        usage_dict = row_dict(tuple(u_names), len(u_names))
        for row in usage:
            u = usage_dict(row)
            usage_by_sid[str(u["session_id"])].append(u)
        s_extras = {str(r[0]): r[len(s_names) :] for r in sessions} if self._unknown["sessions"] else None
        m_extras: dict[str, dict] | None = None
        if self._unknown["messages"]:
            m_extras = defaultdict(dict)
            for row in messages:
                m_extras[str(row[1])][row[0]] = row[len(m_names) :]
        # whether every message id of the chunk is an integer (a rowid), seen once for the chunk
        # rather than per session: then each session's messages sort by their ids as they are
        int_ids = set(map(type, map(itemgetter(0), messages))) <= {int}
        out = []
        for sid in sids:
            session = rows.get(sid)
            if session is None:  # deleted between the index scan and now
                continue
            session["id"] = sid
            msgs = msgs_by_sid.get(sid, [])
            if int_ids:
                msgs.sort(key=_ID)
            else:
                _sort_by_id(msgs)
            out.append(
                SessionBundle(
                    self.store,
                    sid,
                    day,
                    session,
                    msgs,
                    usage_by_sid.get(sid, []),
                    bad.get(sid, []),
                    prompt_missing=sid in missing,
                    extras=None if s_extras is None else s_extras[sid],
                    message_extras=None if m_extras is None else m_extras.get(sid, {}),
                )
            )
        return out

    def _resolve_prompts(self, sessions: list[dict]) -> set[str]:
        """Each session's prompt (D19), from one statement over ``system_prompts`` per chunk."""
        if prompts.HASH_COLUMN not in self.columns["sessions"]:
            return set()  # before schema 25: every prompt is inline
        return prompts.resolve_from(
            sessions,
            lambda sql, hashes: self._query(sql, hashes, what="system_prompts_by_hash"),
            has_table=prompts.TABLE in self.tables,
        )

    # -- change detection (SPEC §8): marks, new messages, raw statements --------
    #
    # Cost per call: ``message_marks`` two b-tree lookups; ``sessions_with_messages_after``
    # a rowid range scan over the new messages only. The per-day fingerprints of
    # ``sessions`` are built by :mod:`hermes_assets.lib.changes.fingerprint` on top of
    # ``fetch_raw`` and ``place_session``.

    def message_marks(self) -> tuple[int | None, int | None]:
        """``(max mid, sqlite_sequence high-water mark of messages)``."""
        max_mid = self._query("SELECT max(id) FROM messages")[0][0]
        seq = None
        if "sqlite_sequence" in self.tables:
            rows = self._query("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
            seq = rows[0][0] if rows else None
        return max_mid, seq

    def sessions_with_messages_after(self, mid: int) -> dict[str, int]:
        """``sid -> number of its messages with id > mid`` (a rowid range scan, never the whole table)."""
        rows = self._query(
            "SELECT session_id, count(*) FROM messages NOT INDEXED WHERE id > ? GROUP BY session_id", (mid,)
        )
        return {str(sid): n for sid, n in rows}

    def place_session(self, raw_id: object, started: object, ended_at: object) -> str | None:
        """The day of one session from its cells, exactly as :meth:`session_index` places it (SPEC §2)."""
        ms = sane_instant(started, self.clock_s)
        if ms is not None:
            return self._day_of(ms)
        return self._fallback_day(raw_id, ended_at)


@dataclass(frozen=True)
class ReaderFactory:
    """How stores are opened: one value, handed out by the Hermes stores resource, that owns
    the busy budget (SPEC §1 "Busy and locked"), so that nothing between the settings and a
    read carries it. A plain value: it travels to worker processes with the run's plan."""

    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS

    def open(self, store: Store, now_s: float | None = None) -> StoreReader:
        """A reader of ``store`` (not yet open: use it as a context manager)."""
        return StoreReader(store, busy_timeout_ms=self.busy_timeout_ms, now_s=now_s)


@lru_cache(maxsize=32)
def row_dict(names: tuple[str, ...], width: int) -> Callable[[tuple], dict]:
    """A function that makes the dict of a row of ``width`` cells, its first ``len(names)``
    under ``names`` (the same dict as ``dict(zip(names, row))``, keys in that order).

    A row becomes its dict in one dictionary display, compiled once per shape (as
    :func:`collections.namedtuple` compiles its class): a dict made whole at its size, where
    ``dict(zip(...))`` inserts the cells one by one and grows the dict on the way (a quarter
    less CPU per message row read)."""
    if len(names) > width:
        raise ValueError(f"{len(names)} names for rows of {width} cells")
    cells = [f"_{i}" for i in range(width)]
    items = ", ".join(f"{name!r}: {cell}" for name, cell in zip(names, cells))
    source = f"def row_dict(row):\n    [{', '.join(cells)}] = row\n    return {{{items}}}\n"
    namespace: dict = {}
    exec(compile(source, f"<row_dict {width}>", "exec"), namespace)  # the names as literals, the cells by position
    return namespace["row_dict"]


def _mid_key(msg: dict) -> tuple[int, int | str]:
    mid = msg["id"]
    return (0, mid) if isinstance(mid, int) else (1, str(mid))


def _sort_by_id(msgs: list[dict]) -> None:
    """A session's messages in id order (:func:`_mid_key`): a rowid, an integer, compared as
    itself; a store whose ids are not all integers (hostile data) the long way."""
    if all(type(m["id"]) is int for m in msgs):
        msgs.sort(key=_ID)
    else:
        msgs.sort(key=_mid_key)


_ID = itemgetter("id")


def _in_id_order(messages: list[tuple]) -> list[tuple]:
    """Message rows (``id``, ``session_id`` first) in ``session_id, id`` order, from rows in
    ``session_id`` order. The statement asks SQLite for the index's order alone: each session's
    messages are sorted by id here anyway (:func:`_mid_key`), and sorting them there too would
    copy every row, its content included, through a temporary b-tree. Only a chunk with a bad
    cell needs its rows in the full order (its cells are listed in it)."""
    keyed, run, previous = [], -1, object()
    for row in messages:
        if run < 0 or row[1] != previous:
            run, previous = run + 1, row[1]
        keyed.append(((run, *_mid_key({"id": row[0]})), row))
    keyed.sort(key=lambda pair: pair[0])
    return [row for _, row in keyed]
