"""Days in parallel on worker processes, never forked from the caller.

Days are independent (a session lives in one day), so a range uses every
core. The caller runs threads (Dagster's, pyarrow's), and a child forked from
a threaded process can deadlock or crash (a lock or an allocator held by
another thread at the fork stays held forever in the child). Workers
therefore come from a clean process:

* ``forkserver`` (the default): one server process per caller, a fresh
  interpreter that never runs a thread and forks each worker from itself;
* ``spawn``: a fresh interpreter per worker.

The server preloads this module alone (``set_forkserver_preload``), never the
worker's: importing pyarrow starts threads (jemalloc's background thread,
OpenBLAS's through numpy), and the server must never fork a threaded process.
Each worker imports the worker's module itself, after the fork.

Either way a worker begins in ``multiprocessing``'s preparation, which runs the
caller's main script again (its ``if __name__ == "__main__"`` part excepted):
for a run of the ``dg``/``dagster`` commands that is their imports, all of
Dagster, about half a second of CPU per worker; a run the daemon or the UI
launches (``python -m dagster api``) runs none.

The run's state reaches each worker once (the pool's initializer) and stays in
that process for every day it takes; anything a worker opens for the run (a
filesystem client) lives in its own copy of the state, never in a module global.
"""

from __future__ import annotations

import collections
import multiprocessing
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

from hermes_assets.lib.basics import logs

S = TypeVar("S")
R = TypeVar("R")

#: how worker processes start, the first the default (see the module docstring)
START_METHODS = ("forkserver", "spawn")


class _ThisWorker:
    """The run's state in a worker process, set once by the pool's initializer."""

    state: object = None


_this_worker = _ThisWorker()


def _start_worker(state: object, log_format: logs.LogFormat | None) -> None:
    logs.configure(log_format)
    _this_worker.state = state


def _run_in_worker(fn: Callable[[Any, str], Any], day: str) -> Any:
    return fn(_this_worker.state, day)


def map_days(
    fn: Callable[[S, str], R],
    state: S,
    days: list[str],
    workers: int = 1,
    *,
    log_format: logs.LogFormat | None = None,
    start_method: str = START_METHODS[0],
    on_done: Callable[[R], None] | None = None,
) -> Iterator[R]:
    """``fn(state, day)`` for every day, in day order, on ``workers`` processes: this one
    and ``workers - 1`` started ones (``start_method``: one of :data:`START_METHODS`).
    ``on_done(result)`` is called, in this process, as each day is done, in the order they are.

    The calling process takes days too (it would only wait otherwise), from the end
    of the list while the workers take them from the start: one process fewer to
    start and to hold in memory. ``fn`` must be a module-level function returning
    small values, ``state`` picklable.
    """
    if start_method not in START_METHODS:
        raise ValueError(f"start method {start_method!r} is not one of {', '.join(START_METHODS)}")
    workers = min(workers, len(days))
    if workers <= 1:
        for day in days:
            result = fn(state, day)
            if on_done is not None:
                on_done(result)
            yield result
        return
    # never "fork": the caller runs threads (checked above; named here so the call shows it)
    context = multiprocessing.get_context("spawn" if start_method == "spawn" else "forkserver")
    if start_method == "forkserver":  # nothing that starts a thread (see the module docstring)
        context.set_forkserver_preload([__name__])
    results: dict[str, R] = {}
    todo = collections.deque(days)
    running: dict[Future, str] = {}
    with ProcessPoolExecutor(
        workers - 1, mp_context=context, initializer=_start_worker, initargs=(state, log_format)
    ) as pool:

        def feed() -> None:  # every worker one day ahead
            while todo and len(running) < 2 * (workers - 1):
                day = todo.popleft()
                running[pool.submit(_run_in_worker, fn, day)] = day

        try:
            feed()
            while todo or running:
                done: Collection[Future]
                if todo:
                    day = todo.pop()
                    results[day] = fn(state, day)
                    if on_done is not None:
                        on_done(results[day])
                    done = [f for f in running if f.done()]
                else:
                    done = wait(running, return_when=FIRST_COMPLETED).done
                for future in done:
                    day = running.pop(future)
                    results[day] = future.result()
                    if on_done is not None:
                        on_done(results[day])
                feed()
        except BaseException:
            for future in running:
                future.cancel()
            raise
    for day in days:
        yield results[day]
