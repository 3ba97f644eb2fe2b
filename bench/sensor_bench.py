#!/usr/bin/env python3
"""Sensor tick times on a big Hermes store (SPEC §8, D17).

Not a test: it measures, on a private copy of the store (never the original):

  first tick          no cursor yet: every day of the store is requested (tier 1 and tier 2 of every day)
  no-change tick      store files unchanged and the rotation idle: two stat() calls, no SQL (target < 5 ms)
  change tick         after one real Hermes write (append_message, end_session,
                      set_session_title through hermes_state.SessionDB, real clock)
  live change tick    p50/p95 over --live-ticks ticks, one a second, while
                      tools/live_writer.py writes the store (target p95 < 200 ms); apart, those past
                      the rotation after a full pass, and the kept tier 2 (bench/kept_tier2.py)
  rotation bound      a same-length in-place edit of one system_prompt (raw SQL, on the day the
                      rotation digested last: the worst case): ticks until its day is requested
                      (bound: 16)
  breakdown           the statements of a change tick, one by one

each for the core (``watch.plan_tick``) and, for the no-change and change
ticks, for the whole Dagster sensor evaluation (``build_sensor_context`` +
``evaluate_tick``). Figures depend on the machine's load: say so when quoting them.

    python bench/sensor_bench.py                                 # /tmp/bench/large/state.db
    python bench/sensor_bench.py --store /tmp/bench/medium/state.db
    python bench/sensor_bench.py --json                          # last line: flat JSON (bench/run.py)

Make the large store as in tools/README.md (multiply_db.py, ~1.07M messages).
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _copy_store(source: Path, work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    dest = work / "state.db"
    for suffix in ("-wal", "-shm", "-journal"):  # a previous run's: they would not match the new copy
        Path(str(dest) + suffix).unlink(missing_ok=True)
    for suffix in ("", "-wal"):
        src = Path(str(source) + suffix)
        if src.exists():
            shutil.copyfile(src, str(dest) + suffix)
    return dest


def _facts(db: Path) -> dict:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        prompts = conn.execute(
            "SELECT total(length(CAST(system_prompt AS BLOB))) + total(length(CAST(model_config AS BLOB))) "
            "FROM sessions"
        ).fetchone()[0]
        if "system_prompts" in tables:  # schema 25+: prompts stored once, outside the sessions rows
            prompts += conn.execute("SELECT total(length(CAST(prompt AS BLOB))) FROM system_prompts").fetchone()[0]
        return {
            "sessions": conn.execute("SELECT count(*) FROM sessions").fetchone()[0],
            "messages": conn.execute("SELECT count(*) FROM messages").fetchone()[0],
            "usage_rows": (
                conn.execute("SELECT count(*) FROM session_model_usage").fetchone()[0]
                if "session_model_usage" in tables
                else 0
            ),
            "sessions_mb": round(prompts / 1e6, 1),
            "db_mb": round(db.stat().st_size / 1e6),
        }
    finally:
        conn.close()


def _stats(values_ms: list[float]) -> dict:
    ordered = sorted(values_ms)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
        "n": len(ordered),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="/tmp/bench/large/state.db", help="source store (copied first)")
    ap.add_argument("--work", help="where to put the copy (default: a temp dir, removed at the end)")
    ap.add_argument("--repeat", type=int, default=200, help="no-change ticks to time")
    ap.add_argument("--changes", type=int, default=6, help="change ticks to time per kind of write")
    ap.add_argument("--json", action="store_true", help="print a flat JSON object as the last line")
    ap.add_argument("--live-ticks", type=int, default=20, help="change ticks with a live writer (0: none)")
    ap.add_argument("--live-rate", type=float, default=5.0, help="live writer operations per second")
    ap.add_argument("--live-interval", type=float, default=1.0, help="seconds between live ticks")
    args = ap.parse_args()

    source = Path(args.store)
    if not source.is_file():
        raise SystemExit(f"{source} does not exist: make it as in tools/README.md")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="sensor-bench-"))
    os.environ["HERMES_HOME"] = str(work / "hermes-home")  # hermes_state reads it at import
    os.environ.pop("HERMES_STATE_DB", None)
    os.environ.setdefault("HERMES_ASSETS_LOG_FORMAT", "json")
    try:
        figures = run(source, work, args)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    _report(figures, args.json)


def run(source: Path, work: Path, args) -> dict:
    import logging

    import structlog

    from hermes_assets.lib.basics import logs
    from hermes_assets.lib.changes import attempts, watch
    from hermes_assets.lib.changes.fingerprint import Fingerprinter
    from hermes_assets.lib.changes.usage_marks import usage_changes
    from hermes_assets.lib.source.state_db import StoreReader
    from hermes_assets.lib.source.stores import Store

    t = time.perf_counter()
    db = _copy_store(source, work)
    figures: dict = {
        "store": str(source),
        "copy_s": round(time.perf_counter() - t, 1),
        **_facts(db),
        "load_avg_1m_start": round(os.getloadavg()[0], 2),
    }
    store = Store(str(db))

    # the sensor logs one line per tick: keep it, but into /dev/null, so printing is not measured
    logs.configure("json", stream=open(os.devnull, "w"))
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))

    def succeeded(run_keys):  # every run the bench "requests" succeeds (the daemon's runs do, mostly)
        return {key: attempts.SUCCEEDED for key in run_keys}

    paths: dict[str, int] = {}  # how each tick whose files changed read tier 1 (wal_delta), by reason

    def tick(cursor):
        t0 = time.perf_counter()
        plan = watch.plan_tick([store], cursor, is_partition=lambda day: True, outcomes=succeeded)
        ms = (time.perf_counter() - t0) * 1000
        for scan in plan.scans:
            if scan.status in (watch.READ, watch.REPLACED, watch.NEW):
                key = "delta" if scan.delta else f"full: {scan.full_reason}"
                paths[key] = paths.get(key, 0) + 1
        return plan, ms

    def settle(cursor):
        """Tick through the rotation (16 ticks after the files last changed); returns the cursor."""
        times = []
        for _ in range(watch.ROTATION_TICKS + 1):
            plan, ms = tick(cursor)
            assert not plan.requests, plan.requests
            cursor = plan.cursor_json
            times.append(ms)
        return cursor, times

    plan, figures["first_tick_ms"] = tick(None)
    figures["first_tick_days"] = len(plan.requests)
    figures["days"] = len(plan.cursor.stores[str(db)].days)
    cursor = plan.cursor_json
    figures["cursor_bytes"] = len(cursor)
    cursor, rotation_ticks = settle(cursor)
    _put(figures, "rotation_only_tick", _stats(rotation_ticks[:-1]))

    no_change = []
    for _ in range(args.repeat):
        plan, ms = tick(cursor)
        assert not plan.requests and plan.scans[0].status == watch.UNCHANGED
        no_change.append(ms)
    _put(figures, "no_change_tick", _stats(no_change))

    # the same, through Dagster: build_sensor_context + evaluate_tick of the real sensor
    import dagster as dg

    from hermes_assets.definitions import defs as lazy_defs
    from hermes_assets.defs import sensor_cursor
    from hermes_assets.defs.resources import HermesStores, HermesWarehouse

    definitions = lazy_defs()
    sensor = definitions.resolve_sensor_def("hermes_state_sensor")
    resource = HermesStores(state_db=str(db))
    warehouse = HermesWarehouse(root=str(db.parent / "warehouse"))  # the sensor looks at it before it requests runs
    instance = dg.DagsterInstance.ephemeral()  # one, as the daemon has; else each context builds its own

    def sensor_tick(cur):
        ctx = dg.build_sensor_context(
            cursor=cur,
            definitions=definitions,
            resources={"hermes": resource, "warehouse": warehouse},
            instance=instance,
        )
        t0 = time.perf_counter()
        data = sensor.evaluate_tick(ctx)
        return data, (time.perf_counter() - t0) * 1000

    sensor_no_change = [sensor_tick(cursor)[1] for _ in range(min(args.repeat, 50))]
    _put(figures, "sensor_no_change_tick", _stats(sensor_no_change))

    # change ticks: one real Hermes write each, then one tick
    import hermes_state

    writer = hermes_state.SessionDB(db_path=db)
    try:
        row = writer._conn.execute(
            "SELECT id FROM sessions WHERE ended_at IS NULL ORDER BY started_at DESC LIMIT 1"
        ).fetchone()
        sid = row[0] if row else writer.create_session(f"bench_{int(time.time())}", "cli")
        kinds = {
            "append_message": lambda i: writer.append_message(sid, "user", f"bench message {i}"),
            "set_session_title": lambda i: writer.set_session_title(sid, f"bench title {time.time_ns()}"),
            "end_or_reopen": lambda i: (
                writer.end_session(sid, "cli_close") if i % 2 == 0 else writer.reopen_session(sid)
            ),
        }
        change_all = []
        for kind, write in kinds.items():
            times = []
            for i in range(args.changes):
                write(i)
                plan, ms = tick(cursor)
                assert len(plan.requests) == 1, (kind, plan.requests)
                cursor = plan.cursor_json
                times.append(ms)
            change_all += times
            figures[f"change_tick_{kind}_p50_ms"] = statistics.median(times)
        _put(figures, "change_tick", _stats(change_all))

        sensor_change = []
        for i in range(args.changes):
            writer.append_message(sid, "assistant", f"bench reply {i}")
            data, ms = sensor_tick(cursor)
            assert data.run_requests, data  # the day's run (the analytics may have one of their own)
            cursor = sensor_cursor.state_of(instance, data.cursor)  # Dagster keeps a summary; the core reads the state
            sensor_change.append(ms)
        _put(figures, "sensor_change_tick", _stats(sensor_change))
    finally:
        writer.close()

    if args.live_ticks:
        cursor = _live(figures, db, work, tick, cursor, args)
    cursor, _ = settle(cursor)
    cursor = _rotation_bound(figures, db, tick, cursor)

    # where a change tick's time goes (one statement at a time)
    since = json.loads(cursor)["stores"][str(db)]["max_mid"]
    writer = hermes_state.SessionDB(db_path=db)
    try:
        writer.append_message(sid, "user", "bench: breakdown")
    finally:
        writer.close()
    state = json.loads(cursor)["stores"][str(db)]
    t0 = time.perf_counter()
    identity = watch.file_identity(str(db))
    figures["breakdown_stat_ms"] = (time.perf_counter() - t0) * 1000
    with StoreReader(store) as reader:
        figures["breakdown_open_ms"] = (time.perf_counter() - t0) * 1000 - figures["breakdown_stat_ms"]
        t1 = time.perf_counter()
        fp = Fingerprinter(reader)
        share = sorted(state["days"], key=lambda d: (state["days"][d][2], d))[: state["rotation"]["share"] or 1]
        for name, call in (
            ("schema", lambda: None),
            ("marks", reader.message_marks),
            ("new_messages", lambda: reader.sessions_with_messages_after(since)),
            ("usage", lambda: usage_changes(fp, state["usage"])),
            ("tier1", fp.tier1),
            ("tier2_share", lambda: fp.tier2(share)),
        ):
            result = call()
            figures[f"breakdown_{name}_ms"] = (time.perf_counter() - t1) * 1000
            t1 = time.perf_counter()
        figures["breakdown_tier2_share_days"] = len(share)
        assert result is not None
    figures["per_1000_sessions_change_ms"] = figures["change_tick_p50_ms"] / figures["sessions"] * 1000
    figures["tier1_paths"] = dict(sorted(paths.items()))
    figures["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    assert identity is not None
    return figures


def _live(figures: dict, db: Path, work: Path, tick, cursor: str, args) -> str:
    """Change ticks while tools/live_writer.py writes (real clock, WAL, mutations)."""
    writer_script = live_writer_script()
    if not writer_script.is_file():
        figures["live_change_tick"] = f"skipped: {writer_script} not found"
        return cursor
    env = {**os.environ, "HERMES_HOME": str(db.parent)}
    duration = args.live_ticks * args.live_interval + 30
    proc = subprocess.Popen(
        [sys.executable, str(writer_script), str(db), "--rate", str(args.live_rate), "--duration", str(duration)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    from bench.kept_tier2 import KeptTier2

    times, days, kept = [], [], KeptTier2(db)
    try:
        time.sleep(2)  # the writer opens the store and starts writing
        for _ in range(args.live_ticks):
            time.sleep(args.live_interval)
            before = kept.days()
            plan, ms = tick(cursor)
            cursor = plan.cursor_json
            times.append(ms)
            days.append(len(plan.requests))
            kept.tick(plan, ms, before)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    cursor = tick(cursor)[0].cursor_json  # what the writer committed after the last timed tick
    _put(figures, "live_change_tick", _stats(times))
    if kept.later:  # past the rotation's refill of the kept tier 2 (quiet ticks only add to it)
        _put(figures, "live_past_rotation_change_tick", _stats(kept.later))
    figures["live_change_tick_days_requested_mean"] = round(sum(days) / len(days), 2)
    figures["live_change_ticks_with_requests"] = sum(1 for d in days if d)
    figures.update(kept.figures())
    return cursor


def live_writer_script() -> Path:
    """The project's live Hermes writer (``tools/live_writer.py``)."""
    return REPO / "tools" / "live_writer.py"


