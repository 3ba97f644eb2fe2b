"""Our structlog events in Dagster's run log too, printed once (the bridge; no definitions here).

``hermes_assets.lib.logs`` prints every event as a JSON line (or a console
line) on the process's stderr: that is the one line a console shows, and
inside a step Dagster's compute-log capture keeps it with the run (the
UI's stdout/stderr view). Inside a Dagster step this module also

- adds ``run_id`` and ``op`` (the step key, e.g. ``hermes_capture.plan``)
  to the event, so a JSON line can be joined with the run it belongs to;
- stores the event in the run's event log, where the UI shows it as
  ``hermes.capture.plan {"days": 14, ...}`` at the event's level.

The event is stored the way Dagster's own log handler stores a
``context.log`` message (an ``EventLogEntry`` with no Dagster event, handed
to ``instance.handle_new_event``), but without going through
``context.log``: ``DagsterLogHandler.emit`` (``dagster/_core/log_manager.py``)
hands every record both to the instance (the run log) and to the run's
loggers, whose default, the colored console logger, would print each event
a second time beside our own line.

Outside a step (sensor ticks, the CLI, plain library use) events only go to
the lines on stderr. Worker processes that a step spawns to build days in
parallel print their events but do not write to the run log (the step's log
belongs to the process that runs the step).

Loaded with the rest of ``hermes_assets/defs`` (``load_from_defs_folder``
imports every module), so every process that runs our code registers it.
"""

from __future__ import annotations

import json
import logging
import time

import dagster as dg

from hermes_assets.lib import logs

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
}
_NOT_FORWARDED = ("run_id", "op", "timestamp")


def current_context() -> dg.OpExecutionContext | None:
    """The op context of the step running in this thread (asset, op of a graph asset, or check), or None."""
    for kind in (dg.AssetExecutionContext, dg.AssetCheckExecutionContext):
        try:
            return kind.get().op_execution_context
        except Exception:
            continue
    return None


def step_fields() -> dict:
    """``run_id`` and ``op`` of the current step (empty outside a step)."""
    ctx = current_context()
    if ctx is None:
        return {}
    return {"run_id": ctx.run_id, "op": str(ctx.op_handle)}


#: events of one partition file: its materialization's metadata (rows written, retained,
#: file changed ...) holds the same figures, so they stay on stderr (the compute logs) only;
#: storing each in the run log as well cost ~15 ms a file (1.4 s for a 30-day backfill)
_PER_PARTITION = frozenset({"hermes.warehouse.day_written"})


def forward_to_run_log(level: str, event: str, fields: dict) -> None:
    """Store one event in the current step's run log, not printed again (no-op outside a step)."""
    if event in _PER_PARTITION:
        return  # the partition's materialization already holds these figures
    ctx = current_context()
    if ctx is None:
        return
    shown = {k: v for k, v in fields.items() if k not in _NOT_FORWARDED}
    message = f"{event} {json.dumps(shown, ensure_ascii=False, default=str, sort_keys=True)}"
    ctx.instance.handle_new_event(
        dg.EventLogEntry(
            error_info=None,
            level=_LEVELS.get(level, logging.INFO),
            user_message=message,
            run_id=ctx.run_id,
            timestamp=time.time(),
            step_key=str(ctx.op_handle),
            job_name=ctx.job_name,
            dagster_event=None,
        )
    )


def install() -> None:
    logs.add_binder(step_fields)
    logs.add_sink(forward_to_run_log)


install()
