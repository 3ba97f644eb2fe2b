"""Resources: the Hermes stores, the warehouse, the usage policy.

Each is configured from the environment (SPEC §10) with the defaults there,
and each can be swapped for a test double by passing another instance.
"""

from __future__ import annotations

import os
import time

import dagster as dg

from hermes_assets.defs import settings
from hermes_assets.lib import policy, projection, state_db
from hermes_assets.lib.warehouse import Warehouse


class HermesStores(dg.ConfigurableResource):
    """The Hermes store(s) to read: ``HERMES_STATE_DB`` or ``HERMES_HOME`` discovery."""

    state_db: str | None = None
    hermes_home: str | None = None
    busy_timeout_ms: int = 2000

    def stores(self) -> list[state_db.Store]:
        environ = dict(os.environ)
        if self.state_db:
            environ["HERMES_STATE_DB"] = self.state_db
        if self.hermes_home:
            environ["HERMES_HOME"] = self.hermes_home
        return state_db.discover_stores(environ)


class HermesWarehouse(dg.ConfigurableResource):
    """Where the datasets' partition files live (SPEC §2): a local path, or a URI
    pyarrow's filesystem layer opens (``s3://bucket/prefix``, ``file:///…``)."""

    root: str

    def open(self) -> Warehouse:
        return Warehouse(self.root)


class UsagePolicy(dg.ConfigurableResource):
    """The usage-policy resolver of SPEC §7 (one fresh resolver per run)."""

    list_path: str | None = None
    user_home: str = os.path.expanduser("~")

    def resolver(self) -> policy.PolicyResolver:
        return policy.PolicyResolver(self.list_path)

    def projection_context(self) -> projection.ProjectionContext:
        return projection.ProjectionContext(user_home=self.user_home, now_s=time.time())


def default_warehouse() -> HermesWarehouse:
    return HermesWarehouse(root=settings.warehouse_root())


def default_resources() -> dict:
    return {
        "hermes": HermesStores(
            state_db=settings.env("HERMES_STATE_DB"),
            hermes_home=settings.env("HERMES_HOME"),
            busy_timeout_ms=settings.busy_timeout_ms(),
        ),
        "warehouse": default_warehouse(),
        "usage_policy": UsagePolicy(
            list_path=settings.env("HERMES_ASSETS_POLICY_LIST"), user_home=settings.user_home()
        ),
    }


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=default_resources())
