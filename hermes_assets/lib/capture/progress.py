"""How far a long step has gone: days done of how many, rows so far, an estimate of the time left.

A capture's two long steps go day by day: :func:`~hermes_assets.lib.capture.steps.project_rows`
(each day read, redacted, projected and staged) and
:func:`~hermes_assets.lib.capture.steps.write_partitions` (each day put in place). Each
counts its days on a :class:`Progress` as they are done, in whatever order the workers finish
them, and the Progress tells its listeners:

- ``on_day`` after every day (a progress bar on a terminal redraws itself);
- ``on_report`` at most every :data:`REPORT_EVERY_S` seconds, and once at the end when it
  reported before (the run's log and the run's page in the UI, a line at most every few
  seconds): a run shorter than that reports nothing, its result says it all.

The estimate of the time left is the average time per day so far times the days left; None
before the first day is done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: the least time between two reports of a step
REPORT_EVERY_S = 2.0


@dataclass(frozen=True)
class Report:
    """Where a step stands."""

    step: str
    days_done: int
    days: int
    rows: int
    seconds: float
    #: the estimate of the seconds left; None before the first day is done
    eta_s: float | None

    @property
    def done(self) -> bool:
        return self.days_done >= self.days

    def fields(self) -> dict:
        """The report as an event's fields (rounded for a person)."""
        return {
            "step": self.step,
            "days_done": self.days_done,
            "days": self.days,
            "rows": self.rows,
            "seconds": round(self.seconds, 1),
            "eta_s": None if self.eta_s is None else round(self.eta_s),
        }

    def line(self) -> str:
        """One short line: ``40/131 days · 12,345 rows · ~45 s left``."""
        left = "done" if self.done else ("" if self.eta_s is None else f"~{_duration(self.eta_s)} left")
        return " · ".join(p for p in (f"{self.days_done}/{self.days} days", f"{self.rows:,} rows", left) if p)


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


Listener = Callable[[Report], None]


@dataclass
class Progress:
    """The days of one step as they are done (:meth:`advance`), told to its listeners."""

    step: str
    days: int
    on_report: Listener | None = None
    on_day: Listener | None = None
    every_s: float = REPORT_EVERY_S
    clock: Callable[[], float] = time.monotonic
    days_done: int = 0
    rows: int = 0
    started: float = field(default=0.0)
    _last_report: float = field(default=0.0, repr=False)
    _reported: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.started = self._last_report = self.clock()

    def report(self) -> Report:
        seconds = self.clock() - self.started
        eta = None if not self.days_done else seconds / self.days_done * max(0, self.days - self.days_done)
        return Report(self.step, self.days_done, self.days, self.rows, seconds, eta)

    def advance(self, rows: int = 0, days: int = 1) -> None:
        """``days`` more done, with ``rows`` rows."""
        self.days_done += days
        self.rows += rows
        now = self.report()
        if self.on_day is not None:
            self.on_day(now)
        if self.on_report is not None and self.clock() - self._last_report >= self.every_s and not now.done:
            self._tell(now)

    def finish(self) -> Report:
        """The step is done: a last report to those told before (a short step tells nobody)."""
        final = self.report()
        if self._reported and self.on_report is not None:
            self._tell(final)
        return final

    def _tell(self, report: Report) -> None:
        assert self.on_report is not None
        self._last_report = self.clock()
        self._reported = True
        self.on_report(report)
