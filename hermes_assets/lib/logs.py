"""structlog set-up shared by the core and the Dagster shell.

Event names are ``hermes.<area>.<event>``; fields are ids and counts
(``session_id``, ``day``, ``rows``, ``error_kind``), never message content.
:func:`configure` picks ``json`` (one JSON object per line) or ``console``
(default: console on a terminal, else JSON lines); the Dagster shell passes
the ``HERMES_ASSETS_LOG_FORMAT`` setting, and the lowest level printed
(``HERMES_ASSETS_LOG_LEVEL``, ``info`` by default). Lines go to the process's
*current* ``sys.stderr`` unless :func:`configure` is given a stream.

Sinks: the Dagster shell registers a callable with :func:`add_sink` that
receives ``(level, event, fields)`` for every event, so the same events also
reach Dagster's run log (``hermes_assets/defs/run_log.py``). A binder added
with :func:`add_binder` returns fields to add to every event (the run and op
an event was logged in). This module knows nothing of Dagster.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import structlog

FORMATS = ("json", "console")
#: the lowest level printed (``info`` unless asked: ``HERMES_ASSETS_LOG_LEVEL``)
LEVELS = ("debug", "info", "warning", "error")

#: ``sink(level, event, fields)``; called for every event that passes the level filter
Sink = Callable[[str, str, dict], None]

_configured = False
_format: str | None = None  # the format asked for (None: by terminal)
_level = "info"
_stream = None  # None: whatever sys.stderr is at the time of each write
_sinks: list[Sink] = []
_binders: list[Callable[[], dict]] = []


def resolve_format(fmt: str | None = None, stream=None) -> str:
    """``fmt`` (``json`` or ``console``), else console on a terminal and JSON otherwise."""
    if fmt in FORMATS:
        return fmt
    target = stream if stream is not None else sys.stderr
    return "console" if getattr(target, "isatty", lambda: False)() else "json"


def configure(fmt: str | None = None, stream=None, level: str | None = None) -> None:
    """Configure structlog once per process (again whenever ``fmt``, ``stream`` or ``level`` is given)."""
    global _configured, _stream, _format, _level
    if _configured and (fmt is None or fmt == _format) and stream is None and (level is None or level == _level):
        return
    if fmt is not None or stream is not None or not _configured:  # a call that only sets the level keeps them
        _format, _stream = fmt, stream
    _level = level or _level
    chosen = resolve_format(_format, _stream)
    renderer = (
        structlog.dev.ConsoleRenderer(colors=False)
        if chosen == "console"
        else structlog.processors.JSONRenderer(ensure_ascii=False, default=str)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _bind,
            _to_sinks,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, _level.upper())),
        logger_factory=_logger_factory,
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(**initial):
    configure()
    return structlog.get_logger(**initial)


def add_sink(sink: Sink) -> None:
    """Also hand every event to ``sink`` (idempotent)."""
    if sink not in _sinks:
        _sinks.append(sink)


def remove_sink(sink: Sink) -> None:
    if sink in _sinks:
        _sinks.remove(sink)


def add_binder(binder: Callable[[], dict]) -> None:
    """Add the fields ``binder()`` returns to every event (fields the caller set win)."""
    if binder not in _binders:
        _binders.append(binder)


def remove_binder(binder: Callable[[], dict]) -> None:
    if binder in _binders:
        _binders.remove(binder)


# --------------------------------------------------------------------------
# processors
# --------------------------------------------------------------------------


def _logger_factory(*_args):
    return structlog.PrintLogger(file=_stream if _stream is not None else sys.stderr)


def _bind(_logger, _method, event_dict: dict) -> dict:
    for binder in _binders:
        try:
            extra = binder()
        except Exception:  # a broken binder must never cost the event
            continue
        for key, value in extra.items():
            event_dict.setdefault(key, value)
    return event_dict


def _to_sinks(_logger, method: str, event_dict: dict) -> dict:
    if _sinks:
        event = str(event_dict.get("event", ""))
        level = str(event_dict.get("level", method))
        fields = {k: v for k, v in event_dict.items() if k not in ("event", "level")}
        for sink in list(_sinks):
            try:
                sink(level, event, fields)
            except Exception:  # a sink (e.g. a closed run log) must never cost the event
                pass
    return event_dict
