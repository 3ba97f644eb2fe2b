"""The Postgres event log of ``deploy/postgres``, writing Dagster's event batches in one go.

Dagster's Postgres event log writes a batch of materializations (or of
observations) in one statement (the asset's row from the last one only), but
any other batch, the planned events of a run among them, event by event, and
each event opens its own connections to the server (one more for a check
event). This storage writes each group of a batch (:mod:`.grouped`) in one
transaction on one connection: its events in one statement, then what the
index keeps of them, as Dagster's ``store_event`` would for each. A group is
stored whole or not at all.

Like the SQLite one, it turns Dagster's batches on (``DAGSTER_EVENT_BATCH_SIZE``,
unless the user set it) in the processes that build the instance, and falls
back to Dagster's own storage, with one warning per process, when what it
relies on moved. Needs the ``postgres`` extra (dagster-postgres).
"""

from collections.abc import Mapping
from typing import Any

from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._serdes import ConfigurableClassData
from dagster_postgres.event_log.event_log import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

from hermes_assets.event_log.grouped import (
    GROUP_RELIED_ON,
    GroupedWrites,
    incompatibility,
    turn_batches_on,
    warn_once,
)

#: what this storage overrides or calls on Dagster's Postgres event log, with the parameters it passes
RELIED_ON = {
    "__init__": "self, postgres_url, should_autocreate_tables=True, inst_data=None, token_provider=None",
    "from_config_value": "inst_data, config_value",
    **GROUP_RELIED_ON,
}


class BatchedPostgresEventLogStorage(GroupedWrites, PostgresEventLogStorage):
    """Dagster's Postgres event log (the same tables), storing a batch of asset and check events
    in one transaction."""

    def __init__(
        self,
        postgres_url: str,
        should_autocreate_tables: bool = True,
        inst_data: ConfigurableClassData | None = None,
        token_provider: Any = None,
    ):
        self.fallback = incompatibility(PostgresEventLogStorage, RELIED_ON)
        super().__init__(postgres_url, should_autocreate_tables, inst_data, token_provider)
        if self.fallback is None:
            turn_batches_on()
        else:  # Dagster's own storage: batching stays as the user set it
            warn_once(self.fallback, None, "Postgres")

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> "BatchedPostgresEventLogStorage":
        return cls(
            pg_url_from_config(config_value),
            config_value.get("should_autocreate_tables", True),
            inst_data,
            get_token_provider_from_config(config_value),
        )

    def _store_group(self, events: list[EventLogEntry]) -> None:
        rows = [self._event_to_row(event) for event in events]
        with self.index_transaction() as conn:  # the run's log and the index are one database
            insert = SqlEventLogStorageTable.insert().returning(
                SqlEventLogStorageTable.c.id, sort_by_parameter_order=True
            )
            ids = [int(row[0]) for row in conn.execute(insert, rows)]
            self._store_in_index(conn, events, ids, rows)
