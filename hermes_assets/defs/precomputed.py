"""The analytics a capture run computed from the days it built, handed to the same run's analytics.

A run of every asset (a history import) builds each day's tables, then
computes the day's analytics. When the capture's workers held a first
capture's final tables, they computed its analytics there
(:mod:`hermes_assets.lib.analytics.captured_days`); the write step keeps them
here, in the run's process, and each analytics asset takes its days' figures
while the stamps of their input files still hold. Runs whose steps are other
processes (the multiprocess executor), and any day not kept, read the files:
the figures are the same either way.
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
#: (warehouse root, day) -> what the capture computed of the day, until each analytics took its own
_kept: dict[tuple[str, str], tuple[KnownDay, set[str]]] = {}


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
            _kept[(warehouse.root, day)] = (known, set(known.figures))


def take(warehouse: Warehouse, dataset: str, day: str) -> tuple[dict[str, tuple], DayFigures] | None:
    """The figures of ``dataset``'s ``day`` the capture computed, with the stamps they hold for
    (once: forgotten when both analytics took theirs); None when it computed none."""
    with _lock:
        found = _kept.get((warehouse.root, day))
        if found is None or dataset not in found[1]:
            return None
        known, left = found
        left.discard(dataset)
        if not left:
            del _kept[(warehouse.root, day)]
        return known.stamps, known.figures[dataset]
