"""The analytics of a day from the tables the capture just built, instead of its files read back.

A run that captures days and computes their analytics (every asset of a
history import) builds each day's three tables on a worker, writes them, then
read them back, whole columns of every day, for the analytics. When the
worker holds a day's final content, it computes the day's figures there and
then (:func:`figures_of`, in parallel with the other days), and the write step
keeps them with the stamps of the files as it left them
(:func:`known_days`). The analytics of the day use them while those stamps
still hold (:func:`hermes_assets.lib.analytics.daily.write_current_datasets`);
otherwise, or for any other day, they read the files as always. The figures
are the same either way: the same functions over the same rows.

A worker holds a day's final content when the day is a first capture: no file
of it yet (this host's or another's) and the rows of one store, staged as the
final file. The write confirms it: it put exactly those rows in place (nothing
retained, dropped, replaced or merged).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from hermes_assets.lib.analytics.daily import ANALYTICS, INPUTS, DayFigures, compute_days, inputs_for
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import SESSIONS
from hermes_assets.lib.warehouse import partition_file
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.day_merge import WriteResult


@dataclass(frozen=True)
class KnownDay:
    """One day's analytics computed from its tables, and the stamps of its input files then."""

    #: input dataset -> :meth:`Warehouse.day_stamp` after the capture wrote it
    stamps: dict[str, tuple]
    #: analytics dataset -> its figures
    figures: dict[str, DayFigures]


def figures_of(
    day: str,
    tables: Mapping[str, pa.Table],
    usage_by_model: Mapping[str, Any] | None = None,
    datasets: Collection[str] = ANALYTICS,
) -> dict[str, DayFigures]:
    """The analytics ``datasets`` (every one by default) of ``day`` from the day's whole tables of the
    three datasets: the columns they read, the sessions in the order of their file
    (:func:`~hermes_assets.lib.warehouse.partition_file.encode` sorts them), as
    :func:`~hermes_assets.lib.analytics.daily.read_inputs` gives them (the others' order changes no
    figure: :data:`ORDERED`). ``usage_by_model``: the sessions' ``usage_by_model`` cells and the entries
    the projection encoded in them (text -> entries), not decoded again. A run that computes some of
    the analytics has its capture compute only those (:func:`figures_for`)."""
    wanted = [dataset for dataset in ANALYTICS if dataset in datasets]
    inputs = {name: _as_in_file(name, tables[name], columns) for name, columns in inputs_for(wanted).items()}
    return compute_days(wanted, day, inputs, usage_by_model)


def figures_for(
    datasets: Collection[str],
) -> Callable[[str, Mapping[str, pa.Table], Mapping[str, Any]], dict[str, DayFigures]]:
    """:func:`figures_of` of ``datasets`` alone (a picklable function, sent to the capture's workers)."""
    return functools.partial(figures_of, datasets=tuple(dataset for dataset in ANALYTICS if dataset in datasets))


#: the inputs whose order a figure depends on: the sessions', whose costs are added in floating point
#: in the file's order. The messages and the tool parts are counted (whole numbers, distinct values,
#: the largest time), the same figures in any order: their tables are taken as they are
ORDERED = (SESSIONS,)


def _as_in_file(dataset: str, table: pa.Table, columns: list[str]) -> pa.Table:
    if dataset not in ORDERED:
        return table.select(columns)
    keys = list(schemas.sort_of(dataset))
    if partition_file.is_sorted(table, keys):
        return table.select(columns)
    picked = table.select(list(dict.fromkeys([*columns, *keys])))
    return picked.sort_by([(c, "ascending") for c in keys]).select(columns)


def known_days(
    warehouse: Warehouse,
    computed: Iterable[tuple[str, Mapping[str, int], dict[str, DayFigures]]],
    written: Mapping[str, Iterable[WriteResult]],
) -> dict[str, KnownDay]:
    """The days whose figures hold for the files the write left: ``computed`` gives, per day,
    the rows the worker staged for each input dataset and the figures from them; ``written``
    what the write did (dataset -> its results). A day counts when each file holds exactly the
    staged rows (nothing retained, dropped, replaced, superseded)."""
    by_day = {name: {r.day: r for r in results} for name, results in written.items()}
    out = {}
    for day, rows, figures in computed:
        results = [by_day.get(name, {}).get(day) for name in INPUTS]
        if all(r is not None and _as_staged(r, rows[r.dataset]) for r in results):
            out[day] = KnownDay({name: warehouse.day_stamp(name, day) for name in INPUTS}, figures)
    return out


def _as_staged(result: WriteResult, rows: int) -> bool:
    return (
        result.rows == rows
        and not (result.retained or result.dropped or result.replaced or result.superseded)
        and (result.changed or rows == 0)
    )
