"""Schema-31 stores (Hermes v0.22) written with raw SQL, for tests that run in CI.

CI has no Hermes v0.22 (it installs the same module names as hermes-agent 0.19,
so the two never share a venv). These stores have v0.22's table layout, built
from the project's own column lists (``hermes_assets.lib.basics.schemas``, which name
every schema-31 column with its SQLite type), plus ``schema_version`` and
``system_prompts``. A test writes exactly the rows a case needs; what Hermes
itself writes is held against the committed v0.22.2 fixture
(``tests/fidelity/test_hermes_v022.py``).

Usage::

    store = Schema31Store(tmp_path / "state.db")
    store.session("s1", "cli", started_at=T, prompt="be brief")   # stored once, by hash
    store.message("s1", "user", "hi", timestamp=T + 1, message_uid="u1", display_identity=b"i1")
    store.close()
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from hermes_assets.lib.basics import hermes_tables

SCHEMA_VERSION = 31


def _column_sql(name: str, sql_type: str) -> str:
    if name == "id":
        return ""  # declared by the caller (the primary keys differ)
    return f'"{name}" {sql_type}'


def create_layout(
    conn: sqlite3.Connection, *, extra_session_columns: dict | None = None, extra_message_columns: dict | None = None
) -> None:
    """``schema_version`` (31), ``system_prompts``, ``sessions``, ``messages`` and
    ``session_model_usage`` with every schema-31 column (and, for a "newer Hermes",
    the extra ``{name: SQLite type}`` columns given)."""
    sessions = ["id TEXT PRIMARY KEY"] + [_column_sql(n, t) for n, t, _ in hermes_tables.SESSION_COLUMNS if n != "id"]
    sessions += [f'"{n}" {t}' for n, t in (extra_session_columns or {}).items()]
    messages = ["id INTEGER PRIMARY KEY AUTOINCREMENT"]
    messages += [_column_sql(n, t) for n, t, _ in hermes_tables.MESSAGE_COLUMNS if n != "id"]
    messages += [f'"{n}" {t}' for n, t in (extra_message_columns or {}).items()]
    usage = [f'"{n}" {t}' for n, t, _ in hermes_tables.USAGE_COLUMNS]
    conn.executescript(
        "CREATE TABLE schema_version (version INTEGER NOT NULL);"
        f"INSERT INTO schema_version VALUES ({SCHEMA_VERSION});"
        "CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL);"
        f"CREATE TABLE sessions ({', '.join(sessions)});"
        f"CREATE TABLE messages ({', '.join(messages)});"
        f"CREATE TABLE session_model_usage ({', '.join(usage)});"
    )


def prompt_hash(prompt: str) -> str:
    """How Hermes names a stored prompt: sha256 of its UTF-8, lowercase hex."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


class Schema31Store:
    """A schema-31 store, written row by row with raw SQL (autocommit)."""

    def __init__(self, path: Path | str, **layout):
        self.path = Path(path)
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        create_layout(self.conn, **layout)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Schema31Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _insert(self, table: str, row: dict) -> int:
        names = ", ".join(f'"{n}"' for n in row)
        marks = ", ".join("?" * len(row))
        return self.conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(row.values())).lastrowid

    def prompt(self, prompt: str) -> str:
        """Store a prompt once (as Hermes does); -> its hash."""
        digest = prompt_hash(prompt)
        self.conn.execute("INSERT OR IGNORE INTO system_prompts (hash, prompt) VALUES (?, ?)", (digest, prompt))
        return digest

    def session(self, sid: str, source: str, *, started_at: float, prompt: str | None = None, **columns) -> str:
        """A session; ``prompt`` is stored as v0.22 stores it (by hash, ``system_prompt`` NULL);
        ``columns`` set any column, ``system_prompt`` (inline) and ``system_prompt_hash`` included."""
        row = {"id": sid, "source": source, "started_at": started_at}
        if prompt is not None:
            row["system_prompt_hash"] = self.prompt(prompt)
        row.update(columns)
        self._insert("sessions", row)
        return sid

    def message(self, sid: str, role: str, content: str | None, *, timestamp: float, **columns) -> int:
        """One message row; -> its id. ``active`` defaults to 1, ``compacted`` to 0 (as in v31)."""
        row = {
            "session_id": sid,
            "role": role,
            "content": content,
            "timestamp": timestamp,
            "active": 1,
            "compacted": 0,
            **columns,
        }
        return self._insert("messages", row)

    def sql(self, statement: str, params=()) -> None:
        self.conn.execute(statement, params)


# --------------------------------------------------------------------------
# The sensor's stores: v0.22.2's exact declarations (NOT NULL, defaults, foreign keys)
# and the indexes the sensor uses; every write its own connection and transaction (WAL),
# as a separate Hermes process writes.
# --------------------------------------------------------------------------

