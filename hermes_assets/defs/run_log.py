"""Our structlog events in Dagster's logs too, printed once (a log hook; no definitions here).

``hermes_assets.lib.basics.logs`` prints every event as a JSON line (or a console
line) on the process's stderr: that is the one line a console shows, and
inside a step Dagster's compute-log capture keeps it with the run (the UI's
stdout/stderr view). :func:`to_run_log`, which ``hermes_assets/definitions.py``
adds as a hook of ``lib/basics/logs.py`` when the definitions load, also keeps the
event where the UI shows what it belongs to:

- inside a Dagster step, it adds ``run_id`` and ``op`` (the step key, e.g.
  ``hermes_capture.plan``), so a JSON line can be joined with the run it
  belongs to, and stores the event in the run's event log, where the UI
  shows it as ``hermes.capture.plan {"days": 14, ...}`` at the event's level;
- inside a sensor tick (:func:`tick_log`), it stores the event in the tick's
  log, which the UI shows on the tick (*Automation* → the sensor → a tick's
  log), as ``hermes.sensor.tick {"days_changed": 2, ...}``.

Why not Dagster's managed Python loggers (``python_logs.managed_python_loggers``),
or ``context.log`` in the sensor? Each hands the record to Dagster's console
logger as well as to the run's or tick's log, so the console would print the
event a second time beside our own line (``... - hermes_capture.plan -
hermes.capture.plan {...}``, ``INFO - __repository__ - hermes_state_sensor -
hermes.sensor.tick {...}``); and each run sets a managed logger to
``python_log_level`` (INFO here, for a quiet console), so
``HERMES_ASSETS_LOG_LEVEL=debug`` alone would not keep our debug events in the
run log. So a step's event is stored the way Dagster's own handler stores a
``context.log`` message, an ``EventLogEntry`` without a Dagster event, handed
to the instance; a tick's event goes to the handlers of the tick's logger
that write its log, not to the one that prints.

Elsewhere (the CLI, plain library use) events only go to the lines on
stderr. Worker processes that a step spawns to build days in parallel print
their events but do not write to the run log (the step's log belongs to the
process that runs the step).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, MutableMapping
from contextvars import ContextVar
from typing import Any

import dagster as dg
from dagster._core.definitions.instigation_logger import DispatchingLogHandler

from hermes_assets.defs import run_console
from hermes_assets.lib.basics import logs

#: fields of an event that the run log's entry carries itself (its run, step and time)
_NOT_STORED = ("event", "level", "run_id", "op", "timestamp", *logs.ON_CONSOLE)

#: events the run log holds already in another form, so they stay on stderr (the compute logs)
#: only: a partition file's (its materialization's metadata holds the same figures; storing each
#: in the run log as well cost ~15 ms a file, 1.4 s for a 30-day backfill), a session outside the
#: partitions' (one per such session, on every run: the plan's metadata and the
#: ``sessions_within_partition_range`` check hold their count and a sample; with a start date on
#: the medium store's last day, a one-day run stored 5,307 events and took 15.7 s, 92 and 3.4 s
#: without them), and the console's own lines of Dagster's events (defs/run_console.py)
_STDERR_ONLY = frozenset(
    {"hermes.warehouse.day_written", "hermes.capture.out_of_range_session", *run_console.ALREADY_IN_THE_RUN_LOG}
)


def current_step() -> dg.OpExecutionContext | None:
    """The op context of the step running in this thread (asset, op of a graph asset, or check), or None."""
    for kind in (dg.AssetExecutionContext, dg.AssetCheckExecutionContext):
        try:
            return kind.get().op_execution_context
        except dg.DagsterInvariantViolationError:  # not in a step of this kind
            continue
    return None


#: the logger of the sensor tick this thread evaluates (:func:`tick_log`), if any
_tick_logger: ContextVar[logging.Logger | None] = ContextVar("hermes_assets_tick_logger", default=None)


@contextlib.contextmanager
def tick_log(context: dg.SensorEvaluationContext) -> Iterator[None]:
    """While a sensor evaluates a tick: our events go to the tick's log too (the UI's tick log)."""
    token = _tick_logger.set(context.log)
    try:
        yield
    finally:
        _tick_logger.reset(token)


def _message(event: MutableMapping[str, Any]) -> tuple[str, int]:
    """How a log entry shows ``event``: ``name {fields as JSON}``, and its level."""
    fields = {k: v for k, v in event.items() if k not in _NOT_STORED}
    level = str(event.get("level", "info")).upper()
    name = str(event.get("event", ""))
    message = f"{name} {json.dumps(fields, ensure_ascii=False, default=str, sort_keys=True)}"
    return message, logging.getLevelNamesMapping().get(level, logging.INFO)


def to_run_log(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Inside a step: add ``run_id`` and ``op`` to ``event`` and store it in the run log; inside
    a sensor tick: store it in the tick's log (neither printed again). Elsewhere: ``event`` as it is."""
    step = current_step()
    if step is None:
        tick = _tick_logger.get()
        if tick is not None:
            to_tick_log(tick, *_message(event))
        return event
    op = str(step.op_handle)
    event.setdefault("run_id", step.run_id)
    event.setdefault("op", op)
    if str(event.get("event", "")) not in _STDERR_ONLY:
        message, level = _message(event)
        step.instance.handle_new_event(
            dg.EventLogEntry(
                error_info=None,
                level=level,
                user_message=message,
                run_id=step.run_id,
                timestamp=time.time(),
                step_key=op,
                job_name=step.job_name,
                dagster_event=None,
            )
        )
    return event


def to_tick_log(logger: logging.Logger, message: str, level: int) -> None:
    """Write ``message`` to the log a sensor tick keeps (what the UI shows for the tick), through
    the tick logger's handlers other than Dagster's console dispatch, which would print it again."""
    record = logger.makeRecord(logger.name, level, __file__, 0, message, (), None, None, None, None)
    for handler in logger.handlers:
        if not isinstance(handler, DispatchingLogHandler) and level >= handler.level:
            handler.handle(record)


def install() -> None:
    """Route our events into the run log of the step that logs them (idempotent)."""
    logs.add_hook(to_run_log)
