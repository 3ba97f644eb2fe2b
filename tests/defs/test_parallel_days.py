"""Days on several cores without fork-after-threads.

A Dagster step runs threads (Dagster's, pyarrow's, a test server's); a process
pool forked from such a process can crash in the child (``Fatal Python error:
Segmentation fault`` in garbage collection after fork, then
``BrokenProcessPool``). The capture's workers are spawned: fresh interpreters
that import the project's modules, never a fork of the step's own process.
"""

from __future__ import annotations

import gc
import os
import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hermes_assets.defs.resources import CaptureRuntime
from hermes_assets.lib.capture import pool
from tests.defs.harness import SMALL_DAYS
from tests.support.hosts import HOST_FILES

#: slow: the capture's worker processes, in Dagster runs
pytestmark = pytest.mark.slow

FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]
#: rounds of a ranged capture with two workers while the process churns threads (the fork
#: pool this replaced died in 10 of 10 `pytest tests/defs` runs on this machine kind, under load)
ROUNDS = 4


#: set by the test in its own process; a forked worker would inherit the new value
MARKER = "fresh interpreter"


def _marker_in_worker(state: dict, day: str) -> tuple[int, str]:
    return os.getpid(), MARKER


def test_workers_are_fresh_interpreters_never_forks_of_the_caller(monkeypatch):
    """The structural guarantee: a worker does not inherit the calling process's memory
    (a module global changed here is back to its default there), so no lock or thread
    state of the caller can be copied into it half-way."""
    monkeypatch.setattr(__import__(__name__, fromlist=["MARKER"]), "MARKER", "changed in the caller")
    seen = list(pool.map_days(_marker_in_worker, {}, [f"d{i}" for i in range(6)], workers=2))
    spawned = [marker for pid, marker in seen if pid != os.getpid()]
    assert len(spawned) >= 2, "no day ran in a worker (the test proves nothing)"
    assert set(spawned) == {"fresh interpreter"}, "a worker was forked from the caller"
    # the calling process takes days too: it sees its own state
    assert {marker for pid, marker in seen if pid == os.getpid()} <= {"changed in the caller"}


def _churn(stop: threading.Event, errors: list) -> None:
    """What a Dagster process does beside a step: allocate, hold locks, run pyarrow's pool, collect."""
    lock = threading.Lock()
    try:
        while not stop.is_set():
            with lock:
                junk = [{"k": [i] * 8} for i in range(2000)]
            table = pa.table({"x": pa.array(range(20_000))})
            pc.sum(pc.multiply(table.column("x"), 3))
            del junk
            gc.collect(0)
            stop.wait(0.01)  # busy, but leaving the run most of the GIL
    except Exception as exc:  # pragma: no cover - reported by the test
        errors.append(exc)


def test_a_ranged_capture_with_workers_survives_a_process_full_of_threads(small, instance):
    """The regression test of the crash: threads busy allocating and holding locks while
    a ranged capture runs on two workers, several times; every run succeeds and writes
    the same bytes as a run on one worker."""
    one = small.defs(capture_runtime=CaptureRuntime(workers=1))
    assert small.materialize(FIRST, LAST, instance=instance, defs=one).success
    serial = small.files()
    two = small.defs(capture_runtime=CaptureRuntime(workers=2, parallel_min_sessions=0))
    stop, errors = threading.Event(), []
    threads = [threading.Thread(target=_churn, args=(stop, errors), daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for round_ in range(ROUNDS):
            for path in small.warehouse.glob(f"*/{HOST_FILES}"):
                path.unlink()  # every round writes every file again, from staged days
            result = small.materialize(FIRST, LAST, instance=instance, defs=two, raise_on_error=False)
            assert result.success, f"round {round_}: " + "; ".join(
                str(e.event_specific_data.error.message)[:300]
                for e in result.all_events
                if e.event_type_value == "STEP_FAILURE"
            )
            assert small.files() == serial, f"round {round_}: the files differ from a one-worker run"
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
