#!/usr/bin/env python3
"""What redaction costs on a store's text cells, alone (bench/run.py measures it inside the library).

Reads every text cell redaction looks at (the messages' and sessions' TEXT columns but
ids) from a private copy's read-only connection, then times, in CPU seconds, the
one-pass RE2 screen of every cell and the whole redaction (screen + the flagged cells
through the Python patterns). Nothing is written.

    python bench/redaction_cost.py /tmp/hermes-bench/medium/state.db
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time

from hermes_assets.lib.plan import redact


def cells(path: str) -> list:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out: list = []
        for table, columns in (("messages", redact.MESSAGE_TEXT), ("sessions", redact.SESSION_TEXT)):
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            for column in columns:
                if column in present:
                    out += [v for (v,) in conn.execute(f'SELECT "{column}" FROM {table}')]
        return out
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    args = ap.parse_args()
    values = cells(args.store)
    texts = [v for v in values if isinstance(v, str)]
    with tempfile.TemporaryDirectory() as scratch:
        redactor = redact.RedactionConfig(os.path.join(scratch, "redaction.key")).redactor()
        redactor.screen_column(values[:1000])  # Arrow's allocator and RE2 warmed up
        t = time.process_time()
        flagged = redactor.screen_column(values)
        screen = time.process_time() - t
        t = time.process_time()
        changed = redactor.redact_column(values)
        whole = time.process_time() - t
    print(
        json.dumps(
            {
                "cells": len(values),
                "text_cells": len(texts),
                "text_mb": round(sum(map(len, texts)) / 1e6, 1),
                "flagged": len(flagged),
                "changed": len(changed),
                "secrets_by_kind": dict(redactor.counts),
                "screen_cpu_s": round(screen, 3),
                "redaction_cpu_s": round(whole, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
