#!/usr/bin/env python3
"""What redaction costs: on a store's text cells alone, or in a whole capture, on and off.

Not a test. Two modes:

``STORE``: reads every text cell redaction looks at (the messages' and sessions' TEXT
columns but ids) from a read-only connection, then times, in CPU seconds, the one-pass
RE2 screen of every cell and the whole redaction (screen + the flagged cells through the
Python patterns). Nothing is written.

``--messages N``: a generated store of at least N messages (bench/run.py's medium store,
multiplied by tools/multiply_db.py; cached in --cache-dir), copied once, then ``--rounds``
rounds, each running every setting of ``HERMES_ASSETS_REDACT_SECRETS`` (``--settings``,
default ``off,on``; the order reversed every other round): one whole capture of every day
(``dg launch --partition-range``, a fresh instance and warehouse) and the library alone
(read + project + stage, no Dagster; ``--library-only`` leaves the captures out), each a
process measured from its start: wall time, CPU (user + system) of the whole process tree
(a forkserver's workers included), the peak summed RSS and PSS of the tree, and the
1-minute load average before it. The share redaction costs is the median over rounds of
on against off. Each run's ``DAGSTER_HOME`` holds a copy of the rule set as a first run
leaves it (``redaction-rules/``: a run that starts without it prints and parses the rule
file once, about 0.7 s of CPU, and compiles the screen for Hyperscan, about 0.3 s; ``--cold-rules``
measures that run). It can take many
minutes on a 1M-message store: run it in the background.

    python bench/redaction_cost.py /tmp/hermes-bench/medium/state.db
    python bench/redaction_cost.py --messages 1000000 --json /tmp/redaction-1m.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
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


def warm_rules(into: Path) -> Path:
    """A folder holding the rule set's private copy as a first run leaves it (then copied into each
    run's ``DAGSTER_HOME``)."""
    from hermes_assets.lib.redaction import fast_screen, screen
    from hermes_assets.lib.redaction.redactor import rule_matcher

    into.mkdir(parents=True, exist_ok=True)
    # the rule set's copy, and the screen compiled by Hyperscan (where it installs), as a run keeps them
    fast_screen.ColumnScreen(None, screen.hyperscan_parts(rule_matcher(str(into))), [], str(into))
    return into / "redaction-rules"


def _one(args, store: Path, facts: dict, setting: str, here: Path, rules: Path | None, workers: str) -> dict:
    """One setting's whole capture (unless ``--library-only``) and library run."""
    out: dict = {"load": {}}
    home = here / "dagster_home"
    if not args.library_only:
        warehouse = str(here / "warehouse")
        env = dagster_env(home, store, warehouse, facts["first_day"])
        env.update(HERMES_ASSETS_REDACT_SECRETS=setting, HERMES_ASSETS_WORKERS=workers)
        if rules is not None:
            shutil.copytree(rules, home / "redaction-rules")
        out["load"]["capture"] = os.getloadavg()[0]
        print(f"{setting}: the whole capture (load {out['load']['capture']:.2f}) ...", file=sys.stderr)
        run = launch(env, "--partition-range", f"{facts['first_day']}...{facts['last_day']}")
        out["capture"] = {k: run[k] for k in ("seconds", "cpu", "rss_mb", "pss_mb", "processes")}
        out["gateway_rows"] = gateway_rows(warehouse)
        shutil.rmtree(here, ignore_errors=True)
    keys = here / "library-key"
    keys.mkdir(parents=True, exist_ok=True)
    if rules is not None:
        shutil.copytree(rules, keys / "redaction-rules")
    out["load"]["library"] = os.getloadavg()[0]
    print(f"{setting}: the library alone (load {out['load']['library']:.2f}) ...", file=sys.stderr)
    lib = measure([PY, "-c", _LIBRARY, str(store), workers, setting, str(keys)])
    out["library"] = {
        **{k: lib[k] for k in ("seconds", "cpu", "rss_mb", "pss_mb", "processes")},
        "rows": last_json(lib)["rows"],
    }
    shutil.rmtree(here, ignore_errors=True)
    return out


def capture_cost(args) -> dict:
    """Whole captures and the library alone, each setting once per round (the order alternating), on
    one private copy of the store."""
    source = ensure_messages(args.messages, Path(args.cache_dir))
    facts = store_facts(source)
    work = Path(tempfile.mkdtemp(prefix="hermes-redaction-bench-"))
    figures: dict = {"store": str(source), "cores": os.cpu_count(), **facts, "rounds": []}
    workers = str(args.workers or os.cpu_count() or 1)
    settings = args.settings.split(",")
    try:
        store = private_copy(source, work / "hermes")
        rules = None if args.cold_rules else warm_rules(work / "rules")
        for r in range(args.rounds):
            done: dict = {}
            for setting in settings if r % 2 == 0 else settings[::-1]:
                done[setting] = _one(args, store, facts, setting, work / f"{r}-{setting}", rules, workers)
            figures["rounds"].append(done)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for part in ("capture", "library"):
        shares = [
            (done["on"][part]["cpu"] - done["off"][part]["cpu"]) / done["off"][part]["cpu"]
            for done in figures["rounds"]
            if {"on", "off"} <= set(done) and part in done["on"]
        ]
        if shares:
            figures[f"{part}_cpu_shares"] = shares
            figures[f"{part}_cpu_share"] = statistics.median(shares)
    return figures


def report(f: dict) -> None:
    print(
        f"\nstore: {f['store']} ({f['sessions']:,} sessions, {f['messages']:,} messages, "
        f"{f['first_day']} .. {f['last_day']}); {f['cores']} cores; {os.getloadavg()[0]:.2f} load now\n"
    )
    print(f"  {'':<46} {'wall':>9} {'CPU':>9} {'peak RSS':>10} {'peak PSS':>10}  load before")
    for r, done in enumerate(f["rounds"], 1):
        for setting, s in done.items():
            for part, name in (("capture", "whole capture (dg launch)"), ("library", "library alone")):
                if part not in s:
                    continue
                m = s[part]
                print(
                    f"  {f'round {r}: ' + name + ', redaction ' + setting:<46} {m['seconds']:>7.1f} s {m['cpu']:>7.1f} s "
                    f"{m['rss_mb']:>7.0f} MB {m['pss_mb']:>7.0f} MB  {s['load'][part]:.2f}"
                )
    for part in ("capture", "library"):
        if f"{part}_cpu_share" in f:
            each = ", ".join(f"{x:+.1%}" for x in f[f"{part}_cpu_shares"])
            print(
                f"  redaction costs {f[f'{part}_cpu_share']:+.1%} of the {part}'s CPU (median of {each}; target <= 15%)"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", nargs="?", help="a state.db: time redaction alone over its cells")
    ap.add_argument("--messages", type=int, help="a generated store of at least this many messages: whole captures")
    ap.add_argument("--cache-dir", default=os.environ.get("HERMES_BENCH_CACHE", "/tmp/hermes-bench"))
    ap.add_argument("--settings", default="off,on", help="HERMES_ASSETS_REDACT_SECRETS values, in order")
    ap.add_argument("--workers", type=int, help="HERMES_ASSETS_WORKERS of the runs (default: the CPU count)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of every setting, the order alternating")
    ap.add_argument("--library-only", action="store_true", help="leave the whole captures out")
    ap.add_argument("--cold-rules", action="store_true", help="each run starts without the rule set's copy")
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