def _rotation_bound(figures: dict, db: Path, tick, cursor: str) -> str:
    """Ticks until a same-length in-place system_prompt edit is requested (SPEC §8 step 2: <= 16).

    The edited session is on the day the rotation digested last (the worst case),
    and the edit keeps every tier-1 column, so only the rotation can see it.
    """
    state = json.loads(cursor)["stores"][str(db)]
    day = max(state["days"], key=lambda d: (state["days"][d][2], d))
    start = calendar.timegm(time.strptime(day, "%Y-%m-%d"))
    conn = sqlite3.connect(db)
    try:
        sid, prompt = conn.execute(
            "SELECT id, system_prompt FROM sessions WHERE started_at >= ? AND started_at < ? AND system_prompt <> '' "
            "ORDER BY started_at LIMIT 1",
            (start + 1, start + 86399),
        ).fetchone()
        edited = ("X" if prompt[0] != "X" else "Y") + prompt[1:]
        conn.execute("UPDATE sessions SET system_prompt = ? WHERE id = ?", (edited, sid))
        conn.commit()
    finally:
        conn.close()
    for n in range(1, 40):
        plan, _ = tick(cursor)
        cursor = plan.cursor_json
        if any(d == day for d, _ in plan.requests):
            figures["rotation_bound_ticks"] = n
            break
    else:
        figures["rotation_bound_ticks"] = "not seen in 40 ticks"
    return cursor


