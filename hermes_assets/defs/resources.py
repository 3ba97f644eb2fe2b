"""Resources: the Hermes stores, the warehouse, the usage policy, the capture runtime.

Each takes its values from the settings the definitions loaded with
(``defs/settings.py``, SPEC §10: :meth:`from_settings`), its fields typed as
the settings are, and each can be swapped for another instance in tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Literal

import dagster as dg

from hermes_assets.defs.settings import AbsolutePath, FileMode, PathOrUri, PositiveInt, Settings
from hermes_assets.lib.capture.pool import START_METHODS
from hermes_assets.lib.capture.steps import PARALLEL_MIN_SESSIONS
from hermes_assets.lib.hosts import host_claims, host_labels
from hermes_assets.lib.plan import policy
from hermes_assets.lib.projection.context import ProjectionContext
from hermes_assets.lib.redaction.redactor import RedactionConfig
from hermes_assets.lib.redaction.sources import env_files
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.store_connection import DEFAULT_BUSY_TIMEOUT_MS
from hermes_assets.lib.source.store_identity import identities
from hermes_assets.lib.source.stores import Store, discover_stores, on_host
from hermes_assets.lib.storage.local_files import FileModes
from hermes_assets.lib.warehouse.datasets import Warehouse


class HermesStores(dg.ConfigurableResource):
    """The Hermes store(s) to read: ``HERMES_STATE_DB``, else ``HERMES_HOME`` discovery."""

    state_db: str | None = None
    hermes_home: AbsolutePath | None = None
    busy_timeout_ms: PositiveInt = DEFAULT_BUSY_TIMEOUT_MS
    #: the host whose stores these are (every row names it; empty: the machine's hostname)
    host: str = ""

    @classmethod
    def from_settings(cls, s: Settings) -> HermesStores:
        return cls(
            state_db=s.state_db,
            hermes_home=s.hermes_home,
            busy_timeout_ms=s.busy_timeout_ms,
            host=s.host_label,
        )

    def stores(self) -> list[Store]:
        host = self.host or host_labels.default_label()
        # whether the host joins its ids' scope is the warehouse's to say (project_rows)
        return on_host(discover_stores(self.state_db, self.hermes_home), host, scoped=False)

    def readers(self) -> ReaderFactory:
        """How the stores are opened (the busy budget belongs to the reader)."""
        return ReaderFactory(busy_timeout_ms=self.busy_timeout_ms)

    def identities(self) -> dict[str, str]:
        """Store path -> its identity (:mod:`hermes_assets.lib.source.store_identity`), for the
        stores that can be read and hold a session (one read-only look each)."""
        return identities(self.stores(), self.readers())


class HermesWarehouse(dg.ConfigurableResource):
    """Where the datasets' partition files live (SPEC §2): a local path, or a URI
    pyarrow's filesystem layer opens (``s3://bucket/prefix``, ``file:///…``)."""

    root: PathOrUri
    spool: AbsolutePath | None = None
    file_mode: FileMode = "private"
    #: this host's label: its files are its own (``day=<day>/host=<label>/``; empty: the hostname)
    host: str = ""
    #: the label was set (``HERMES_ASSETS_HOST``): the host's ids are scoped by it
    host_named: bool = False
    #: this host's identity file (empty: no identity, no claims: a warehouse one host writes)
    identity_file: str = ""

    @classmethod
    def from_settings(cls, s: Settings) -> HermesWarehouse:
        return cls(
            root=s.warehouse,
            spool=s.spool,
            file_mode=s.file_mode,
            host=s.host_label,
            host_named=s.host_named,
            identity_file=s.host_identity or "",
        )

    def open(self) -> Warehouse:
        modes = FileModes.named(self.file_mode)
        return Warehouse(self.root, spool=self.spool, modes=modes, host=self.host or None, host_named=self.host_named)

    def settle_host(self, wh: Warehouse, stores: dict[str, str]) -> None:
        """Before a capture writes anything: this host's identity, label and stores claimed in
        the warehouse (:func:`hermes_assets.lib.hosts.host_claims.settle_host`); raises
        :class:`~hermes_assets.lib.basics.errors.HostConflict` when they are another host's."""
        if self.identity_file:
            host_claims.settle_host(
                wh.storage, wh.root, self.identity_file, wh.host, stores, named=self.host_named, modes=wh.modes
            )

    def check_host(self, wh: Warehouse, stores: dict[str, str] | None = None) -> None:
        """The same, reading only (a sensor tick, a command before it runs anything)."""
        if self.identity_file:
            host_claims.check_host(wh.storage, wh.root, self.identity_file, wh.host, stores or {})


class UsagePolicy(dg.ConfigurableResource):
    """The usage-policy resolver of SPEC §7 (one fresh resolver per run)."""

    list_path: AbsolutePath
    user_home: str
    #: redact secrets from each session's cells before its rows are built (docs/redaction.md)
    redact_secrets: bool = True
    #: the markers' key (None: ``redaction.key`` in the Dagster instance's folder)
    redaction_key: str | None = None

    @classmethod
    def from_settings(cls, s: Settings) -> UsagePolicy:
        return cls(
            list_path=s.policy_list,
            user_home=s.user_home,
            redact_secrets=s.redact_secrets,
            redaction_key=s.redaction_key,
        )

    def resolver(self) -> policy.PolicyResolver:
        return policy.PolicyResolver(self.list_path)

    def redaction(self, store_paths: Iterable[str], instance_root: str | None = None) -> RedactionConfig | None:
        """How the run redacts (None: it does not): the key, and the ``.env`` files of the
        Hermes homes of ``store_paths`` (the home's own and each profile's)."""
        if not self.redact_secrets:
            return None
        key = self.redaction_key or os.path.join(
            instance_root or os.path.expanduser("~/.hermes_assets"), "redaction.key"
        )
        return RedactionConfig(os.path.abspath(os.path.expanduser(key)), env_files(store_paths))

    def projection_context(self, now_s: float) -> ProjectionContext:
        return ProjectionContext(user_home=self.user_home, now_s=now_s)


class CaptureRuntime(dg.ConfigurableResource):
    """How a run works: worker processes for the days (used from ``parallel_min_sessions``
    sessions on) and how they start (``forkserver`` or ``spawn``, never ``fork``); they print
    their events in the format of the run's process."""

    workers: PositiveInt
    parallel_min_sessions: int = PARALLEL_MIN_SESSIONS
    start_method: Literal[START_METHODS] = START_METHODS[0]  # type: ignore[valid-type]

    @classmethod
    def from_settings(cls, s: Settings) -> CaptureRuntime:
        return cls(workers=s.workers)


def resources_for(s: Settings) -> dict[str, dg.ConfigurableResource]:
    """The resources of the definitions, by key, from the settings ``s``."""
    return {
        "hermes": HermesStores.from_settings(s),
        "warehouse": HermesWarehouse.from_settings(s),
        "usage_policy": UsagePolicy.from_settings(s),
        "capture_runtime": CaptureRuntime.from_settings(s),
    }
