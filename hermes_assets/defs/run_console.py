"""A run on the console: one line when it ends, one per failure (a handler of the runs' logs).

Dagster prints a run's events on the console through the jobs' console logger: nothing at INFO
while all goes well, and for a failure the whole stack, several times over (the step, the steps
skipped, the run). Every event stays in the run's log in the UI; on the console each run gets,
through :class:`RunConsoleHandler` (which ``dagster.yaml`` hands every run's logs, under
``python_logs: dagster_handler_config``):

- one line when it ends, ``hermes.run.done``: its status, the days captured, the rows of each
  dataset, the secrets redacted, the days of analytics computed, and its seconds (from the
  materializations of the run this process saw);
- one line per failed step, ``hermes.run.step_failed``: the step and the first line of what
  went wrong (the run's log in the UI has the rest).

The sensor's runs turn Dagster's own console logger down to CRITICAL (:data:`QUIET`), so a
failure of theirs is that one line; at ``HERMES_ASSETS_LOG_LEVEL=debug`` they turn it up to
DEBUG instead (:data:`VERBOSE`), every Dagster event a line. The lines are this project's events
(``hermes_assets.lib.basics.logs``: a console line on a terminal, else one JSON line).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import dagster as dg

from hermes_assets.lib.analytics.daily import ANALYTICS
from hermes_assets.lib.basics import logs
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS

log = logs.get_logger()

RUN_DONE = "hermes.run.done"
STEP_FAILED = "hermes.run.step_failed"
#: this handler's events that Dagster's run log holds already (its own events): never stored there again
ALREADY_IN_THE_RUN_LOG = frozenset({STEP_FAILED})
#: the run config of the sensor's runs: Dagster's console logger quiet (the run's lines are this
#: module's), or, at HERMES_ASSETS_LOG_LEVEL=debug, every event of the run
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
VERBOSE = {"loggers": {"console": {"config": {"log_level": "DEBUG"}}}}

#: how a run's last event says it ended
_ENDS = {
    dg.DagsterEventType.RUN_SUCCESS: "success",
    dg.DagsterEventType.RUN_FAILURE: "failure",
    dg.DagsterEventType.RUN_CANCELED: "canceled",
}
#: the short names the run's line gives the datasets' rows
_ROWS = {SESSIONS: "sessions", MESSAGES: "messages", GATEWAY: "parts"}


@dataclass
class RunFigures:
    """What one run did, from the events this process saw."""

    started: float | None = None
    days: set[str] = field(default_factory=set)
    rows: Counter = field(default_factory=Counter)
    secrets: Counter = field(default_factory=Counter)
    analytics_days: set[str] = field(default_factory=set)
    failures: int = 0

    def add(self, materialization: dg.AssetMaterialization) -> None:
        dataset = materialization.asset_key.to_user_string()
        day = materialization.partition
        metadata = materialization.metadata
        if dataset in CAPTURE_DATASETS:
            if day:
                self.days.add(day)
            self.rows[dataset] += _int(metadata.get("dagster/row_count"))
            found = metadata.get("secrets_redacted")
            if found is not None and isinstance(found.value, dict):
                self.secrets[dataset] += sum(int(n) for n in found.value.values())
        elif dataset in ANALYTICS and day:
            self.analytics_days.add(day)

    def fields(self, ended: float) -> dict:
        out: dict = {"days": len(self.days or self.analytics_days)}
        if self.days:
            out |= {_ROWS[ds]: self.rows[ds] for ds in CAPTURE_DATASETS}
            # each secret is counted in every dataset its cells reach: the largest count is the run's
            out["secrets_redacted"] = max(self.secrets.values(), default=0)
        out["analytics_days"] = len(self.analytics_days)
        if self.started is not None:
            out["seconds"] = round(ended - self.started, 1)
        return out


def _int(value: object) -> int:
    raw = getattr(value, "value", value)
    return raw if isinstance(raw, int) else 0


class RunConsoleHandler(logging.Handler):
    """Turns the runs' Dagster events into their console lines (see the module docstring).

    ``dagster.yaml`` names it; Dagster makes one for each log manager of a run (the run's, its
    steps', its resources'), and hands it every event, whatever its level: the figures of the
    runs in progress in this process are shared, by run."""

    #: run id -> what the run did so far, in this process
    figures: ClassVar[dict[str, RunFigures]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None) or {}
        event = meta.get("dagster_event")
        run_id = meta.get("run_id")
        if event is None or run_id is None:
            return
        with self._lock:
            self._take(event, run_id, record.created)

    def _take(self, event: dg.DagsterEvent, run_id: str, at: float) -> None:
        kind = event.event_type
        if kind == dg.DagsterEventType.RUN_START:
            self.figures[run_id] = RunFigures(started=at)
        elif kind == dg.DagsterEventType.ASSET_MATERIALIZATION:
            self.figures.setdefault(run_id, RunFigures()).add(event.materialization)
        elif kind == dg.DagsterEventType.STEP_FAILURE:
            self.figures.setdefault(run_id, RunFigures()).failures += 1
            log.error(STEP_FAILED, run_id=run_id, step=event.step_key, error=_failure(event))
        elif kind in _ENDS:
            status = _ENDS[kind]
            figures = self.figures.pop(run_id, RunFigures()).fields(at)
            if status == "success":
                log.info(RUN_DONE, run_id=run_id, status=status, **figures, **logs.ON_CONSOLE)
            else:
                log.warning(RUN_DONE, run_id=run_id, status=status, **figures)


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _failure(event: dg.DagsterEvent) -> str:
    """What a failed step says went wrong, in one line: the description of a ``Failure`` it
    raised, else its error's own first line, without Dagster's wrapping."""
    data = event.event_specific_data
    described = getattr(getattr(data, "user_failure_data", None), "description", None)
    if described:
        return _first_line(described)
    error = getattr(data, "error", None)
    while error is not None and error.cause is not None and "Error occurred while executing" in error.message:
        error = error.cause  # Dagster's wrapper of the user code's error: the error itself
    return _first_line(error.message) if error is not None else "failed"
