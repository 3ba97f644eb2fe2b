"""Fault 9: a sensor run and a backfill of the same day at once (SPEC §2 per-day lock).

Two real runs in two processes (forks of the test process): a single-run
backfill over six days, and the run the sensor requests for one day. Test-side
hooks on ``fcntl.flock`` in each process log when it asked for, got and gave
back every day lock; the backfill also holds each lock a little longer, so it
is the slow one, and at one lock waits for the sensor run to queue behind it
(a handshake through a marker file), so the two really meet on one day.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import dagster as dg

from hermes_assets.defs.resources import HermesWarehouse
from tests.defs.harness import EXPOSURES
from tests.faults import forking, helpers
from tests.faults.helpers import (
    DAY1,
    GATEWAY,
    MESSAGES,
    SESSIONS,
    assert_sound,
    is_flagged,
    warehouse_state,
    write_scenario,
)
from tests.support.hermes_writer import START_S

DAY6 = "2026-06-06"
#: how long the backfill holds each day lock (its merge-write made slow on purpose)
HOLD_S = 0.2
#: how long it keeps the contended lock once the sensor run queues behind it
CONTENDED_EXTRA_S = 0.3


def _lock_hooks(who: str, log: Path, work: Path, *, hold: float = 0.0, contend: bool = False) -> None:
    """In a child only: log every day lock (asked, got, released); the backfill (``contend``)
    holds each for ``hold`` seconds and, at its first lock on DAY1, waits until the sensor
    run is queued for that lock before letting go."""
    real_flock = fcntl.flock
    held: dict[int, tuple[str, float, float]] = {}

    def hooked(fd, operation):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if operation == fcntl.LOCK_EX:
            asked = time.monotonic()
            contended = work / "contended"
            if not contend and contended.exists() and contended.read_text() == path:
                (work / "sensor-queued").touch()
            result = real_flock(fd, operation)
            got = time.monotonic()
            held[fd] = (path, asked, got)
            if contend and f"day={DAY1}" in path and _claim(work / "claimed"):
                contended.write_text(path)  # once per backfill, whichever of its processes gets here first
                forking.emit("holding-first-day-lock")
                deadline = time.monotonic() + 60
                while not (work / "sensor-queued").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(CONTENDED_EXTRA_S)
            if hold:
                time.sleep(hold)
            return result
        if operation == fcntl.LOCK_UN and fd in held:
            path, asked, got = held.pop(fd)
            with open(log, "a") as f:
                f.write(
                    json.dumps({"who": who, "path": path, "asked": asked, "got": got, "released": time.monotonic()})
                    + "\n"
                )
        return real_flock(fd, operation)

    fcntl.flock = hooked


def _claim(flag: Path) -> bool:
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _in_child(install, who: str, log: Path, work: Path, run, **hooks):
    def body():
        helpers.forget_instance()
        _lock_hooks(who, log, work, **hooks)
        t0 = time.monotonic()
        outcome = run()
        return {
            "success": outcome.success,
            "start": t0,
            "end": time.monotonic(),
            "failures": [f.message[:500] for f in outcome.failures],
        }

    return forking.fork(body)


def _sensor_run(install, request: dg.RunRequest) -> helpers.Outcome:
    """The run the daemon launches for the sensor's request: its partition, its tags."""
    job = install.definitions().resolve_implicit_global_asset_job_def()
    t0 = time.monotonic()
    result = job.execute_in_process(
        instance=helpers.instance(), partition_key=request.partition_key, tags=dict(request.tags), raise_on_error=False
    )
    return helpers.Outcome(result, time.monotonic() - t0)


