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

Either way a worker begins in ``multiprocessing``'s preparation, which would run
the caller's main script again (its ``if __name__ == "__main__"`` part excepted):
for a run of the ``dagster`` command that is all of Dagster, 0.65 s of CPU per
worker (``dg``'s, 0.06 s), for nothing: a worker runs a function of a module
of its own, which it imports by name. The workers are therefore prepared without
it (:func:`_without_callers_main`, on the processes' name, :data:`WORKER_NAME`):
what a worker runs, and the state it is sent, come from modules, never from the
caller's main script. (A run the daemon or the UI launches, ``python -m dagster
api``, had none to run.)

The run's state reaches each worker once (the pool's initializer) and stays in
that process for every day it takes; anything a worker opens for the run (a
filesystem client) lives in its own copy of the state, never in a module global.
The workers may start before the state is ready (:func:`started`): each boots (its
interpreter, the caller's main script, the worker's module) while the caller
prepares the state, then waits for it on a queue.

A worker builds Arrow arrays and Parquet files, never a pandas object; pyarrow, on its
first conversion of Python values, looks for pandas and imports it (0.3-0.5 s of CPU
and 40 MB per process, for nothing here). The initializer therefore marks pandas as
absent in a worker that has not imported it (:func:`_without_pandas`).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.abc
import multiprocessing
import multiprocessing.context
import multiprocessing.spawn
import sys
import threading
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Generic, TypeVar

from hermes_assets.lib.basics import logs

S = TypeVar("S")
R = TypeVar("R")

#: how worker processes start, the first the default (see the module docstring)
START_METHODS = ("forkserver", "spawn")
#: the start of a worker process's name: multiprocessing prepares it without the caller's main script
WORKER_NAME = "hermes-assets-worker"


class _ThisWorker:
    """The run's function and state in a worker process, set once by the pool's initializer."""

    fn: Callable[[Any, str], Any] | None = None
    state: object = None


_this_worker = _ThisWorker()


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder for which pandas is not installed."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError("pandas is not imported in a capture worker", name=fullname)
        return None


