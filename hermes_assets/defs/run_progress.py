"""A long capture's progress where people look: the run's log and page in the UI, a terminal.

The capture's long steps count their days on a :class:`~hermes_assets.lib.capture.progress.Progress`
(``project_rows``: each day read and projected; ``write_partitions``: each day put in place; the
analytics' one step, ``hermes_analytics``: each day computed for every dataset selected).
:func:`progress` gives the step one that tells:

- the run's log: a ``hermes.capture.progress`` event at most every two seconds (days done of
  how many, rows, seconds, the estimate of the seconds left), shown in the run's page as it
  runs, and recorded there (not printed on the console: its one line is the run's result);
- the run's page and the Runs list: the run's tag ``hermes/progress``
  (``project_rows: 40/131 days · 12,345 rows · ~45 s left``), updated with each event;
- a terminal that typed the command (``dg launch``, ``dagster asset materialize``): a progress
  bar (rich's, which Dagster ships), redrawn as each day is done, written to the terminal
  itself (never into the step's captured logs).

A step shorter than a report's interval tells only its bar: its result says the rest.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO

import dagster as dg

from hermes_assets.defs import console
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.capture import progress as steps_progress
from hermes_assets.lib.capture.progress import Listener, Progress, Report

log = get_logger()

#: the run's tag that says how far it is
PROGRESS_TAG = "hermes/progress"


@contextlib.contextmanager
def progress(context: dg.OpExecutionContext | dg.AssetExecutionContext, step: str, days: int) -> Iterator[Progress]:
    """The :class:`Progress` of ``step`` over ``days`` days in the run of ``context``; finished when the block ends."""
    run_id, instance = context.run.run_id, context.instance

    def report(now: Report) -> None:
        log.info("hermes.capture.progress", **now.fields())
        instance.add_run_tags(run_id, {PROGRESS_TAG: f"{step}: {now.line()}"})

    with _bar(step, days) as on_day:
        tracker = Progress(step, days, on_report=report, on_day=on_day, every_s=steps_progress.REPORT_EVERY_S)
        yield tracker
        tracker.finish()


@contextlib.contextmanager
def _bar(step: str, days: int) -> Iterator[Listener | None]:
    """A rich progress bar on the terminal of a typed command (its ``on_day`` listener), or None."""
    stream = terminal() if days > 1 else None
    if stream is None:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as Bar

    bar = Bar(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("days · {task.fields[rows]:,} rows ·"),
        TimeElapsedColumn(),
        TextColumn("elapsed ·"),
        TimeRemainingColumn(),
        TextColumn("left"),
        console=Console(file=stream, force_terminal=True),
        transient=False,
    )
    task = bar.add_task(step, total=days, rows=0)
    with stream, bar:
        yield lambda now: bar.update(task, completed=now.days_done, rows=now.rows)


def terminal() -> TextIO | None:
    """The terminal of a command a person typed (``dg launch`` ...), opened for writing; None
    for a server or a run worker (their runs report in the UI), or without a terminal."""
    if not console.typed_command() or not (sys.stdin.isatty() or os.isatty(2)):
        return None
    try:
        return open("/dev/tty", "w", encoding="utf-8")  # closed by the caller
    except OSError:
        return None
