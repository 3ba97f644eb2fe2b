"""The SQLite event log of the default instance, writing Dagster's event batches in one go.

A ranged capture reports, per day and dataset, one planned materialization
when the run is created and one materialization when the day is written: on
a year of history about 2,000 events. Dagster's SQLite event log stores each
event on its own: a new engine and connection to the run's database and
another to the asset index, each closed after one insert, and in WAL mode the
close of the last connection checkpoints the file (fsyncs included). That was
about 16 ms of CPU and, on a busy disk, 70 ms of wall time per event (issue 21:
a 330-day run over days without sessions took 75-105 s, of which 20 s CPU).

Dagster can hand an event log whole batches (its ``DAGSTER_EVENT_BATCH_SIZE``:
the planned events of a run, the materializations of one output), but its
SQLite storage then still writes them one by one. This storage writes each
batch of asset events in one transaction on the run's database and one on the
index: the same rows in the same tables, in the same order, so the UI, the
partition status and every query see what they saw before. Other events
(steps, checks, run status) go through Dagster's own path unchanged, and the
run's database is still closed after each write, which is what the UI's live
run view watches. Configured in ``dagster.yaml`` (``event_log_storage``);
the Postgres instance (deploy/postgres) batches materializations itself when
``DAGSTER_EVENT_BATCH_SIZE`` is set.
"""

import os

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._serdes import ConfigurableClassData

#: events this storage writes as one batch: those Dagster mirrors in the asset index
BATCHED = frozenset(
    {
        DagsterEventType.ASSET_MATERIALIZATION,
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
        DagsterEventType.ASSET_OBSERVATION,
        DagsterEventType.ASSET_FAILED_TO_MATERIALIZE,
    }
)
#: how many events Dagster buffers before it hands them over (a batch also ends with its output)
BATCH_SIZE = "1000"


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log (the same files under ``<DAGSTER_HOME>/history/runs``),
    storing a batch of asset events in one transaction per database."""

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None):
        if base_dir is None:
            home = os.environ.get("DAGSTER_HOME")
            if not home:
                raise dg.DagsterInvariantViolationError(
                    "BatchedSqliteEventLogStorage needs `base_dir` in its config or DAGSTER_HOME set"
                )
            base_dir = os.path.join(home, "history", "runs")
        super().__init__(base_dir, inst_data)
        # Dagster reads this in each process that writes events: batches reach this storage only with it
        os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)

    @classmethod
    def config_type(cls) -> dict:
        return {"base_dir": dg.Field(dg.StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: dict):
        return cls(config_value.get("base_dir"), inst_data=inst_data)

    def store_event_batch(self, events: list[EventLogEntry]) -> None:
        """Consecutive asset events of one run in one write; any other event on its own, in order."""
        group: list[EventLogEntry] = []
        for event in events:
            if event.dagster_event_type in BATCHED and (not group or group[0].run_id == event.run_id):
                group.append(event)
                continue
            self._store_asset_events(group)
            group = []
            if event.dagster_event_type in BATCHED:
                group.append(event)
            else:
                self.store_event(event)
        self._store_asset_events(group)

    def _store_asset_events(self, events: list[EventLogEntry]) -> None:
        """What :meth:`store_event` does for each asset event (the run's log, then its mirror in
        the index with its tags and the asset's latest event), for all of them at once."""
        if len(events) < 2:
            for event in events:
                self.store_event(event)
            return
        # the run's database first: if it fails nothing was written, and Dagster stores the batch
        # again event by event (were the index to fail after it, that retry would log the events
        # twice in the run's database: both files are on the same disk, under the same timeout)
        with self.run_connection(events[0].run_id) as conn:
            for event in events:
                conn.execute(self.prepare_insert_event(event))
        with self.index_transaction() as conn:
            ids = [conn.execute(self.prepare_insert_event(event)).inserted_primary_key[0] for event in events]
            if any(event_id is None for event_id in ids):
                raise dg.DagsterInvariantViolationError("Cannot store asset event tags for null event id.")
            self._store_asset_event_tags(conn, events, ids)
            for event, event_id in zip(events, ids):
                self._store_asset_event(conn, event, event_id)
