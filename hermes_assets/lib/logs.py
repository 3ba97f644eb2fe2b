"""structlog set-up shared by the core and the Dagster shell.

Event names are ``hermes.<area>.<event>``; fields are ids and counts
(``session_id``, ``day``, ``rows``, ``error_kind``), never message content.
``HERMES_ASSETS_LOG_FORMAT`` picks ``json`` or ``console`` (default: console on
a terminal, else JSON lines).
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False


def configure(fmt: str | None = None, stream=None) -> None:
    """Configure structlog once per process (idempotent unless ``fmt`` is given)."""
    global _configured
    if _configured and fmt is None:
        return
    stream = stream or sys.stderr
    fmt = fmt or os.environ.get("HERMES_ASSETS_LOG_FORMAT") or (
        "console" if getattr(stream, "isatty", lambda: False)() else "json"
    )
    renderer = (
        structlog.dev.ConsoleRenderer(colors=False)
        if fmt == "console"
        else structlog.processors.JSONRenderer(ensure_ascii=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(**initial):
    configure()
    return structlog.get_logger(**initial)
