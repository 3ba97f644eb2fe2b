"""The analytics a capture run computed from the days it built, handed to the same run's analytics.

A run of every asset (a history import) builds each day's tables, then
computes the day's analytics. When the capture's workers held a first
capture's final tables, they computed its analytics there
(:mod:`hermes_assets.lib.analytics.captured_days`); the write step keeps them
here, in the run's process, and each analytics asset takes its days' figures
while the stamps of their input files still hold. Runs whose steps are other
processes (the multiprocess executor), and any day not kept, read the files:
the figures are the same either way.

An analytics step that has to read a day's files (a day not kept: not a first
capture, a run that captured nothing) reads every input column the analytics
need once and computes the day's other analytics of the run with its own
(:func:`share`): the run's next analytics steps in this process take them as
they take the capture's, while the stamps of the files read still hold. A day
is then read and its sessions built once per run, not once per analytics dataset.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
import pyarrow as pa

from hermes_assets.lib.analytics import captured_days
from hermes_assets.lib.analytics.captured_days import KnownDay
from hermes_assets.lib.analytics.daily import ANALYTICS, DayFigures
from hermes_assets.lib.capture.staged_run import ProjectedRun
from hermes_assets.lib.capture.steps import WrittenRun
from hermes_assets.lib.warehouse.datasets import Warehouse

_lock = threading.Lock()
#: who computed kept figures: this run's capture (from the tables it built), or an analytics step
#: of the run (from the files it read)
CAPTURE, ANALYTICS_STEP = "capture", "analytics"
#: (warehouse root, day) -> what the capture (or an analytics step) computed of the day, until each
#: analytics took its own
_kept: dict[tuple[str, str], tuple[KnownDay, set[str], str]] = {}
#: the executors that run every step of a run in the run's process (Dagster's, and that of
#: ``execute_in_process``)
IN_PROCESS = frozenset({dg.in_process_executor.name, "execute_in_process_executor"})
#: run id -> the analytics datasets whose step started in this process
_started: dict[str, set[str]] = {}


def day_figures(context: dg.AssetExecutionContext) -> Callable[[str, Mapping[str, pa.Table]], Any] | None:
    """What the capture makes of a first capture's tables: the day's analytics, when the run
    computes them too; else nothing."""
    selected = context.run.asset_selection or set()
    return captured_days.figures_of if any(dg.AssetKey(name) in selected for name in ANALYTICS) else None


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
    days = captured_days.known_days(warehouse, computed, written.results)
    with _lock:
        for day, known in days.items():
            _kept[(warehouse.root, day)] = (known, set(known.figures), CAPTURE)


def still_to_run(context: dg.AssetExecutionContext, dataset: str) -> list[str]:
    """The analytics datasets of this run whose step has not started yet and will run in this process
    (the in-process executor runs every step of a run in the run's process, one after the other):
    those an analytics step computes with its own when it reads a day (:func:`share`). ``dataset``'s
    step starts now."""
    selected = context.run.asset_selection or set()
    with _lock:
        started = _started.setdefault(context.run.run_id, set())
        started.add(dataset)
        if context.job_def.executor_def.name not in IN_PROCESS:
            return []
        return [name for name in ANALYTICS if dg.AssetKey(name) in selected and name not in started]


def share(warehouse: Warehouse, day: str, stamps: dict[str, tuple], figures: Mapping[str, DayFigures]) -> None:
    """Figures of the day's other analytics that an analytics step computed with its own, from the
    files it read (``stamps``: theirs before the read), kept for the run's next analytics steps; not
    when the day has figures kept already."""
    if figures:
        with _lock:
            _kept.setdefault((warehouse.root, day), (KnownDay(stamps, dict(figures)), set(figures), ANALYTICS_STEP))


def take(warehouse: Warehouse, dataset: str, day: str) -> tuple[dict[str, tuple], DayFigures, str] | None:
    """The figures of ``dataset``'s ``day`` the capture (or another analytics step) computed, with the
    stamps they hold for and who computed them (once: forgotten when every analytics took its own);
    None when none were kept."""
    with _lock:
        found = _kept.get((warehouse.root, day))
        if found is None or dataset not in found[1]:
            return None
        known, left, origin = found
        left.discard(dataset)
        if not left:
            del _kept[(warehouse.root, day)]
        return known.stamps, known.figures[dataset], origin
