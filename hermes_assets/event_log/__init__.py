"""The batched event logs of the instance: Dagster's own SQLite and Postgres event logs, writing
the batches of asset and check events a run hands them in one transaction per database.

``dagster.yaml`` names :class:`~hermes_assets.event_log.sqlite.BatchedSqliteEventLogStorage`
as ``hermes_assets.event_log``; ``deploy/postgres/dagster.yaml`` names
``hermes_assets.event_log.postgres``. Outside ``defs/``: loading the definitions never imports
them, only an instance's ``dagster.yaml`` does.
"""

from hermes_assets.event_log.grouped import (
    ASSET_GROUPED,
    BATCH_SIZE,
    BATCH_SIZE_VARIABLE,
    CHECK_GROUPED,
    FALLBACK_NOTE,
    GROUPED,
)
from hermes_assets.event_log.sqlite import RELIED_ON, BatchedSqliteEventLogStorage

__all__ = [
    "ASSET_GROUPED",
    "BATCH_SIZE",
    "BATCH_SIZE_VARIABLE",
    "CHECK_GROUPED",
    "FALLBACK_NOTE",
    "GROUPED",
    "RELIED_ON",
    "BatchedSqliteEventLogStorage",
]
