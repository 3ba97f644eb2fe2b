"""structlog set-up shared by the core and the Dagster shell.

Event names are ``hermes.<area>.<event>``; fields are ids and counts
(``session_id``, ``day``, ``rows``, ``error_kind``), never message content.
:func:`configure` picks ``json`` (one JSON object per line) or ``console``
(default: console on a terminal, else JSON lines); the Dagster shell passes
the ``HERMES_ASSETS_LOG_FORMAT`` setting, and the lowest level kept
(``HERMES_ASSETS_LOG_LEVEL``, ``info`` by default). Lines go to the process's
*current* ``sys.stderr`` unless :func:`configure` is given a stream.

A quiet console: every event at the level kept or above reaches the hooks (the
Dagster shell keeps them in the run's or the tick's log, which the UI shows), but
only warnings, errors and the events logged with :data:`ON_CONSOLE` (one line per
run) are printed; at ``debug`` every event is printed.

Hooks: the Dagster shell adds one with :func:`add_hook` (a structlog
processor) that sees every event before it is printed: it adds the run and
op an event was logged in and stores the event in Dagster's run log
(``hermes_assets/defs/run_log.py``). Hooks outlive :func:`configure`. This
module knows nothing of Dagster.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TextIO, get_args

import structlog

LogFormat = Literal["json", "console"]
FORMATS: tuple[str, ...] = get_args(LogFormat)
#: the lowest level printed (``info`` unless asked: ``HERMES_ASSETS_LOG_LEVEL``)
LogLevel = Literal["debug", "info", "warning", "error"]
LEVELS: tuple[str, ...] = get_args(LogLevel)

#: the field that has an event printed on the console below ``warning``: ``log.info(name, **ON_CONSOLE, ...)``
ON_CONSOLE = {"on_console": True}
#: the levels printed on the console whatever the event (below them, only :data:`ON_CONSOLE` events)
CONSOLE_LEVELS = frozenset({"warning", "error", "critical", "exception"})

#: a structlog processor: ``hook(logger, method_name, event_dict) -> event_dict``
Hook = Callable[[Any, str, MutableMapping[str, Any]], MutableMapping[str, Any]]


@dataclass(frozen=True)
class LogSetup:
    """How events are printed: the format asked for (None: console on a terminal, else JSON
    lines), the lowest level printed, and the stream (None: ``sys.stderr`` as it is at each write)."""

    format: LogFormat | None = None
    level: LogLevel = "info"
    stream: TextIO | None = None


#: the set-up in force; None until the first :func:`configure`
_setup: LogSetup | None = None
_hooks: list[Hook] = []


def resolve_format(fmt: str | None = None, stream: TextIO | None = None) -> LogFormat:
    """``fmt`` (``json`` or ``console``), else console on a terminal and JSON otherwise."""
    if fmt == "json":
        return "json"
    if fmt == "console":
        return "console"
    target = stream if stream is not None else sys.stderr
    return "console" if target.isatty() else "json"


def configure(fmt: LogFormat | None = None, stream: TextIO | None = None, level: LogLevel | None = None) -> None:
    """Configure structlog once per process (again whenever ``fmt``, ``stream`` or ``level`` is given).

    A call that only sets the level keeps the format and stream in force.
    """
    global _setup
    current = _setup
    if current is not None and fmt in (None, current.format) and stream is None and level in (None, current.level):
        return
    if current is None or fmt is not None or stream is not None:
        current = LogSetup(format=fmt, level=current.level if current else "info", stream=stream)
    setup = replace(current, level=level or current.level)
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=False)
        if resolve_format(setup.format, setup.stream) == "console"
        else structlog.processors.JSONRenderer(ensure_ascii=False, default=str)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _run_hooks,
            _quiet_console,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[setup.level.upper()]),
        logger_factory=_logger_factory,
        cache_logger_on_first_use=False,
    )
    _setup = setup


def configured_format() -> LogFormat | None:
    """The format the last :func:`configure` asked for (None: by terminal), for worker processes
    to print their events as this process does."""
    return _setup.format if _setup is not None else None


class _Logger:
    """A module's logger, made at import and set up at its first event: importing a module
    configures nothing; an event logged before any :func:`configure` gets the default set-up."""

    __slots__ = ("_bound", "_initial")

    def __init__(self, initial: dict[str, Any]):
        self._initial = initial
        self._bound: Any = None

    def __getattr__(self, name: str) -> Any:
        if _setup is None:
            configure()
        if self._bound is None:
            self._bound = structlog.get_logger(**self._initial)
        return getattr(self._bound, name)


def get_logger(**initial: Any) -> Any:
    """A structlog logger; nothing is configured until it logs (see :class:`_Logger`)."""
    return _Logger(initial)


def add_hook(hook: Hook) -> None:
    """Run ``hook`` on every event that passes the level filter, before it is printed (idempotent)."""
    if hook not in _hooks:
        _hooks.append(hook)


# --------------------------------------------------------------------------
# processors
# --------------------------------------------------------------------------


def _logger_factory(*_args: Any) -> structlog.PrintLogger:
    stream = _setup.stream if _setup is not None else None
    return structlog.PrintLogger(file=stream if stream is not None else sys.stderr)


def configured_level() -> LogLevel:
    """The lowest level the last :func:`configure` kept (``info`` before any)."""
    return _setup.level if _setup is not None else "info"


def _quiet_console(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Print warnings, errors and :data:`ON_CONSOLE` events; every event at ``debug``."""
    on_console = event_dict.pop("on_console", False)
    if on_console or configured_level() == "debug" or str(event_dict.get("level", method)) in CONSOLE_LEVELS:
        return event_dict
    raise structlog.DropEvent


def _run_hooks(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for hook in list(_hooks):
        try:
            event_dict = hook(logger, method, event_dict)
        except Exception:  # a hook (e.g. a closed run log) must never cost the event
            continue
    return event_dict
