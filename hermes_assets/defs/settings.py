"""Settings read from the environment (SPEC §10), in one place."""

from __future__ import annotations

import os
import sys


def env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or default


def warehouse_root() -> str:
    explicit = env("HERMES_ASSETS_WAREHOUSE")
    if explicit:
        return explicit
    home = env("DAGSTER_HOME")
    return os.path.join(home, "warehouse") if home else os.path.abspath("warehouse")


def poll_seconds() -> int:
    return int(env("HERMES_ASSETS_POLL_SECONDS", "30"))


def busy_timeout_ms() -> int:
    return int(env("HERMES_ASSETS_BUSY_TIMEOUT_MS", "2000"))


def user_home() -> str:
    return os.path.expanduser("~")


def on_terminal() -> bool:
    return sys.stderr.isatty()
