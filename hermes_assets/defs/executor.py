"""In-process by default (a run in a fraction of a second); switchable by environment."""

from __future__ import annotations

import dagster as dg

from hermes_assets.defs import settings
from hermes_assets.lib.basics.errors import ConfigurationError

#: the extra of the project that installs each executor's package (pyproject.toml), and the package
EXTRAS = {"k8s": "dagster-k8s", "celery": "dagster-celery"}


def missing_extra(name: str) -> ConfigurationError:
    """The one line of an executor whose package is not installed: the extra that installs it."""
    return ConfigurationError(
        f"HERMES_ASSETS_EXECUTOR={name} needs {EXTRAS[name]}, which the project's {name} extra installs: "
        f"`.venv/bin/uv sync --frozen --inexact --extra {name}` (or pip install 'hermes_assets[{name}]')"
    )


def executor_for(name: settings.Executor) -> dg.ExecutorDefinition:
    """The executor ``HERMES_ASSETS_EXECUTOR`` names (one of ``settings.EXECUTORS``, checked at load)."""
    if name == "in_process":
        return dg.in_process_executor
    if name == "multiprocess":
        return dg.multiprocess_executor
    if name == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError as exc:
            raise missing_extra(name) from exc
        return k8s_job_executor
    try:  # celery
        from dagster_celery import celery_executor
    except ImportError as exc:
        raise missing_extra(name) from exc
    return celery_executor
