"""Our structlog events in Dagster's run log too, printed once (a log hook; no definitions here).

``hermes_assets.lib.logs`` prints every event as a JSON line (or a console
line) on the process's stderr: that is the one line a console shows, and
inside a step Dagster's compute-log capture keeps it with the run (the UI's
stdout/stderr view). :func:`to_run_log`, which ``hermes_assets/definitions.py``
adds as a hook of ``lib/logs.py`` when the definitions load, does two more
things to an event logged inside a Dagster step:

- it adds ``run_id`` and ``op`` (the step key, e.g. ``hermes_capture.plan``),
  so a JSON line can be joined with the run it belongs to;
- it stores the event in the run's event log, where the UI shows it as
  ``hermes.capture.plan {"days": 14, ...}`` at the event's level.

Why not Dagster's managed Python loggers (``python_logs.managed_python_loggers``)?
Their handler gives each record to the run's loggers as well as to the event
log, so the colored console logger would print every event a second time
beside our own JSON line (a ``dagster asset materialize`` run then shows
``... - hermes_capture.plan - hermes.capture.plan {...}`` and the JSON line);
and each run sets a managed logger to ``python_log_level`` (INFO here, for a
quiet console), so ``HERMES_ASSETS_LOG_LEVEL=debug`` alone would not keep
our debug events in the run log. So the event is stored the way Dagster's own
handler stores a ``context.log`` message, an ``EventLogEntry`` without a Dagster
event, handed to the instance.

Outside a step (sensor ticks, the CLI, plain library use) events only go to
the lines on stderr. Worker processes that a step spawns to build days in
parallel print their events but do not write to the run log (the step's log
belongs to the process that runs the step).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import MutableMapping
from typing import Any

import dagster as dg

from hermes_assets.lib import logs

#: fields of an event that the run log's entry carries itself (its run, step and time)
_NOT_STORED = ("event", "level", "run_id", "op", "timestamp")

#: events of one partition file: its materialization's metadata (rows written, retained,
#: file changed ...) holds the same figures, so they stay on stderr (the compute logs) only;
#: storing each in the run log as well cost ~15 ms a file (1.4 s for a 30-day backfill)
_PER_PARTITION = frozenset({"hermes.warehouse.day_written"})


def current_step() -> dg.OpExecutionContext | None:
    """The op context of the step running in this thread (asset, op of a graph asset, or check), or None."""
    for kind in (dg.AssetExecutionContext, dg.AssetCheckExecutionContext):
        try:
            return kind.get().op_execution_context
        except dg.DagsterInvariantViolationError:  # not in a step of this kind
            continue
    return None


def to_run_log(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Inside a step: add ``run_id`` and ``op`` to ``event`` and store it in the run log (not
    printed again). Outside a step: ``event`` as it is."""
    step = current_step()
    if step is None:
        return event
    op = str(step.op_handle)
    event.setdefault("run_id", step.run_id)
    event.setdefault("op", op)
    name = str(event.get("event", ""))
    if name not in _PER_PARTITION:
        fields = {k: v for k, v in event.items() if k not in _NOT_STORED}
        level = str(event.get("level", "info")).upper()
        step.instance.handle_new_event(
            dg.EventLogEntry(
                error_info=None,
                level=logging.getLevelNamesMapping().get(level, logging.INFO),
                user_message=f"{name} {json.dumps(fields, ensure_ascii=False, default=str, sort_keys=True)}",
                run_id=step.run_id,
                timestamp=time.time(),
                step_key=op,
                job_name=step.job_name,
                dagster_event=None,
            )
        )
    return event


def install() -> None:
    """Route our events into the run log of the step that logs them (idempotent)."""
    logs.add_hook(to_run_log)