def _put(figures: dict, name: str, stats: dict) -> None:
    for key in ("p50", "p95", "max"):
        figures[f"{name}_{key}_ms"] = stats[key]
    figures[f"{name}_n"] = stats["n"]


def _report(figures: dict, as_json: bool) -> None:
    from bench.kept_tier2 import KeptTier2

    print(
        f"\nsensor ticks on a copy of {figures['store']}: {figures['sessions']:,} sessions, "
        f"{figures['messages']:,} messages, {figures['db_mb']:,} MB file, "
        f"{figures['sessions_mb']} MB of prompts/configs in sessions, {figures['days']} days; "
        f"{os.cpu_count()} cores\n"
    )
    rows = [
        ("first tick (no cursor)", figures["first_tick_ms"], f"{figures['first_tick_days']} days requested"),
        ("rotation-only tick p50 (files unchanged)", figures["rotation_only_tick_p50_ms"], ""),
        ("no-change tick p50 (core)", figures["no_change_tick_p50_ms"], "target < 5 ms"),
        ("no-change tick p95 (core)", figures["no_change_tick_p95_ms"], ""),
        ("no-change tick p50 (Dagster evaluate_tick)", figures["sensor_no_change_tick_p50_ms"], ""),
        ("change tick p50 (core)", figures["change_tick_p50_ms"], ""),
        ("change tick p95 (core)", figures["change_tick_p95_ms"], ""),
        ("  after append_message", figures["change_tick_append_message_p50_ms"], ""),
        ("  after set_session_title", figures["change_tick_set_session_title_p50_ms"], ""),
        ("  after end_session / reopen_session", figures["change_tick_end_or_reopen_p50_ms"], ""),
        ("change tick p50 (Dagster evaluate_tick)", figures["sensor_change_tick_p50_ms"], ""),
    ]
    if "live_change_tick_p50_ms" in figures:
        rows += [
            ("live writer: change tick p50 (core)", figures["live_change_tick_p50_ms"], ""),
            (
                "live writer: change tick p95 (core)",
                figures["live_change_tick_p95_ms"],
                f"target < 200 ms, n={figures['live_change_tick_n']}",
            ),
        ]
    rows += KeptTier2.rows(figures)
    rows += [
        ("breakdown: stat db + wal", figures["breakdown_stat_ms"], ""),
        ("breakdown: open + schema probe", figures["breakdown_open_ms"], ""),
        ("breakdown: max mid + sqlite_sequence", figures["breakdown_marks_ms"], ""),
        ("breakdown: new messages (rowid range)", figures["breakdown_new_messages_ms"], ""),
        (
            "breakdown: usage rows written (session_model_usage marks)",
            figures["breakdown_usage_ms"],
            f"{figures['usage_rows']:,} rows",
        ),
        ("breakdown: tier 1 (every day, one statement)", figures["breakdown_tier1_ms"], ""),
        (
            "breakdown: tier 2 (the rotation's share)",
            figures["breakdown_tier2_share_ms"],
            f"{figures['breakdown_tier2_share_days']} of {figures['days']} days",
        ),
        ("change tick per 1,000 sessions", figures["per_1000_sessions_change_ms"], ""),
    ]
    width = max(len(r[0]) for r in rows)
    for name, ms, note in rows:
        print(f"  {name:<{width}}  {ms:>10.3f} ms  {note}")
    print(f"  {'cursor size':<{width}}  {figures['cursor_bytes']:>10,} B")
    for path, n in figures["tier1_paths"].items():
        print(f"  {'tier 1 of ticks whose files changed':<{width}}  {n:>10}  {path}")
    if "live_kept_emptied" in figures:
        print(f"  {'live writer: the kept tier 2 emptied':<{width}}  {KeptTier2.summary(figures)}")
    print(f"  {'rotation: ticks to see a prompt edit':<{width}}  {figures['rotation_bound_ticks']!s:>10}  bound 16")
    load = f"{figures['load_avg_1m_start']} / {figures['load_avg_1m_end']}"
    print(f"  {'load average (1 min), start / end':<{width}}  {load:>10}  (the machine is shared)")
    if as_json:
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
