"""In-process by default (a run in a fraction of a second); switchable by environment."""

from __future__ import annotations

import dagster as dg

from hermes_assets.defs import settings
from hermes_assets.lib.errors import ConfigurationError


def integration_release(library: str) -> str:
    """The release of a Dagster integration library that matches the installed Dagster: libraries
    are numbered 0.(minor + 16).patch beside Dagster 1.minor.patch (dagster-k8s 0.29.27 with 1.13.27)."""
    _, minor, patch = dg.__version__.split(".")[:3]
    return f"{library}==0.{int(minor) + 16}.{patch}"


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
            raise ConfigurationError(
                f"HERMES_ASSETS_EXECUTOR=k8s needs {integration_release('dagster-k8s')} installed"
            ) from exc
        return k8s_job_executor
    try:  # celery
        from dagster_celery import celery_executor
    except ImportError as exc:
        raise ConfigurationError(
            f"HERMES_ASSETS_EXECUTOR=celery needs {integration_release('dagster-celery')} installed"
        ) from exc
    return celery_executor