def test_sensor_run_and_backfill_of_the_same_day_at_once(install, tmp_path):
    """Protects SPEC §2's per-day lock: Hermes changes day 1, the sensor requests it, and
    its run starts while a six-day single-run backfill is writing (holding day 1's lock).
    Both runs succeed; the final files equal a capture made alone; no two processes ever
    held one day lock at the same time (read-merge-write of a day is serialized); the
    sensor run waited at that day lock about one day's hold (never longer on any lock), in
    all far less than the backfill held locks, and finished while the backfill was still
    writing other days: the lock is per day and per dataset, held only around one day's
    merge-write."""
    with install.writer() as w:
        write_scenario(w, 6)
    install.run(DAY1, DAY6).ok()
    install.sensor.tick()
    with install.writer() as w:  # Hermes goes on in a day-1 session
        w.at(START_S + 600)
        w.msg("tui-0", "assistant", "written just before both runs", finish_reason="stop")
        w.end("tui-0", "cli_close")
    (request,) = install.sensor.tick().run_requests
    assert request.partition_key == DAY1 and request.tags.get("hermes/trigger") == "sensor"
    install.definitions()  # loaded once, before the forks share it

    log, work = tmp_path / "locks.jsonl", tmp_path / "handshake"
    work.mkdir()
    backfill = _in_child(install, "backfill", log, work, lambda: install.run(DAY1, DAY6), hold=HOLD_S, contend=True)
    assert backfill.wait_event("holding-first-day-lock", timeout=60), backfill.events
    sensor = _in_child(install, "sensor", log, work, lambda: _sensor_run(install, request))
    s, b = sensor.result(), backfill.result()
    assert s["ok"] and b["ok"], (s, b)
    s, b = s["value"], b["value"]
    assert s["success"] and b["success"], (s["failures"], b["failures"])

    reference = tmp_path / "reference"
    install.run(DAY1, DAY6, defs=install.defs(warehouse=HermesWarehouse(root=str(reference)))).ok()
    assert warehouse_state(install.warehouse).files == warehouse_state(reference).files
    assert_sound(install.warehouse)

    holds = [json.loads(line) for line in log.read_text().splitlines()]
    by_path: dict[str, list[dict]] = {}
    for h in holds:
        by_path.setdefault(h["path"], []).append(h)
    for path, hs in by_path.items():
        hs.sort(key=lambda h: h["got"])
        for a, c in zip(hs, hs[1:]):
            assert c["got"] >= a["released"], f"two holders of {path} at once: {a} {c}"
    # the run computes the exposures too, over every day, under a lock of their own (not a day's)
    mine = [h for h in holds if h["who"] == "sensor" and EXPOSURES not in Path(h["path"]).parts]
    contended = (work / "contended").read_text()
    waits: dict[str, float] = {}  # longest wait per lock (a day's write may take its lock twice)
    for h in mine:
        waits[h["path"]] = max(waits.get(h["path"], 0.0), h["got"] - h["asked"])
    # the day's locks: a captured dataset's in this host's folder of the day (day=<day>/host=<label>/)
    assert {next(p for p in Path(h["path"]).parts if p.startswith("day=")) for h in mine} == {f"day={DAY1}"}
    assert waits[contended] >= CONTENDED_EXTRA_S * 0.8, f"the sensor run never met the backfill: {waits}"
    one_day = CONTENDED_EXTRA_S + HOLD_S + 1.0  # the contended hold, plus slack for one merge-write
    assert max(waits.values()) < one_day, f"the sensor run waited behind more than one day: {waits}"
    assert s["end"] < b["end"], "the sensor run only finished after the whole backfill"
    backfill_holds = sum(h["released"] - h["got"] for h in holds if h["who"] == "backfill")
    waited = sum(h["got"] - h["asked"] for h in mine)
    assert waited < backfill_holds / 2, (waited, backfill_holds)


def test_a_backfill_that_read_before_the_sensor_run_does_not_undo_it(install, tmp_path):
    """Protects the final files against a stale writer: a backfill reads day 1 (its first
    step stages it), then Hermes writes a message and ends the session, the sensor's run
    captures that, and only then does the backfill write. Every dataset must still hold
    the new message (not flagged source_deleted) and the session as ended."""
    with install.writer() as w:
        write_scenario(w, 2)
    install.run(DAY1, DAY1).ok()
    install.sensor.tick()
    install.definitions()
    work = tmp_path / "gate"
    work.mkdir()

    def gate_hooks():
        real_flock = fcntl.flock

        def hooked(fd, operation):
            if operation == fcntl.LOCK_EX and not (work / "go").exists():
                forking.emit("staged")
                while not (work / "go").exists():
                    time.sleep(0.01)
            return real_flock(fd, operation)

        fcntl.flock = hooked

    def body():
        helpers.forget_instance()
        gate_hooks()
        return install.run(DAY1).success

    backfill = forking.fork(body)
    assert backfill.wait_event("staged", timeout=60)
    with install.writer() as w:
        w.at(START_S + 600)
        mid = w.msg("tui-0", "assistant", "written while the backfill waits", finish_reason="stop")
        w.end("tui-0", "cli_close")
    (request,) = install.sensor.tick().run_requests
    _sensor_run(install, request).ok()
    (work / "go").touch()
    assert backfill.result() == {"ok": True, "value": True}
    state = warehouse_state(install.warehouse)
    stale = []
    rows = [r for r in state.rows[GATEWAY].values() if r["session_id"] == "hermes-tui-0"]
    new = [r for r in rows if r["provider_uuid"] == str(mid)]
    if not new or any(is_flagged(GATEWAY, r) for r in new):
        stale.append(f"{GATEWAY}: the new message is missing or flagged source_deleted")
    if not any(r["message_id"].endswith("session_end") for r in rows):
        stale.append(f"{GATEWAY}: the session-end row is gone")
    messages = [r for r in state.rows[MESSAGES].values() if r["id"] == mid]
    if not messages or any(r["source_deleted"] for r in messages):
        stale.append(f"{MESSAGES}: the new message is missing or flagged source_deleted")
    (session,) = [r for r in state.rows[SESSIONS].values() if r["id"] == "tui-0"]
    if session["ended_at"] is None:
        stale.append(f"{SESSIONS}: the session is no longer ended")
    assert not stale, stale
