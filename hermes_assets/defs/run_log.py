"""Our structlog events in Dagster's run log too (the bridge; no definitions here).

``hermes_assets.lib.logs`` prints every event as a JSON line (or a console
line). Inside a Dagster step, this module also

- adds ``run_id`` and ``op`` (the step key, e.g.
  ``hermes_capture.project_rows``) to the event, so a JSON line can
  be joined with the run it belongs to;
- writes the event to the step's ``context.log``: it appears in the run's
  event log in the UI as ``hermes.capture.plan {"days": 14, ...}``.

Outside a step (sensor ticks, the CLI, plain library use) events only go to
the JSON lines. Worker processes that a step forks to build days in parallel
print their events but do not write to the run log (the step's log belongs to
the process that runs the step).

Loaded with the rest of ``hermes_assets/defs`` (``load_from_defs_folder``
imports every module), so every process that runs our code registers it.
"""

from __future__ import annotations

import json
import os

import dagster as dg

from hermes_assets.lib import logs

_PID = os.getpid()
_DAGSTER_LEVELS = {"debug": "debug", "info": "info", "warning": "warning", "warn": "warning",
                   "error": "error", "exception": "error", "critical": "critical"}
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


def forward_to_run_log(level: str, event: str, fields: dict) -> None:
    """Write one event to the current step's Dagster log (no-op outside a step)."""
    if os.getpid() != _PID:
        return  # a forked worker: the step's log belongs to its parent
    ctx = current_context()
    if ctx is None:
        return
    shown = {k: v for k, v in fields.items() if k not in _NOT_FORWARDED}
    message = f"{event} {json.dumps(shown, ensure_ascii=False, default=str, sort_keys=True)}"
    getattr(ctx.log, _DAGSTER_LEVELS.get(level, "info"))(message)


def install() -> None:
    logs.add_binder(step_fields)
    logs.add_sink(forward_to_run_log)


install()
