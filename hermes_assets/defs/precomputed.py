"""The analytics a capture run computed from the days it built, handed to the same run's analytics.

A run of every asset (a history import) builds each day's tables, then
computes the day's analytics. When the capture's workers held a first
capture's final tables, they computed its analytics there
(:mod:`hermes_assets.lib.analytics.captured_days`); the write step keeps them
here, in the run's process, and the analytics step takes each day's figures
while the stamps of their input files still hold. Only runs whose steps all run
in the run's process (the in-process executor, the default) hand them over:
with steps in processes of their own (the multiprocess executor), the capture
computes none, and the analytics step reads the files. The figures are the
same either way.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

import dagster as dg
import pyarrow as pa

from hermes_assets.lib.analytics import captured_days
from hermes_assets.lib.analytics.captured_days import KnownDay
from hermes_assets.lib.analytics.daily import ANALYTICS, inputs_of
from hermes_assets.lib.capture.staged_run import ProjectedRun
from hermes_assets.lib.capture.steps import WrittenRun
from hermes_assets.lib.warehouse.datasets import Warehouse

_lock = threading.Lock()
#: (warehouse root, day) -> what the capture computed of the day, until the analytics step takes it
_kept: dict[tuple[str, str], KnownDay] = {}
#: the executors that run every step of a run in the run's process (Dagster's, and that of
#: ``execute_in_process``)
IN_PROCESS = frozenset({dg.in_process_executor.name, "execute_in_process_executor"})


def day_figures(
    context: dg.AssetExecutionContext,
) -> Callable[[str, Mapping[str, pa.Table], Mapping[str, Any]], Any] | None:
    """What the capture makes of a first capture's tables: the day's analytics the run computes too
    (those alone), in this process; else nothing."""
    selected = context.run.asset_selection or set()
    if context.job_def.executor_def.name not in IN_PROCESS:
        return None  # the analytics step runs in another process: nothing would take them
    wanted = [name for name in ANALYTICS if dg.AssetKey(name) in selected]
    return captured_days.figures_for(wanted) if wanted else None


#: run id -> day -> the figures its capture computed, held in the process between its two steps
_held: dict[str, dict[str, Any]] = {}


def hold(run_id: str, run: ProjectedRun) -> ProjectedRun:
    """``run`` without its figures, which stay in this process for :func:`keep`: the step's output
    is stored by Dagster's IO manager (a file under DAGSTER_HOME), and figures name what the
    sessions hold (their models, their tools), content that must never reach Dagster's storage."""
    figures = {s.day: s.figures for s in run.days if s.figures is not None}
    with _lock:
        if figures:
            _held[run_id] = figures
    return dataclasses.replace(run, days=[dataclasses.replace(s, figures=None) for s in run.days])


def keep(warehouse: Warehouse, run_id: str, run: ProjectedRun, written: WrittenRun) -> None:
    """The figures of the run's first captures (held by :func:`hold` in this process, if this
    process ran the capture) that hold for the files as the write left them."""
    with _lock:
        held = _held.pop(run_id, {})
    if written.failures or not held:
        return
    computed = [(s.day, {ds: d.rows for ds, d in s.datasets.items()}, held[s.day]) for s in run.days if s.day in held]
    for day, known in captured_days.known_days(warehouse, computed, written.results).items():
        remember(warehouse, day, known)


def remember(warehouse: Warehouse, day: str, known: KnownDay) -> None:
    """Keep ``known``, the figures of ``day`` computed from its input files with the stamps it
    holds, for the run's analytics step (:func:`take`)."""
    with _lock:
        _kept[(warehouse.root, day)] = known


def take(warehouse: Warehouse, day: str) -> KnownDay | None:
    """The figures of ``day`` the capture computed, with the stamps they hold for (once: forgotten
    when taken); None when none were kept."""
    with _lock:
        return _kept.pop((warehouse.root, day), None)


def holds(warehouse: Warehouse, day: str, known: KnownDay, datasets: Collection[str]) -> bool:
    """Whether ``known`` has the figures of each of ``datasets`` and the day's input files they
    read are still those it was computed from (their stamps)."""
    names = {name for dataset in datasets for name in inputs_of(dataset)}
    return all(dataset in known.figures for dataset in datasets) and all(
        warehouse.day_stamp(name, day) == known.stamps.get(name) for name in names
    )
