"""A Hermes process for the fault suite: the real ``SessionDB`` (or plain SQLite for the
rollback-journal cases) holding the store in a given state until told to stop.

Run as ``python -m tests.faults.hermes_process MODE DB`` from the repo root. It
prints ``ready`` once the state is reached, then waits for stdin to close (or
for SIGKILL, which is the point of ``hot-journal``). Modes:

``idle``            a running Hermes: appends one message to ``tui-0`` through
                    ``SessionDB`` and stays open (WAL frames not checkpointed, -shm live)
``hold-immediate``  Hermes mid-write: ``BEGIN IMMEDIATE`` on SessionDB's own
                    connection plus an uncommitted message; commits when stdin closes
``exclusive``       a rollback-journal store (``journal_mode=DELETE``, Hermes on a
                    network filesystem) under ``BEGIN EXCLUSIVE`` with a pending change;
                    commits when stdin closes
``hot-journal``     a rollback-journal store whose writer dirtied the db file
                    (``cache_size=1`` spills pages) and is then killed: a hot journal
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

UNCOMMITTED = "UNCOMMITTED-HERMES-WRITE"


def main() -> None:
    mode, db = sys.argv[1], sys.argv[2]
    os.environ["HERMES_HOME"] = os.path.dirname(db)
    if mode in ("idle", "hold-immediate"):
        import hermes_state

        sdb = hermes_state.SessionDB(db_path=Path(db))
        if mode == "idle":
            sdb.append_message("tui-0", "assistant", "written by a running Hermes")
            ready()
            sys.stdin.read()
            sdb.close()
            return
        conn = sdb._conn  # Hermes's own connection, as _execute_write uses it
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('tui-0', 'assistant', ?, ?)",
            (UNCOMMITTED, time.time()),
        )
        ready()
        sys.stdin.read()
        conn.commit()
        sdb.close()
        return
    conn = sqlite3.connect(db, isolation_level=None)
    if mode == "exclusive":
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("UPDATE sessions SET title = ? WHERE id = 'cli-0'", ("committed after the lock",))
        ready()
        sys.stdin.read()
        conn.execute("COMMIT")
        conn.close()
        return
    if mode == "hot-journal":
        conn.execute("PRAGMA cache_size = 1")  # dirty pages spill into the db file before commit
        conn.execute("BEGIN")
        conn.execute("UPDATE messages SET content = ?", (UNCOMMITTED * 200,))
        conn.execute("UPDATE sessions SET title = ? || id", (UNCOMMITTED,))
        ready()
        time.sleep(600)  # killed with SIGKILL: the journal stays hot
        return
    raise SystemExit(f"unknown mode {mode}")


def ready() -> None:
    print("ready", flush=True)


if __name__ == "__main__":
    main()
