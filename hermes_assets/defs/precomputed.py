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

import threading
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
import pyarrow as pa

from hermes_assets.lib.analytics import captured_days
from hermes_assets.lib.analytics.captured_days import KnownDay
from hermes_assets.lib.analytics.daily import ANALYTICS, DayFigures
from hermes_assets.lib.capture.steps import ProjectedRun, WrittenRun
from hermes_assets.lib.warehouse.datasets import Warehouse

_lock = threading.Lock()
#: (warehouse root, day) -> what the capture computed of the day, until each analytics took its own
_kept: dict[tuple[str, str], tuple[KnownDay, set[str]]] = {}


def day_figures(context: dg.AssetExecutionContext) -> Callable[[str, Mapping[str, pa.Table]], Any] | None:
    """What the capture makes of a first capture's tables: the day's analytics, when the run
    computes them too; else nothing."""
    selected = context.run.asset_selection or set()
    return captured_days.figures_of if any(dg.AssetKey(name) in selected for name in ANALYTICS) else None


def keep(warehouse: Warehouse, run: ProjectedRun, written: WrittenRun) -> None:
    """The figures of the run's first captures that hold for the files as the write left them."""
    if written.failures:
        return
    computed = [(s.day, {ds: d.rows for ds, d in s.datasets.items()}, s.figures) for s in run.days if s.figures]
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
