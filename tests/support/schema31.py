"""Schema-31 stores (Hermes v0.22) written with raw SQL, for tests that run in CI.

CI has no Hermes v0.22 (it installs the same module names as hermes-agent 0.19,
so the two never share a venv). These stores have v0.22's table layout, built
from the project's own column lists (``hermes_assets.lib.schemas``, which name
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

from hermes_assets.lib import schemas

SCHEMA_VERSION = 31


def _column_sql(name: str, sql_type: str) -> str:
    if name == "id":
        return ""  # declared by the caller (the primary keys differ)
    return f'"{name}" {sql_type}'


def create_layout(conn: sqlite3.Connection, *, extra_session_columns: dict | None = None,
                  extra_message_columns: dict | None = None) -> None:
    """``schema_version`` (31), ``system_prompts``, ``sessions``, ``messages`` and
    ``session_model_usage`` with every schema-31 column (and, for a "newer Hermes",
    the extra ``{name: SQLite type}`` columns given)."""
    sessions = ["id TEXT PRIMARY KEY"] + [_column_sql(n, t) for n, t, _ in schemas.SESSION_COLUMNS if n != "id"]
    sessions += [f'"{n}" {t}' for n, t in (extra_session_columns or {}).items()]
    messages = ["id INTEGER PRIMARY KEY AUTOINCREMENT"]
    messages += [_column_sql(n, t) for n, t, _ in schemas.MESSAGE_COLUMNS if n != "id"]
    messages += [f'"{n}" {t}' for n, t in (extra_message_columns or {}).items()]
    usage = [f'"{n}" {t}' for n, t, _ in schemas.USAGE_COLUMNS]
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

    def __enter__(self) -> "Schema31Store":
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
        row = {"session_id": sid, "role": role, "content": content, "timestamp": timestamp, "active": 1,
               "compacted": 0, **columns}
        return self._insert("messages", row)

    def sql(self, statement: str, params=()) -> None:
        self.conn.execute(statement, params)
