"""Read a Hermes ``state.db`` read-only (SPEC §1).

The store is live: Hermes writes it in WAL mode while we read. We open it with
``mode=ro``, probe which columns this store's schema has, read one day of one
store in one short read transaction (never one across days), retry
busy/locked on the primary result code, and turn SQLite's failures into the
typed errors of :mod:`hermes_assets.lib.errors`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from hermes_assets.lib import errors, prompts
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.projection import copies, extra_columns
from hermes_assets.lib.schemas import (
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    USAGE_COLUMNS,
    V23_MESSAGE_COLUMNS,
    V23_SESSION_COLUMNS,
)
from hermes_assets.lib.stores import STORE_FILE, Store
from hermes_assets.lib.timestamps import DayNames, ms_day, sane_instant, session_start_ms

log = get_logger()

#: the first table Hermes's schema script creates: with it but without sessions/messages,
#: the store is mid-creation (Hermes runs its schema one statement at a time)
HERMES_FIRST_TABLE = "schema_version"
DEFAULT_BUSY_TIMEOUT_MS = 2000
#: sessions per ``IN (...)`` statement: bounds one statement's memory and time.
SESSION_CHUNK = 200

# SQLite result codes (primary = code & 0xFF).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 5, 6, 8
_SQLITE_CORRUPT, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 11, 14, 26
_READONLY_ROLLBACK = _SQLITE_READONLY | (3 << 8)
_READONLY_CANTINIT = _SQLITE_READONLY | (5 << 8)
_READONLY_DIRECTORY = _SQLITE_READONLY | (6 << 8)


# --------------------------------------------------------------------------
# text decoding (SPEC §1 "Text")
# --------------------------------------------------------------------------


class _Undecodable(Exception):
    """A fetched TEXT cell is not valid UTF-8 (internal: triggers the per-cell re-read)."""


class BadText(str):
    """A TEXT cell that was not valid UTF-8, decoded with U+FFFD replacements."""

    __slots__ = ()


#: how many cells failed strict UTF-8 in this process (cheap "did anything go wrong" probe)
_BAD_TEXT_SEEN = [0]


def _decode_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        _BAD_TEXT_SEEN[0] += 1
        return BadText(raw.decode("utf-8", "replace"))


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
    on other days (:data:`copies.IDENTITY_COLUMNS` order)."""

    bundles: list[SessionBundle]
    grouped: bool = False
    ancestors: list[tuple] = field(default_factory=list)


@dataclass
class SessionIndexEntry:
    """What the index scan knows of a session: enough to place it and classify it."""

    raw_id: object
    day: str | None  # None: no sane time at all
    source: str | None = None
    cwd: str | None = None
    parent: str | None = None


