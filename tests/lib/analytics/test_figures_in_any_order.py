"""A day's figures depend on the order of its sessions only, not on its messages' or tool parts' order.

A capture computes a first day's analytics from the tables it built
(:func:`~hermes_assets.lib.analytics.captured_days.figures_of`), in the order the
projection made them, and puts only the sessions in the order of their file
(:data:`~hermes_assets.lib.analytics.captured_days.ORDERED`: their costs are added
in floating point); the messages and the tool parts are counted, the same figures in
any order. Here, each day of a store whose days fill every analytics dataset:
its figures from its tables, and from its messages and tool parts in reverse.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from hermes_assets.lib.analytics import captured_days
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES
from hermes_assets.lib.capture import steps
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.source.jsonutil import python_loads
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.support.capture_run import USER_HOME, plan_for
from tests.support.project import TEST_REDACTION

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def both_orders(day: str, tables: Mapping[str, pa.Table], usage_by_model: Mapping[str, Any]) -> tuple:
    """The day's figures from its tables, and from its messages and tool parts in reverse."""
    reversed_ = {
        name: table.take(pa.array(range(table.num_rows - 1, -1, -1), pa.int64()))
        if name in (MESSAGES, GATEWAY)
        else table
        for name, table in tables.items()
    }
    return captured_days.figures_of(day, tables, usage_by_model), captured_days.figures_of(day, reversed_)


def figures_by_day(
    tmp_path: Path, day_figures: Callable[[str, Mapping[str, pa.Table], Mapping[str, Any]], Any]
) -> list:
    """What ``day_figures`` made of each day of the small store's capture (a first capture: every day)."""
    plan = plan_for([FIXTURES / "small" / "state.db"], None)
    run = steps.project_rows(
        plan,
        ProjectionContext(user_home=USER_HOME, now_s=plan.read_at, git=NoGit()),
        Warehouse(str(tmp_path / "wh")),
        staging=str(tmp_path / "run"),
        redaction=TEST_REDACTION,
        workers=1,
        parallel_min_sessions=0,
        day_figures=day_figures,
    )
    return [staged.figures for staged in run.days if staged.figures is not None]


def test_figures_of_messages_and_tool_parts_in_any_order(tmp_path):
    figured = figures_by_day(tmp_path, both_orders)
    counted = {dataset for as_built, _ in figured for dataset, figures in as_built.items() if figures.table.num_rows}
    assert counted == set(captured_days.ANALYTICS)  # every dataset has rows on some day
    for as_built, reversed_ in figured:
        assert as_built.keys() == reversed_.keys()
        for dataset, figures in as_built.items():
            assert figures.table.equals(reversed_[dataset].table), dataset
            assert figures.totals == reversed_[dataset].totals, dataset


def test_figures_come_back_from_a_worker_as_they_were(tmp_path):
    """A worker hands each day's figures to the run pickled, their rows as Arrow IPC streams
    (:class:`~hermes_assets.lib.analytics.live_rows.DayFigures`): the same rows, types and totals."""
    figured = figures_by_day(tmp_path, captured_days.figures_of)
    assert figured
    for figures in figured:
        back = pickle.loads(pickle.dumps(figures))
        assert back.keys() == figures.keys()
        for dataset, day in figures.items():
            assert back[dataset].table.schema.equals(day.table.schema, check_metadata=True), dataset
            assert back[dataset].table.equals(day.table) and back[dataset].totals == day.totals, dataset


def with_and_without_usage(day: str, tables: Mapping[str, pa.Table], usage_by_model: Mapping[str, Any]) -> tuple:
    """The day's figures with its sessions' usage entries as the projection held them, and from their cells."""
    return usage_by_model, captured_days.figures_of(day, tables, usage_by_model), captured_days.figures_of(day, tables)


def test_usage_entries_handed_over_by_the_projection_are_what_their_cells_decode_to(tmp_path):
    """The capture hands the figures each session's ``usage_by_model`` entries as the projection held
    them (text -> entries), not decoded again: the same figures as decoding the cells."""
    figured = figures_by_day(tmp_path, with_and_without_usage)
    assert any(usage for usage, _, _ in figured)  # some day's sessions have usage entries
    for usage, handed, decoded in figured:
        assert all(python_loads(text) == entries for text, entries in usage.items())
        assert handed.keys() == decoded.keys()
        for dataset, figures in handed.items():
            assert figures.table.equals(decoded[dataset].table), dataset
            assert figures.totals == decoded[dataset].totals, dataset
