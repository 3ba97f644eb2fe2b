"""One read-only connection to a Hermes ``state.db`` (SPEC §1 "Read-only, always", "Busy and locked").

The store is live: Hermes writes it in WAL mode while we read. It is opened
with ``mode=ro`` (in a read-only folder, where SQLite cannot create the
``-shm``, immutable or from a copy, since nobody can be writing it there); its
tables and columns are probed; a statement that meets a lock is retried with a
short bounded back-off on the primary result code; and SQLite's failures become
the typed errors of :mod:`hermes_assets.lib.basics.errors`. What is read is
:mod:`hermes_assets.lib.source.state_db`'s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Self

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.source.stores import STORE_FILE, Store
from hermes_assets.lib.source.text_cells import Undecodable, decode_text

log = get_logger()

#: the first table Hermes's schema script creates: with it but without sessions/messages,
#: the store is mid-creation (Hermes runs its schema one statement at a time)
HERMES_FIRST_TABLE = "schema_version"
DEFAULT_BUSY_TIMEOUT_MS = 2000

# SQLite result codes (primary = code & 0xFF).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 5, 6, 8
_SQLITE_CORRUPT, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 11, 14, 26
_READONLY_ROLLBACK = _SQLITE_READONLY | (3 << 8)
_READONLY_CANTINIT = _SQLITE_READONLY | (5 << 8)
_READONLY_DIRECTORY = _SQLITE_READONLY | (6 << 8)


@dataclass
class StoreConnection:
    """A read-only connection to one store. Use as a context manager.

    ``statements`` counts the SQL statements run, by what they read
    (``sessions_scan``, ``sessions_by_id``, ``messages_by_session`` ...): the
    figures behind "the sessions table is scanned once per run".
    """

    store: Store
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    #: the file to open, when it is not the store's own path (a copy read as that store:
    #: the rows still name ``store.path``)
    file: str | None = None

    def __post_init__(self) -> None:
        #: the file opened: ``file``, else the store's own
        self.filename: str = self.store.path if self.file is None else self.file
        self._conn: sqlite3.Connection | None = None
        self._tmpdir: str | None = None
        self.columns: dict[str, set[str]] = {}
        self.tables: set[str] = set()  # the store's tables and indexes, as the probe found them
        self.indexes: set[str] = set()
        self.statements: Counter = Counter()

    # -- opening ------------------------------------------------------------

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        path = self.filename
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

    def _open_in_readonly_directory(self, path: str, first: BaseException | None) -> None:
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

    @property
    def _connection(self) -> sqlite3.Connection:
        """The open connection (a statement before :meth:`open` or after :meth:`close` is a bug)."""
        if self._conn is None:
            raise RuntimeError(f"{self.filename} is not open")
        return self._conn

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
                f"{self.filename} is still being created by Hermes (tables so far: {sorted(tables)}): "
                "nothing to capture yet.",
                path=self.filename,
            )
        if not {"sessions", "messages"} <= tables:
            raise errors.NotAHermesStore(
                f"{self.filename} is a SQLite file but has no sessions/messages tables; "
                "point HERMES_STATE_DB at a Hermes state.db.",
                path=self.filename,
            )
        for table in ("sessions", "messages", "session_model_usage"):
            if table in tables:
                self.columns[table] = {r[1] for r in self._query(f"PRAGMA table_info({table})", what="schema")}

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
        except Undecodable:
            return self._query_decoded_by(decode_text, sql, params)

    def _query_decoded_by(self, text_factory: Callable[[bytes], object], sql: str, params: Iterable) -> list[tuple]:
        """One statement with TEXT cells made by ``text_factory``; the connection's own after it."""
        conn = self._connection
        factory = conn.text_factory
        conn.text_factory = text_factory
        try:
            return self._query_once(sql, params)
        finally:
            conn.text_factory = factory

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction around the statements inside: they all see the same
        state of the store. Keep it short: an open read pins Hermes's WAL (SPEC §1)."""
        self._statement("BEGIN")
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._connection.execute("ROLLBACK")
            raise
        self._statement("COMMIT")  # a read transaction: ends the snapshot, writes nothing

    def _statement(self, sql: str) -> None:
        try:
            self._connection.execute(sql)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _query_once(self, sql: str, params: Iterable = ()) -> list[tuple]:
        conn = self._connection
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = 0.005
        while True:
            try:
                return conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                if isinstance(exc, sqlite3.OperationalError) and "decode" in str(exc) and conn.text_factory is str:
                    raise Undecodable() from exc
                code = getattr(exc, "sqlite_errorcode", 0) or 0
                if code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
                    continue
                raise self._translate(exc) from exc

    def _translate(self, exc: sqlite3.Error) -> errors.HermesAssetsError:
        code = getattr(exc, "sqlite_errorcode", 0) or 0
        path = self.filename
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

    def fetch_raw(self, sql: str, params: Iterable = ()) -> list[tuple]:
        """One statement (its own short read transaction, busy retry), TEXT cells as ``bytes``.

        Nothing is decoded: change detection compares bytes, so a cell that is not
        valid UTF-8 costs nothing and never fails the statement.
        """
        return self._query_decoded_by(bytes, sql, params)
