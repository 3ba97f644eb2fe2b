"""lib/capture/pool.py: days in parallel on worker processes that are never a fork of the caller.

The functions the workers run live in this module (a worker imports it by name).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pyarrow  # (as the capture's worker module does: importing it starts threads)
import pytest

from hermes_assets.lib.capture import pool
from tests.conftest import REPO

#: changed by the tests in the calling process; a worker forked from it would see the change
MARKER = "as imported"


@dataclass(frozen=True)
class Job:
    """A run's state: each worker unpickles it once (``log``: a file each unpickling appends to)."""

    log: str

    def __reduce__(self):
        return (_unpickled, (self.log,))


def _unpickled(log: str) -> Job:
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    return Job(log)


def where(job: Job, day: str) -> dict:
    time.sleep(0.05)  # a day's work: the caller cannot take every day before the workers are up
    with open(f"/proc/{os.getppid()}/status") as f:
        threads = int(next(line for line in f if line.startswith("Threads:")).split()[1])
    return {"day": day, "pid": os.getpid(), "parent": os.getppid(), "parent_threads": threads, "marker": MARKER}


def fail_on(job: Job, day: str) -> str:
    if day == "d3":
        raise ValueError(f"bad day {day}")
    return day


def busy() -> threading.Thread:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(30,), daemon=True)
    thread.start()
    thread.stop = stop  # type: ignore[attr-defined]
    return thread


@pytest.mark.slow
@pytest.mark.parametrize("method", pool.START_METHODS)
def test_days_come_back_in_order_from_fresh_workers_never_forks_of_the_caller(method, tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__, fromlist=["MARKER"]), "MARKER", "changed in the caller")
    thread = busy()  # the caller runs a thread, as a Dagster step does
    try:
        days = [f"d{i}" for i in range(8)]
        log = tmp_path / "unpickled"
        seen = list(pool.map_days(where, Job(str(log)), days, workers=3, start_method=method))
    finally:
        thread.stop.set()
    assert [s["day"] for s in seen] == days
    mine = os.getpid()
    workers = [s for s in seen if s["pid"] != mine]
    assert workers, "no day ran on a worker (the test proves nothing)"
    assert {s["marker"] for s in workers} == {"as imported"}, "a worker inherited the caller's memory"
    assert {s["marker"] for s in seen if s["pid"] == mine} <= {"changed in the caller"}
    if method == "forkserver":  # forked from a server that runs no thread (nor imports this module), never the caller
        assert {s["parent"] for s in workers} != {mine}
        assert {s["parent_threads"] for s in workers} == {1}
    else:
        assert {s["parent"] for s in workers} == {mine}
    # the state reached each worker once (when it started), whatever the number of days it took
    unpickled = log.read_text().split()
    assert len(unpickled) == len(set(unpickled)) <= 2 and {str(s["pid"]) for s in workers} <= set(unpickled)


@pytest.mark.slow
@pytest.mark.parametrize("method", pool.START_METHODS)
def test_workers_start_before_the_state_exists_and_take_it_when_it_is_sent(method, tmp_path):
    """A run's workers boot while the run sets itself up (its redaction, on a first run a command's
    output): they start first, the state reaches each of them once, after."""
    days = [f"d{i}" for i in range(6)]
    log = tmp_path / "unpickled"
    with pool.started(where, days, 2, start_method=method) as workers:
        assert workers.wait_started(timeout=120), "the worker did not start"
        assert not log.exists()  # started, the state not made yet
        seen = list(workers.map(Job(str(log))))
    assert [s["day"] for s in seen] == days
    in_workers = {s["pid"] for s in seen if s["pid"] != os.getpid()}
    assert in_workers and log.read_text().split() == [str(pid) for pid in in_workers]


@pytest.mark.slow
def test_a_run_that_fails_before_its_state_is_ready_stops_its_workers():
    """The workers wait for a state that never comes: they stop with the run (no wait for ever)."""
    started = time.monotonic()
    with pytest.raises(ValueError, match="no rule set"), pool.started(where, ["a", "b", "c"], 2) as workers:
        assert workers.wait_started(timeout=120)
        raise ValueError("no rule set")
    assert time.monotonic() - started < 120


def test_one_worker_runs_every_day_in_the_caller(tmp_path):
    seen = list(pool.map_days(where, Job(str(tmp_path / "log")), ["a", "b"], workers=1))
    assert {s["pid"] for s in seen} == {os.getpid()} and not (tmp_path / "log").exists()


@pytest.mark.slow
def test_a_day_that_fails_fails_the_map(tmp_path):
    with pytest.raises(ValueError, match="bad day d3"):
        list(pool.map_days(fail_on, Job(str(tmp_path / "log")), [f"d{i}" for i in range(6)], workers=2))


def test_an_unknown_start_method_is_refused_fork_first(tmp_path):
    with pytest.raises(ValueError, match="not one of forkserver, spawn"):
        list(pool.map_days(where, Job(str(tmp_path / "log")), ["a", "b"], workers=2, start_method="fork"))


def converts(job: Job, day: str) -> dict:
    import sys

    table = pyarrow.table({"day": pyarrow.array([day, None], pyarrow.string())})
    return {"pid": os.getpid(), "rows": table.num_rows, "pandas": "pandas" in sys.modules}


@pytest.mark.slow
def test_a_worker_converts_python_values_without_importing_pandas(tmp_path):
    days = [f"d{i}" for i in range(6)]
    results = list(pool.map_days(converts, Job(str(tmp_path / "log")), days, workers=2))
    assert [r["rows"] for r in results] == [2] * len(days)
    in_workers = [r for r in results if r["pid"] != os.getpid()]
    assert in_workers, "no day ran on a worker"
    assert not any(r["pandas"] for r in in_workers)


#: the caller's main script of :func:`test_a_worker_does_not_run_the_callers_main_script`: it notes each
#: process that runs it, then maps days on workers
MAIN_SCRIPT = """
import os, sys
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()} {__name__}\\n")
if __name__ == "__main__":
    from hermes_assets.lib.capture import pool
    from tests.lib.test_pool import Job, where

    seen = list(pool.map_days(where, Job(sys.argv[1] + ".state"), [f"d{i}" for i in range(6)], 2, start_method=sys.argv[2]))
    assert any(s["pid"] != os.getpid() for s in seen), "no day ran on a worker"
"""


@pytest.mark.slow  # a fresh interpreter, its workers
@pytest.mark.parametrize("method", pool.START_METHODS)
def test_a_worker_does_not_run_the_callers_main_script(method, tmp_path):
    """multiprocessing would run the caller's main script again in each worker (for the ``dagster``
    command, all of Dagster's imports): a worker's function and state come from modules, so it does not."""
    script, ran = tmp_path / "main.py", tmp_path / "ran"
    script.write_text(MAIN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script), str(ran), method], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line.split()[1] for line in ran.read_text().splitlines()] == ["__main__"]  # the caller alone
