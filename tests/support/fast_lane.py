"""The fast lane of ``make check``: every test not marked ``slow``, held honest.

A test is ``slow`` when it starts a process (``dagster dev``, a CLI command,
Postgres, Chromium, a moto S3 server, strace, git, the v0.22.2 Hermes writer,
the capture's worker processes) or runs a Dagster job (a materialization, in
process or not): ``make check`` leaves those out (``pytest -m "not slow"``)
and ``make test`` runs them all. Whole folders are marked in
``tests/conftest.py`` (:data:`SLOW_FOLDERS`), whole modules by their own
``pytestmark``, single tests by ``@pytest.mark.slow``.

This plugin keeps the mark true: a test without it that starts a process or
runs a Dagster job while it is set up or runs fails, naming what it did. So a
new test cannot slip into the fast lane by accident, and ``make check`` stays
a matter of seconds.
"""

from __future__ import annotations

import multiprocessing.process
import sys
from collections.abc import Generator

import dagster as dg
import pytest

#: folders of tests/ whose every test is slow (each starts processes or runs captures end to end)
SLOW_FOLDERS = ("e2e", "ui", "faults", "ecosystem", "fidelity")
#: the audit events (``sys.addaudithook``) of a new process; multiprocessing raises none of them
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec"})


class Watch:
    """What the fast test being watched started: processes and Dagster runs, by kind."""

    def __init__(self) -> None:
        self.active = False
        self.seen: set[str] = set()

    def note(self, what: str) -> None:
        if self.active:
            self.seen.add(what)

    def audit(self, event: str, _args: tuple) -> None:
        if event in PROCESS_EVENTS:
            self.note(event)


WATCH = Watch()
sys.addaudithook(WATCH.audit)  # audit hooks cannot be removed: this one only records while a watch is active

_start_process = multiprocessing.process.BaseProcess.start
_execute_in_process = dg.JobDefinition.execute_in_process


def _watched_start(self, *args, **kwargs):
    WATCH.note("a multiprocessing worker")
    return _start_process(self, *args, **kwargs)


def _watched_execute_in_process(self, *args, **kwargs):
    WATCH.note("a Dagster run")
    return _execute_in_process(self, *args, **kwargs)


multiprocessing.process.BaseProcess.start = _watched_start  # type: ignore[method-assign]
dg.JobDefinition.execute_in_process = _watched_execute_in_process  # type: ignore[method-assign]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = config.rootpath / "tests"
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if (parts and parts[0] in SLOW_FOLDERS) or item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.slow)


def _watched(item: pytest.Item) -> Generator[None, object, object]:
    if item.get_closest_marker("slow") is not None:
        return (yield)
    WATCH.active, WATCH.seen = True, set()
    try:
        result = yield
    finally:
        WATCH.active = False
    if WATCH.seen:
        pytest.fail(
            f"{item.nodeid} started {', '.join(sorted(WATCH.seen))} but is not marked slow: mark it "
            "@pytest.mark.slow (tests/support/fast_lane.py says why), or keep it in-process and run-free",
            pytrace=False,
        )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _watched(item))
