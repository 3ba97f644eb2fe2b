"""Resources: the Hermes stores, the warehouse, the usage policy, the capture runtime.

Each is built from the validated settings (SPEC §10, ``defs/settings.py``),
and each can be swapped for another instance in tests.
"""

from __future__ import annotations

import os

import dagster as dg

from hermes_assets.defs import settings
from hermes_assets.lib import policy
from hermes_assets.lib.capture import PARALLEL_MIN_SESSIONS
from hermes_assets.lib.projection.context import ProjectionContext
from hermes_assets.lib.state_db import ReaderFactory
from hermes_assets.lib.store_connection import DEFAULT_BUSY_TIMEOUT_MS
from hermes_assets.lib.stores import Store, discover_stores
from hermes_assets.lib.warehouse import FileModes, Warehouse


class HermesStores(dg.ConfigurableResource):
    """The Hermes store(s) to read: ``HERMES_STATE_DB``, else ``HERMES_HOME`` discovery."""

    state_db: str | None = None
    hermes_home: str | None = None
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS

    def stores(self) -> list[Store]:
        return discover_stores(self.state_db, self.hermes_home)

    def readers(self) -> ReaderFactory:
        """How the stores are opened (the busy budget belongs to the reader)."""
        return ReaderFactory(busy_timeout_ms=self.busy_timeout_ms)


class HermesWarehouse(dg.ConfigurableResource):
    """Where the datasets' partition files live (SPEC §2): a local path, or a URI
    pyarrow's filesystem layer opens (``s3://bucket/prefix``, ``file:///…``)."""

    root: str
    spool: str | None = None
    file_mode: str = "private"

    def open(self) -> Warehouse:
        return Warehouse(self.root, spool=self.spool, modes=FileModes.named(self.file_mode))


class UsagePolicy(dg.ConfigurableResource):
    """The usage-policy resolver of SPEC §7 (one fresh resolver per run)."""

    list_path: str = policy.DEFAULT_LIST
    user_home: str = os.path.expanduser("~")

    def resolver(self) -> policy.PolicyResolver:
        return policy.PolicyResolver(self.list_path)

    def projection_context(self, now_s: float) -> ProjectionContext:
        return ProjectionContext(user_home=self.user_home, now_s=now_s)


class CaptureRuntime(dg.ConfigurableResource):
    """How a run works: worker processes for the days (used from ``parallel_min_sessions``
    sessions on), and the log format they use."""

    workers: int = 1
    parallel_min_sessions: int = PARALLEL_MIN_SESSIONS
    log_format: str | None = None


def default_warehouse(s: settings.Settings | None = None) -> HermesWarehouse:
    s = s or settings.load()
    return HermesWarehouse(root=s.warehouse, spool=s.spool, file_mode=s.file_mode)


def default_resources(s: settings.Settings | None = None) -> dict:
    s = s or settings.load()
    return {
        "hermes": HermesStores(state_db=s.state_db, hermes_home=s.hermes_home, busy_timeout_ms=s.busy_timeout_ms),
        "warehouse": default_warehouse(s),
        "usage_policy": UsagePolicy(list_path=s.policy_list, user_home=s.user_home),
        "capture_runtime": CaptureRuntime(workers=s.workers, log_format=s.log_format),
    }


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=default_resources())
