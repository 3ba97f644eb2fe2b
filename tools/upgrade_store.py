#!/usr/bin/env python3
"""upgrade_store.py -- a copy of a Hermes store after one writable open by the installed Hermes.

    python tools/upgrade_store.py SRC_STATE_DB OUT_DIR

Copies SRC_STATE_DB to OUT_DIR/state.db and opens the copy once with the
``hermes_state.SessionDB`` of the interpreter's hermes-agent, then closes it:
what a user's store goes through when a newer Hermes starts on it. Hermes
migrates the schema in place (``ALTER TABLE ... ADD COLUMN``: the new columns
land at the END, so the physical column order differs from a fresh store's)
and, from 0.19.0 on, seeds ``session_model_usage`` from each session's totals.

``tests/fixtures/oldest_upgraded`` is ``tests/fixtures/oldest`` upgraded by
hermes-agent 0.19.0 (the project's test venv):

    .venv/bin/python tools/upgrade_store.py tests/fixtures/oldest/state.db /tmp/upgraded

The source is never opened: only the copy is.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path


def upgrade(src: Path, out_dir: Path) -> Path:
    from hermes_state import SessionDB  # the installed Hermes: the one whose migration we want

    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / "state.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{dest}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(src, dest)
    SessionDB(db_path=dest).close()
    # one self-contained file, like the shipped fixtures: the migration's pages folded into the db
    conn = sqlite3.connect(dest)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{dest}{suffix}").unlink(missing_ok=True)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path, help="the store to upgrade (only read, through a copy)")
    ap.add_argument("out_dir", type=Path, help="folder for the upgraded state.db")
    args = ap.parse_args()
    print(upgrade(args.src, args.out_dir))


if __name__ == "__main__":
    main()
