"""Build scenario stores with the REAL Hermes writer (``hermes_state.SessionDB``).

Tests describe a scenario by calling Hermes's own public methods
(``create_session``, ``append_message``, ``end_session``, ``rewind_to_message``,
``archive_and_compact`` ...), so every store a test reads is one Hermes could
have written. Time is simulated: ``hermes_state`` calls ``time.time()`` on its
own module global, which :class:`HermesWriter` swaps for a :class:`TimeShim`
while it is open (the same trick as ``tools/gen_state_db.py``).

Hostile cells that no Hermes API can produce (malformed JSON, invalid UTF-8,
NULL in a NOT NULL column, ...) go through :meth:`HermesWriter.raw_sql`, which
says so in its name.

Usage::

    with HermesWriter(tmp_path / "state.db", home=tmp_path / "home") as w:
        sid = w.session("s1", "cli", cwd="/work/repo")
        w.msg(sid, "user", "hello")
        w.msg(sid, "assistant", "hi", tool_calls=[openai_call("c1", "terminal", {"cmd": "ls"})])
        w.end_session(sid, "cli_close")
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sqlite3
import tempfile
import time as _real_time
from pathlib import Path
from typing import Any

#: 2026-06-01T09:00:00Z: the default start of a scenario's simulated clock.
START_S = 1780304400.0
#: one UTC day in seconds
DAY_S = 86400.0


class Clock:
    """The simulated wall clock shared by the shim and the writer."""

    def __init__(self, now: float):
        self.now = float(now)


class TimeShim:
    """Replaces the ``time`` module inside ``hermes_state`` only.

    ``time()`` returns the simulated clock; everything else (``sleep`` for
    Hermes's lock-retry jitter, ``monotonic``...) is the real module's.
    """

    def __init__(self, clock: Clock):
        self._clock = clock

    def time(self) -> float:
        return self._clock.now

    def __getattr__(self, name):
        return getattr(_real_time, name)


class EmptyStores:
    """One empty store per process, made by ``SessionDB`` itself: a new scenario store starts as
    a copy of it. Hermes's schema set-up syncs to disk some ten times (40-180 ms a store on this
    machine); a copy costs 2 ms, and ``SessionDB`` then opens it as it opens any store of its own."""

    def __init__(self) -> None:
        self._path: Path | None = None

    def path(self, hermes_state) -> Path:
        if self._path is None:
            folder = Path(tempfile.mkdtemp(prefix="hermes-empty-store-"))
            atexit.register(shutil.rmtree, folder, True)
            made = folder / "state.db"
            hermes_state.SessionDB(db_path=made).close()
            self._path = made
        return self._path


EMPTY_STORES = EmptyStores()


def openai_call(call_id: str | None, name: str, arguments: Any, **extra) -> dict:
    """A tool call in the shape real Hermes stores (OpenAI chat completions).

    ``arguments`` that is not a string is JSON-encoded, as the OpenAI SDK does.
    """
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {"type": "function", "function": {"name": name, "arguments": args}, **extra}
    if call_id is not None:
        call = {"id": call_id, "call_id": call_id, **call}
    return call


def flat_call(name: str, arguments: Any, call_id: str | None = None) -> dict:
    """The legacy flat shape ``{"id"?, "name", "arguments"}`` of some older rows."""
    call = {"name": name, "arguments": arguments}
    if call_id is not None:
        call = {"id": call_id, **call}
    return call


class HermesWriter:
    """A real ``SessionDB`` on ``db_path`` with a simulated clock.

    Unknown attributes are forwarded to the ``SessionDB``, so every Hermes
    method is available as ``writer.<method>(...)``; the helpers below only add
    the clock step and return values tests need.
    """

    def __init__(
        self, db_path: Path | str, *, home: Path | str | None = None, start_s: float = START_S, step_s: float = 1.0
    ):
        self.path = Path(db_path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.home = Path(home) if home is not None else self.path.parent
        self.home.mkdir(parents=True, exist_ok=True)
        self.clock = Clock(start_s)
        self.step_s = step_s
        # HERMES_HOME must point at a temp dir before hermes_state is imported
        # (it evaluates its default path at import time) and while it runs.
        self._saved_home = os.environ.get("HERMES_HOME")
        os.environ["HERMES_HOME"] = str(self.home)
        import hermes_state

        self._hs = hermes_state
        self._saved_time = hermes_state.time
        hermes_state.time = TimeShim(self.clock)
        try:
            if not self.path.exists():
                shutil.copyfile(EMPTY_STORES.path(hermes_state), self.path)
            self.db = hermes_state.SessionDB(db_path=self.path)
        except BaseException:
            self._restore()
            raise
        self._fts_triggers_dropped = False

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> HermesWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        db, self.db = getattr(self, "db", None), None
        if db is not None:
            db.close()
            self._restore()

    def _restore(self) -> None:
        self._hs.time = self._saved_time
        if self._saved_home is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = self._saved_home

    def __getattr__(self, name):
        db = self.__dict__.get("db")
        if db is None:
            raise AttributeError(name)
        return getattr(db, name)

    # -- the clock -----------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.now

    def tick(self, seconds: float | None = None) -> float:
        """Advance the simulated clock (default: ``step_s``) and return it."""
        self.clock.now += self.step_s if seconds is None else seconds
        return self.clock.now

    def at(self, epoch_s: float) -> None:
        self.clock.now = float(epoch_s)

    # -- Hermes calls with a clock step ----------------------------------------------

    def session(self, sid: str, source: str = "cli", **kwargs) -> str:
        """``create_session`` one step later; returns the sid."""
        self.tick()
        return self.db.create_session(sid, source, **kwargs)

    def msg(self, sid: str, role: str, content: Any = None, **kwargs) -> int:
        """``append_message`` one step later; returns the new ``messages.id``."""
        self.tick()
        return self.db.append_message(sid, role, content, **kwargs)

    def end(self, sid: str, reason: str = "cli_close") -> float:
        """``end_session`` one step later; returns ``ended_at``."""
        self.tick()
        self.db.end_session(sid, reason)
        return self.clock.now

    def mids(self, sid: str) -> list[int]:
        """Every ``messages.id`` of a session (active or not), ascending."""
        return [r[0] for r in self.query("SELECT id FROM messages WHERE session_id = ? ORDER BY id", (sid,))]

    # -- raw access (hostile cells only) -----------------------------------------------

    def query(self, sql: str, params=()) -> list[tuple]:
        conn = sqlite3.connect(str(self.path))
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def raw_sql(self, sql: str, params=()) -> None:
        """RAW-SQL write for a cell no Hermes API can produce (tests of SPEC §9).

        Hermes's full-text-search triggers are dropped first: they would index
        the hostile value (a 10 MB cell takes seconds), and nothing we read
        depends on them.
        """
        conn = sqlite3.connect(str(self.path), isolation_level=None)
        try:
            if not self._fts_triggers_dropped:
                for (name,) in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'messages_fts%'"
                ).fetchall():
                    conn.execute(f'DROP TRIGGER "{name}"')
                self._fts_triggers_dropped = True
            conn.execute(sql, params)
        finally:
            conn.close()

    def allow_nulls(self, table: str, column: str) -> None:
        """RAW-SQL: drop a ``NOT NULL`` from the schema text, so a test can store NULL.

        Real Hermes declares ``sessions.started_at`` and ``messages.timestamp``
        NOT NULL; other writers (imports, repairs, older tools) need not. The
        schema text is edited with ``writable_schema``; the file stays valid.
        """
        conn = sqlite3.connect(str(self.path), isolation_level=None)
        try:
            (sql,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            ).fetchone()
            needle = f"{column} REAL NOT NULL"
            assert needle in sql, f"{needle!r} not in the schema of {table}"
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute(
                "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?",
                (sql.replace(needle, f"{column} REAL"), table),
            )
            conn.execute("PRAGMA writable_schema = OFF")
        finally:
            conn.close()
        # The writer's own connection caches the old schema: reopen it.
        self.db.close()
        self.db = self._hs.SessionDB(db_path=self.path)