@dataclass
class StoreReader:
    """A read-only session on one store. Use as a context manager.

    ``statements`` counts the SQL statements run, by what they read
    (``sessions_scan``, ``sessions_by_id``, ``messages_by_session`` ...): the
    figures behind "the sessions table is scanned once per run".
    """

    store: Store
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    now_s: float | None = None
    #: the file to open, when it is not the store's own path (a copy read as that store:
    #: the rows still name ``store.path``)
    file: str | None = None

    def __post_init__(self):
        if self.file is None:
            self.file = self.store.path
        self._conn: sqlite3.Connection | None = None
        self._tmpdir: str | None = None
        self.columns: dict[str, set[str]] = {}
        self.tables: set[str] = set()  # the store's tables and indexes, as the probe found them
        self.indexes: set[str] = set()
        self._index: dict[str, SessionIndexEntry] | None = None
        self._day_of = DayNames()
        self.statements: Counter = Counter()
        if self.now_s is None:
            self.now_s = time.time()

    # -- opening ------------------------------------------------------------

    def __enter__(self) -> StoreReader:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        path = self.file
        if not os.path.isfile(path):
            raise FileNotFoundError(path)
        try:
            self._conn = self._connect(path, {"mode": "ro"})
            self._probe()
        except (sqlite3.Error, errors.HermesAssetsError, errors.StoreAbsent) as exc:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            # The open is lazy: SQLite's error surfaces in _probe's first statement,
            # which has already turned it into a typed error; look at its cause.
            sqlite_exc = exc if isinstance(exc, sqlite3.Error) else exc.__cause__
            code = getattr(sqlite_exc, "sqlite_errorcode", None)
            if code not in (_READONLY_DIRECTORY, _READONLY_CANTINIT, _SQLITE_CANTOPEN):
                if isinstance(exc, (errors.HermesAssetsError, errors.StoreAbsent)):
                    raise
                raise self._translate(exc) from exc
            self._open_in_readonly_directory(path, sqlite_exc)
        log.debug("hermes.store.opened", store=self.store.label, path=path)

    def _open_in_readonly_directory(self, path: str, first: sqlite3.Error) -> None:
        """The -shm cannot be created, so nobody can be writing this store (SPEC §1)."""
        if os.path.exists(path + "-journal"):
            raise errors.StoreBusy(
                f"{path} has a rollback journal and sits in a read-only folder; "
                "it cannot be read consistently until its writer finishes.",
                path=path,
            ) from first
        wal = path + "-wal"
        try:
            if os.path.exists(wal) and os.path.getsize(wal) > 0:
                self._tmpdir = tempfile.mkdtemp(prefix="hermes-ro-")
                copy = os.path.join(self._tmpdir, STORE_FILE)
                shutil.copyfile(path, copy)
                shutil.copyfile(wal, copy + "-wal")
                self._conn = self._connect(copy, {"mode": "ro"})
            else:
                self._conn = self._connect(path, {"mode": "ro", "immutable": 1})
            self._probe()
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _connect(self, path: str, params: dict) -> sqlite3.Connection:
        uri = "file:" + urllib.parse.quote(path) + "?" + urllib.parse.urlencode(params)
        conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None, check_same_thread=False)
        conn.text_factory = str  # fast path; a chunk with invalid UTF-8 is re-read per cell
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def _probe(self) -> None:
        entries = self._query("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index')", what="schema")
        tables = self.tables = {name for kind, name in entries if kind == "table"}
        self.indexes = {name for kind, name in entries if kind == "index"}
        if not {"sessions", "messages"} <= tables and (not tables or HERMES_FIRST_TABLE in tables):
            # Hermes creates its schema one statement at a time: a store with no
            # tables, or with some of Hermes's own but not yet these, is being born.
            raise errors.StoreAbsent(
                f"{self.file} is still being created by Hermes (tables so far: {sorted(tables)}): "
                "nothing to capture yet.",
                path=self.file,
            )
        if not {"sessions", "messages"} <= tables:
            raise errors.NotAHermesStore(
                f"{self.file} is a SQLite file but has no sessions/messages tables; "
                "point HERMES_STATE_DB at a Hermes state.db.",
                path=self.file,
            )
        for table in ("sessions", "messages", "session_model_usage"):
            if table in tables:
                self.columns[table] = {r[1] for r in self._query(f"PRAGMA table_info({table})", what="schema")}
        self._unknown = {
            "sessions": extra_columns.unknown(self.columns["sessions"], SESSION_COLUMNS),
            "messages": extra_columns.unknown(self.columns["messages"], MESSAGE_COLUMNS),
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

    # -- statements with busy retry -------------------------------------------

    def _query(self, sql: str, params: Iterable = (), what: str = "other") -> list[tuple]:
        """Run one statement to completion; ``what`` names it in :attr:`statements`.

        Outside :meth:`snapshot` a statement is its own short read transaction.
        TEXT is decoded by SQLite's C path; if any cell is not valid UTF-8 the
        statement is re-run decoding per cell, so one bad cell costs one re-read
        and never fails the batch (SPEC §1 "Text").
        """
        self.statements[what] += 1
        try:
            return self._query_once(sql, params)
        except _Undecodable:
            self._conn.text_factory = _decode_text
            try:
                return self._query_once(sql, params)
            finally:
                self._conn.text_factory = str

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction around the statements inside: they all see the same
        state of the store. Keep it short: an open read pins Hermes's WAL (SPEC §1)."""
        self._statement("BEGIN")
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            raise
        self._statement("COMMIT")  # a read transaction: ends the snapshot, writes nothing

    def _statement(self, sql: str) -> None:
        try:
            self._conn.execute(sql)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _query_once(self, sql: str, params: Iterable = ()) -> list[tuple]:
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = 0.005
        while True:
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                if (
                    isinstance(exc, sqlite3.OperationalError)
                    and "decode" in str(exc)
                    and self._conn.text_factory is str
                ):
                    raise _Undecodable() from exc
                code = getattr(exc, "sqlite_errorcode", 0) or 0
                if code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
                    continue
                raise self._translate(exc) from exc

    def _translate(self, exc: sqlite3.Error) -> errors.HermesAssetsError:
        code = getattr(exc, "sqlite_errorcode", 0) or 0
        path = self.file
        if code == _READONLY_ROLLBACK:
            return errors.StoreBusy(
                f"{path} has a hot rollback journal ({path}-journal): a Hermes write was interrupted "
                "mid-transaction, so the file is not read around it; nothing was written. Hermes rolls "
                "the journal back the next time it opens the store; the next run will retry.",
                path=path,
            )
        if code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return errors.StoreBusy(
                f"{path} stayed locked by a Hermes writer for {self.busy_timeout_ms} ms "
                f"({exc}); nothing was written, the next run will retry.",
                path=path,
            )
        if code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "malformed" in str(exc):
            return errors.StoreCorrupt(
                f"{path} is corrupt ({exc}); captured rows are kept. "
                "Repair or restore the store (Hermes: `hermes doctor`), then re-run.",
                path=path,
            )
        if isinstance(exc, errors.HermesAssetsError):
            return exc
        return errors.StoreCorrupt(f"{path} cannot be read: {exc}", path=path)

    # -- selecting by name ------------------------------------------------------

    def _select_list(self, table: str, columns, *, extras: bool = False, skip=frozenset()) -> str:
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

    def session_index(self) -> dict[str, SessionIndexEntry]:
        """``sid -> (raw id, day, scope facts)`` for every session of the store: one
        statement over ``sessions``, plus one small one per session with no sane time."""
        if self._index is not None:
            return self._index
        index: dict[str, SessionIndexEntry] = {}
        cols = self.columns["sessions"]
        extra = ", ".join(c if c in cols else "NULL" for c in ("ended_at", "source", "cwd", "parent_session_id"))
        rows = self._query(f"SELECT id, started_at, {extra} FROM sessions", what="sessions_scan")
        for raw_id, started, ended_at, source, cwd, parent in rows:
            index[str(raw_id)] = SessionIndexEntry(
                raw_id,
                self.place_session(raw_id, started, ended_at),
                _text_or_none(source),
                _text_or_none(cwd),
                None if parent is None else str(parent) or None,
            )
        self._index = index
        return index

    def _fallback_day(self, raw_id, ended_at) -> str | None:
        """SPEC §2 for a session whose ``started_at`` is not sane (rare: one statement each)."""
        times = self._query(
            "SELECT timestamp FROM messages WHERE session_id = ?", (raw_id,), what="message_times_by_session"
        )
        ms = session_start_ms(None, (t for (t,) in times), ended_at, self.now_s)
        return None if ms is None else ms_day(ms)

    # -- one day's sessions, whole, in one read transaction ---------------------

    def read_day(self, day: str, sessions: list[tuple[str, object]]) -> list[SessionBundle]:
        """The given ``(sid, raw id)`` sessions of ``day``, whole, from ONE read
        transaction (SPEC §1), in statements of ``SESSION_CHUNK`` sessions.

        A session deleted since the index scan is simply absent. Memory: the day's sessions.
        """
        return self.read_day_lineage(day, sessions).bundles

    def read_day_lineage(
        self, day: str, sessions: list[tuple[str, object]], ancestors: list[tuple[str, object]] = ()
    ) -> DayRead:
        """:meth:`read_day`, and in the same read transaction, when the store's rows can
        be copies (schema 23+, D20), the identity columns of the rows of ``ancestors``
        (``(sid, raw id)`` of the sessions' ancestors on other days): one statement per
        ``SESSION_CHUNK`` of them, none when they are all on the day."""
        read = DayRead([], grouped=copies.applies(self.columns["messages"]))
        if not sessions:
            return read
        with self.snapshot():
            for start in range(0, len(sessions), SESSION_CHUNK):
                chunk = sessions[start : start + SESSION_CHUNK]
                read.bundles += self._read_chunk(day, [c[0] for c in chunk], [c[1] for c in chunk])
            if read.grouped:
                names = [(name, None, None) for name in copies.IDENTITY_COLUMNS]
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
        before = _bad_text_count()
        sessions = self._query(
            f"SELECT {self._select_list('sessions', SESSION_COLUMNS, extras=True, skip=V23_SESSION_COLUMNS)} "
            f"FROM sessions WHERE id IN ({marks})",
            raw_ids,
            what="sessions_by_id",
        )
        messages = self._query(
            f"SELECT {self._select_list('messages', MESSAGE_COLUMNS, extras=True, skip=V23_MESSAGE_COLUMNS)} "
            f"FROM messages "
            f"WHERE session_id IN ({marks}) ORDER BY session_id, id",
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
        rows = {str(r[0]): dict(zip(s_names, r)) for r in sessions}  # zip stops before the unknown columns
        missing = self._resolve_prompts(list(rows.values()))
        bad = _bad_cells(sessions, messages, rows, self.selected, self._unknown) if _bad_text_count() != before else {}
        msgs_by_sid: dict[str, list[dict]] = defaultdict(list)
        for row in messages:
            msg = dict(zip(m_names, row))
            msgs_by_sid[str(msg["session_id"])].append(msg)
        usage_by_sid: dict[str, list[dict]] = defaultdict(list)
        for row in usage:
            u = dict(zip(u_names, row))
            usage_by_sid[str(u["session_id"])].append(u)
        s_extras = {str(r[0]): r[len(s_names) :] for r in sessions} if self._unknown["sessions"] else None
        m_extras: dict[str, dict] | None = None
        if self._unknown["messages"]:
            m_extras = defaultdict(dict)
            for row in messages:
                m_extras[str(row[1])][row[0]] = row[len(m_names) :]
        out = []
        for sid in sids:
            session = rows.get(sid)
            if session is None:  # deleted between the index scan and now
                continue
            session["id"] = sid
            msgs = msgs_by_sid.get(sid, [])
            msgs.sort(key=_mid_key)
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
    # ``sessions`` are built by :mod:`hermes_assets.lib.fingerprint` on top of
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

    def fetch_raw(self, sql: str, params: Iterable = ()) -> list[tuple]:
        """One statement (its own short read transaction, busy retry), TEXT cells as ``bytes``.

        Nothing is decoded: change detection compares bytes, so a cell that is not
        valid UTF-8 costs nothing and never fails the statement.
        """
        factory = self._conn.text_factory
        self._conn.text_factory = bytes
        try:
            return self._query_once(sql, params)
        finally:
            self._conn.text_factory = factory

    def place_session(self, raw_id, started, ended_at) -> str | None:
        """The day of one session from its cells, exactly as :meth:`session_index` places it (SPEC §2)."""
        ms = sane_instant(started, self.now_s)
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


def _text_or_none(value) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _mid_key(msg: dict):
    mid = msg["id"]
    return (0, mid) if isinstance(mid, int) else (1, str(mid))


def _bad_text_count() -> int:
    return _BAD_TEXT_SEEN[0]


def _bad_cells(
    sessions: list[tuple],
    messages: list[tuple],
    resolved: dict[str, dict],
    selected: dict[str, list[str]],
    unknown: dict[str, list[str]],
) -> dict[str, list]:
    """``sid -> [(table, column, mid)]`` of the cells :func:`_decode_text` had to repair
    (``resolved``: the session rows with their prompts in place, D19)."""
    out: dict[str, list] = defaultdict(list)
    s_names = selected["sessions"] + unknown["sessions"]
    for row in sessions:
        for name, value in zip(s_names, row):
            if type(value) is BadText:
                out[str(row[0])].append(("sessions", name, None))
        prompt = resolved[str(row[0])]["system_prompt"]
        if type(prompt) is BadText and prompt is not row[s_names.index("system_prompt")]:
            out[str(row[0])].append(("sessions", "system_prompt", None))
    m_names = selected["messages"] + unknown["messages"]
    for row in messages:
        for name, value in zip(m_names, row):
            if type(value) is BadText:
                out[str(row[1])].append(("messages", name, row[0]))
    return out