#: the v0.22.2 columns of ``sessions``, in its order (name, declaration)
SESSIONS_COLUMNS = (
    ("id", "TEXT PRIMARY KEY"),
    ("source", "TEXT NOT NULL"),
    ("created_source", "TEXT"),
    ("user_id", "TEXT"),
    ("session_key", "TEXT"),
    ("chat_id", "TEXT"),
    ("chat_type", "TEXT"),
    ("thread_id", "TEXT"),
    ("display_name", "TEXT"),
    ("origin_json", "TEXT"),
    ("expiry_finalized", "INTEGER DEFAULT 0"),
    ("model", "TEXT"),
    ("model_config", "TEXT"),
    ("system_prompt", "TEXT"),
    ("system_prompt_hash", "TEXT"),
    ("parent_session_id", "TEXT"),
    ("started_at", "REAL NOT NULL"),
    ("ended_at", "REAL"),
    ("end_reason", "TEXT"),
    ("message_count", "INTEGER DEFAULT 0"),
    ("tool_call_count", "INTEGER DEFAULT 0"),
    ("input_tokens", "INTEGER DEFAULT 0"),
    ("output_tokens", "INTEGER DEFAULT 0"),
    ("cache_read_tokens", "INTEGER DEFAULT 0"),
    ("cache_write_tokens", "INTEGER DEFAULT 0"),
    ("reasoning_tokens", "INTEGER DEFAULT 0"),
    ("cwd", "TEXT"),
    ("git_branch", "TEXT"),
    ("git_repo_root", "TEXT"),
    ("git_metadata_generation", "INTEGER NOT NULL DEFAULT 0"),
    ("billing_provider", "TEXT"),
    ("billing_base_url", "TEXT"),
    ("billing_mode", "TEXT"),
    ("estimated_cost_usd", "REAL"),
    ("actual_cost_usd", "REAL"),
    ("cost_status", "TEXT"),
    ("cost_source", "TEXT"),
    ("pricing_version", "TEXT"),
    ("title", "TEXT"),
    ("title_source", "TEXT"),
    ("last_activity_at", "REAL"),
    ("last_activity_description", "TEXT"),
    ("last_activity_provenance", "TEXT"),
    ("api_call_count", "INTEGER DEFAULT 0"),
    ("handoff_state", "TEXT"),
    ("handoff_platform", "TEXT"),
    ("handoff_error", "TEXT"),
    ("compression_failure_cooldown_until", "REAL"),
    ("compression_failure_error", "TEXT"),
    ("compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_ineffective_count", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_recovery_deadline", "REAL"),
    ("compression_overload_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("profile_name", "TEXT"),
    ("transport_profile", "TEXT"),
    ("rewind_count", "INTEGER NOT NULL DEFAULT 0"),
    ("archived", "INTEGER NOT NULL DEFAULT 0"),
    ("auto_archived", "INTEGER NOT NULL DEFAULT 0"),
    ("pinned", "INTEGER NOT NULL DEFAULT 0"),
    ("hidden", "INTEGER NOT NULL DEFAULT 0"),
    ("last_read_at", "REAL"),
    ("tool_names", "TEXT"),
)

_SCHEMA = f"""
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version VALUES (31);
CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL);
CREATE TABLE sessions ({", ".join(f"{n} {d}" for n, d in SESSIONS_COLUMNS)},
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id),
    FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash));
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    effect_disposition TEXT, timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT,
    reasoning TEXT, reasoning_content TEXT, reasoning_details TEXT, codex_reasoning_items TEXT,
    codex_message_items TEXT, platform_message_id TEXT, observed INTEGER DEFAULT 0,
    _compressed_summary INTEGER NOT NULL DEFAULT 0, active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0, api_content TEXT, display_kind TEXT, display_metadata TEXT,
    display_identity BLOB, display_order INTEGER, message_uid TEXT, absorbed_message_uids TEXT,
    tool_call_uids TEXT, tool_call_uid TEXT);
CREATE TABLE session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '', billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '', task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0, actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT, cost_source TEXT, first_seen REAL, last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task));
CREATE INDEX idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX idx_messages_session ON messages(session_id, timestamp);
CREATE INDEX idx_messages_session_active ON messages(session_id, active, timestamp);
CREATE INDEX idx_session_model_usage_session ON session_model_usage(session_id);
"""


class Store31:
    """A schema-31 store at ``path``; every write is its own committed transaction (WAL)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def sql(self, statement: str, params=()) -> list[tuple]:
        conn = self._connect()
        try:
            return conn.execute(statement, params).fetchall()
        finally:
            conn.close()

    def prompt(self, text: str) -> str:
        """Store a prompt once, as v0.22 does (``INSERT OR IGNORE`` under its SHA-256); its hash."""
        digest = prompt_hash(text)
        self.sql("INSERT OR IGNORE INTO system_prompts (hash, prompt) VALUES (?, ?)", (digest, text))
        return digest

    def session(self, sid: str, started_at: float, *, prompt: str | None = None, **cells) -> str:
        """A session row; its prompt goes to ``system_prompts`` (``sessions.system_prompt`` stays NULL)."""
        if prompt is not None:
            cells["system_prompt_hash"] = self.prompt(prompt)
        cells = {"source": "cli", "created_source": "cli", "model": "model-31", **cells}
        names = ["id", "started_at", *cells]
        self.sql(
            f"INSERT INTO sessions ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
            (sid, started_at, *cells.values()),
        )
        return sid

    def message(self, sid: str, role: str, content: str, timestamp: float) -> int:
        self.sql(
            "INSERT INTO messages (session_id, role, content, timestamp, message_uid) VALUES (?, ?, ?, ?, ?)",
            (sid, role, content, timestamp, hashlib.sha1(f"{sid}{timestamp}".encode()).hexdigest()),
        )
        self.sql("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (sid,))
        return self.sql("SELECT max(id) FROM messages")[0][0]

    def update(self, sid: str, **cells) -> None:
        sets = ", ".join(f"{name} = ?" for name in cells)
        self.sql(f"UPDATE sessions SET {sets} WHERE id = ?", (*cells.values(), sid))
