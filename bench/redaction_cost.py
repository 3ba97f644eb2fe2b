#!/usr/bin/env python3
"""What redaction costs: on a store's text cells alone, or in a whole capture, on and off.

Not a test. Two modes:

``STORE``: reads every text cell redaction looks at (the messages' and sessions' TEXT
columns but ids) from a read-only connection, then times, in CPU seconds, the one-pass
RE2 screen of every cell and the whole redaction (screen + the flagged cells through the
Python patterns). Nothing is written.

``--messages N``: a generated store of at least N messages (bench/run.py's medium store,
multiplied by tools/multiply_db.py; cached in --cache-dir), copied once, then for each
setting of ``HERMES_ASSETS_REDACT_SECRETS`` (``--settings``, default ``off,on``) one whole
capture of every day (``dg launch --partition-range``, a fresh instance and warehouse)
and the library alone (read + project + stage, no Dagster), each a process measured
from its start: wall time, CPU (user + system) of the whole process tree, the peak summed
RSS and PSS of the tree. It can take many minutes on a 1M-message store: run it in the
background.

    python bench/redaction_cost.py /tmp/hermes-bench/medium/state.db
    python bench/redaction_cost.py --messages 1000000 --json /tmp/redaction-1m.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.run import (  # noqa: E402
    _LIBRARY,
    PY,
    dagster_env,
    ensure_messages,
    gateway_rows,
    last_json,
    launch,
    measure,
    private_copy,
    store_facts,
)
from hermes_assets.lib.redaction import session_cells  # noqa: E402
from hermes_assets.lib.redaction.redactor import RedactionConfig  # noqa: E402


def cells(path: str) -> list:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out: list = []
        for table, columns in (("messages", session_cells.MESSAGE_TEXT), ("sessions", session_cells.SESSION_TEXT)):
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            for column in columns:
                if column in present:
                    out += [v for (v,) in conn.execute(f'SELECT "{column}" FROM {table}')]
        return out
    finally:
        conn.close()


def capture_cost(args) -> dict:
    """Whole captures and the library alone, once per setting, on one private copy of the store."""
    source = ensure_messages(args.messages, Path(args.cache_dir))
    facts = store_facts(source)
    work = Path(tempfile.mkdtemp(prefix="hermes-redaction-bench-"))
    figures: dict = {"store": str(source), "cores": os.cpu_count(), **facts, "settings": {}}
    workers = str(args.workers or os.cpu_count() or 1)
    try:
        store = private_copy(source, work / "hermes")
        day_range = f"{facts['first_day']}...{facts['last_day']}"
        for setting in args.settings.split(","):
            here = work / setting
            warehouse = str(here / "warehouse")
            env = dagster_env(here / "dagster_home", store, warehouse, facts["first_day"])
            env.update(HERMES_ASSETS_REDACT_SECRETS=setting, HERMES_ASSETS_WORKERS=workers)
            load = os.getloadavg()[0]
            print(f"{setting}: the whole capture (load {load:.2f}) ...", file=sys.stderr)
            run = launch(env, "--partition-range", day_range)
            rows = gateway_rows(warehouse)
            shutil.rmtree(here, ignore_errors=True)
            library_load = os.getloadavg()[0]
            print(f"{setting}: the library alone (load {library_load:.2f}) ...", file=sys.stderr)
            lib = measure([PY, "-c", _LIBRARY, str(store), workers, setting])
            figures["settings"][setting] = {
                "capture": {k: run[k] for k in ("seconds", "cpu", "rss_mb", "pss_mb", "processes")},
                "library": {
                    **{k: lib[k] for k in ("seconds", "cpu", "rss_mb", "pss_mb", "processes")},
                    "rows": last_json(lib)["rows"],
                },
                "gateway_rows": rows,
                "load": {"capture": load, "library": library_load},
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    on, off = figures["settings"].get("on"), figures["settings"].get("off")
    if on and off:
        for part in ("capture", "library"):
            figures[f"{part}_cpu_share"] = (on[part]["cpu"] - off[part]["cpu"]) / off[part]["cpu"]
    return figures


def report(f: dict) -> None:
    print(
        f"\nstore: {f['store']} ({f['sessions']:,} sessions, {f['messages']:,} messages, "
        f"{f['first_day']} .. {f['last_day']}); {f['cores']} cores; {os.getloadavg()[0]:.2f} load now\n"
    )
    print(f"  {'':<42} {'wall':>9} {'CPU':>9} {'peak RSS':>10} {'peak PSS':>10}  load before")
    for setting, s in f["settings"].items():
        for part, name in (("capture", "whole capture (dg launch)"), ("library", "library alone")):
            m = s[part]
            print(
                f"  {name + ', redaction ' + setting:<42} {m['seconds']:>7.1f} s {m['cpu']:>7.1f} s "
                f"{m['rss_mb']:>7.0f} MB {m['pss_mb']:>7.0f} MB  {s['load'][part]:.2f}"
            )
    for part in ("capture", "library"):
        if f"{part}_cpu_share" in f:
            print(f"  redaction costs {f[f'{part}_cpu_share']:+.1%} of the {part}'s CPU (target <= 15%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", nargs="?", help="a state.db: time redaction alone over its cells")
    ap.add_argument("--messages", type=int, help="a generated store of at least this many messages: whole captures")
    ap.add_argument("--cache-dir", default=os.environ.get("HERMES_BENCH_CACHE", "/tmp/hermes-bench"))
    ap.add_argument("--settings", default="off,on", help="HERMES_ASSETS_REDACT_SECRETS values, in order")
    ap.add_argument("--workers", type=int, help="HERMES_ASSETS_WORKERS of the runs (default: the CPU count)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if (args.store is None) == (args.messages is None):
        ap.error("give a STORE or --messages N")
    if args.messages is not None:
        figures = capture_cost(args)
        report(figures)
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
        return
    values = cells(args.store)
    texts = [v for v in values if isinstance(v, str)]
    with tempfile.TemporaryDirectory() as scratch:
        redactor = RedactionConfig(os.path.join(scratch, "redaction.key")).redactor()
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