def _without_pandas() -> None:
    """pandas unavailable to this worker process (``import pandas`` raises ImportError), unless
    something imported it already: pyarrow then converts Python values without importing it."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


def _without_callers_main(get_preparation_data: Callable[[str], dict[str, Any]]) -> Callable[[str], dict[str, Any]]:
    """``multiprocessing.spawn.get_preparation_data`` (what a new process is told to set up before it
    runs anything), the caller's main script left out for a worker (named :data:`WORKER_NAME`...):
    the worker then never runs it. Any other process is prepared as multiprocessing prepares it."""

    def prepared(name: str) -> dict[str, Any]:
        data = get_preparation_data(name)
        if name.startswith(WORKER_NAME):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    prepared.leaves_out_workers_main = True  # type: ignore[attr-defined]
    return prepared


def _prepare_workers_without_main() -> None:
    """Wrap multiprocessing's preparation of new processes in :func:`_without_callers_main` (once per
    process: multiprocessing reads it as it starts each process, ours from their context below)."""
    if not getattr(multiprocessing.spawn.get_preparation_data, "leaves_out_workers_main", False):
        wrapped = _without_callers_main(multiprocessing.spawn.get_preparation_data)
        multiprocessing.spawn.get_preparation_data = wrapped  # type: ignore[assignment]  # the same signature


class _Named:
    """A worker process: its name (which multiprocessing prepares it by) starts with :data:`WORKER_NAME`."""

    name: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name = f"{WORKER_NAME} {self.name}"


class _ForkServerWorker(_Named, multiprocessing.context.ForkServerProcess):
    pass


class _SpawnWorker(_Named, multiprocessing.context.SpawnProcess):
    pass


class _ForkServerContext(multiprocessing.context.ForkServerContext):
    """multiprocessing's forkserver, its processes :class:`_ForkServerWorker` (a pool's workers)."""

    Process = _ForkServerWorker


class _SpawnContext(multiprocessing.context.SpawnContext):
    """multiprocessing's spawn, its processes :class:`_SpawnWorker` (a pool's workers)."""

    Process = _SpawnWorker


class _NoRun:
    """The state of a worker whose run ended before it was sent: the worker takes no day."""


def _start_worker(fn: Callable[[Any, str], Any], states: Any, log_format: logs.LogFormat | None) -> None:
    """A worker's start: ``fn`` (its module imported as it was unpickled), then the run's state,
    the first item of ``states`` (waited for: the caller puts it there once it is ready)."""
    _without_pandas()
    logs.configure(log_format)
    _this_worker.fn = fn
    _this_worker.state = states.get()


def _run_in_worker(day: str) -> Any:
    if _this_worker.fn is None or isinstance(_this_worker.state, _NoRun):
        raise RuntimeError(f"day {day} sent to a worker of no run")
    return _this_worker.fn(_this_worker.state, day)


class Workers(Generic[S, R]):
    """``fn`` over ``days`` on this process and ``count - 1`` worker processes, started by :func:`started`."""

    def __init__(
        self,
        fn: Callable[[S, str], R],
        days: list[str],
        count: int,
        *,
        log_format: logs.LogFormat | None,
        start_method: str,
    ) -> None:
        if start_method not in START_METHODS:
            raise ValueError(f"start method {start_method!r} is not one of {', '.join(START_METHODS)}")
        self.fn = fn
        self.days = list(days)
        self.count = max(1, min(count, len(self.days)))
        #: the days no process took yet: the workers take them from the start, this process from the end
        self._todo = collections.deque(self.days)
        #: the days handed to the workers as they start (by the thread that starts them)
        self._first: dict[Future, str] = {}
        self._state_sent = False
        self._pool: ProcessPoolExecutor | None = None
        self._spawning: threading.Thread | None = None
        self._spawn_error: BaseException | None = None
        if self.count <= 1:
            return
        # never "fork": the caller runs threads (checked above; named here so the call shows it)
        context = _SpawnContext() if start_method == "spawn" else _ForkServerContext()
        if start_method == "forkserver":  # nothing that starts a thread (see the module docstring)
            context.set_forkserver_preload([__name__])
        _prepare_workers_without_main()
        self._states = context.Queue()
        self._pool = ProcessPoolExecutor(
            self.count - 1, mp_context=context, initializer=_start_worker, initargs=(fn, self._states, log_format)
        )
        # a submit starts a process (and waits for the fork server to take it): on a thread of its own,
        # which hands each worker its first days (taken when the state is there); this process goes on
        first = [self._todo.popleft() for _ in range(min(self._ahead(), len(self._todo)))]
        self._spawning = threading.Thread(target=self._spawn, args=(first,), name="hermes-assets-workers", daemon=True)
        self._spawning.start()

    def wait_started(self, timeout: float | None = None) -> bool:
        """Whether the worker processes have started (each with its first days to take once it has
        the state), waiting at most ``timeout`` seconds; True with no worker process."""
        if self._spawning is not None:
            self._spawning.join(timeout)
            return not self._spawning.is_alive() and self._spawn_error is None
        return True

    def _ahead(self) -> int:
        return 2 * (self.count - 1)  # every worker one day ahead

    def _spawn(self, days: list[str]) -> None:
        assert self._pool is not None
        try:
            for day in days:
                self._first[self._pool.submit(_run_in_worker, day)] = day
        except BaseException as exc:  # raised by map (a pool broken at its start)
            self._spawn_error = exc

    def map(self, state: S, on_done: Callable[[R], None] | None = None) -> Iterator[R]:
        """``fn(state, day)`` for every day, in day order (once per :class:`Workers`).
        ``on_done(result)`` is called, in this process, as each day is done, in the order they are.

        The calling process takes days too (it would only wait otherwise), from the end
        of the list while the workers take them from the start: one process fewer to
        start and to hold in memory. It begins while the workers are still starting."""
        results: dict[str, R] = {}
        todo = self._todo
        if self._pool is None:
            while todo:
                day = todo.popleft()
                results[day] = self.fn(state, day)
                if on_done is not None:
                    on_done(results[day])
                yield results[day]
            return
        pool, spawning = self._pool, self._spawning
        assert spawning is not None
        self._send(state)
        running: dict[Future, str] = {}
        ahead = self._ahead()

        def feed() -> None:  # every worker one day ahead
            while todo and len(running) < ahead:
                day = todo.popleft()
                running[pool.submit(_run_in_worker, day)] = day

        def finished(done: Collection[Future]) -> None:
            for future in done:
                day = running.pop(future)
                results[day] = future.result()
                if on_done is not None:
                    on_done(results[day])

        try:
            while todo or running or self._first or spawning.is_alive():
                if spawning.is_alive() and not todo:
                    spawning.join()  # nothing left for this process: the workers' first days
                if not spawning.is_alive() and self._first:
                    running.update(self._first)  # the workers have started: their first days are running
                    self._first.clear()
                if self._spawn_error is not None:
                    raise self._spawn_error
                if todo:
                    day = todo.pop()
                    results[day] = self.fn(state, day)
                    if on_done is not None:
                        on_done(results[day])
                    finished([f for f in running if f.done()])
                elif running:
                    finished(wait(running, return_when=FIRST_COMPLETED).done)
                if not spawning.is_alive():
                    feed()
        except BaseException:
            spawning.join()
            for future in [*running, *self._first]:
                future.cancel()
            raise
        for day in self.days:
            yield results[day]

    def _send(self, state: object) -> None:
        if not self._state_sent:
            self._state_sent = True
            for _ in range(self.count - 1):
                self._states.put(state)

    def close(self) -> None:
        """Stop the worker processes (a worker that never got the state takes no day)."""
        if self._pool is None:
            return
        assert self._spawning is not None
        self._spawning.join()
        self._send(_NoRun())
        self._pool.shutdown(wait=True, cancel_futures=True)
        # the workers are gone: a state none of them took is not waited for
        self._states.cancel_join_thread()
        self._states.close()
        self._pool = None


@contextlib.contextmanager
def started(
    fn: Callable[[S, str], R],
    days: list[str],
    workers: int,
    *,
    log_format: logs.LogFormat | None = None,
    start_method: str = START_METHODS[0],
) -> Iterator[Workers[S, R]]:
    """``workers - 1`` worker processes for ``fn`` over ``days`` (``start_method``: one of
    :data:`START_METHODS`), starting now, before the run's state is ready: they boot while the
    caller prepares it, then :meth:`Workers.map` sends it and runs the days. ``fn`` must be a
    module-level function returning small values, the state picklable, both from modules a worker
    imports by name (never the caller's main script, which a worker does not run)."""
    pool = Workers(fn, days, workers, log_format=log_format, start_method=start_method)
    try:
        yield pool
    finally:
        pool.close()


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
    and ``workers - 1`` started ones (:func:`started`, :meth:`Workers.map`; an unknown start method
    is refused there)."""
    with started(fn, days, workers, log_format=log_format, start_method=start_method) as pool:
        yield from pool.map(state, on_done)
