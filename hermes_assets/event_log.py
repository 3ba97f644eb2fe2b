"""The SQLite event log of the default instance, writing Dagster's event batches in one go.

A ranged capture reports, per day and dataset, one planned materialization
when the run is created and one materialization when the day is written: on
a year of history about 2,000 events. Dagster's SQLite event log stores each
event on its own: a new engine and connection to the run's database and
another to the asset index, each closed after one insert, and in WAL mode the
close of the last connection checkpoints the file (fsyncs included). That was
about 16 ms of CPU and, on a busy disk, 70 ms of wall time per event (issue 21:
a 330-day run over days without sessions took 75-105 s, of which 20 s CPU).

Dagster can hand an event log whole batches (the planned events of a run, the
materializations of one output), but its SQLite storage then still writes
them one by one. This storage writes each run of consecutive asset events of
a batch in one transaction on the run's database and one on the index: the
same rows in the same tables, in the same order, so the UI, the partition
status and every query see what they saw before. Other events (steps, checks,
run status) go through Dagster's own ``store_event`` unchanged, and the run's
database is still closed after each write, which is what the UI's live run
view watches.

When a write fails, each event of the batch is still stored once (Dagster's
own storage with batches on stores the part before the failure twice):

* the index refuses a group of asset events (locked past SQLite's busy
  timeout, a full disk): the group's rows are taken out of the run's database
  again, so the two databases agree, then the error goes on;
* nothing of the batch is stored yet: the error reaches Dagster, which stores
  the batch again event by event (``handle_new_event``'s fallback);
* part of the batch is stored: Dagster's fallback would store that part twice,
  so the rest is stored here event by event, and only an error of that goes on.

A cancel cannot land inside a batch: Dagster buffers an output's events while
it emits them, with no user code between them, and raises a captured
interrupt only inside user code. A killed process loses what Dagster still
buffered, the events of the output it was emitting (as Dagster's own storage
with batches on; without batches, only those not emitted yet): the days are
written, and show as not materialized until a later run writes them again.

Dagster turns batching on with one switch only, the environment variable
``DAGSTER_EVENT_BATCH_SIZE``, which its instance reads on every event (there
is no key for it in ``dagster.yaml``); unset, it never calls
``store_event_batch`` and this storage behaves exactly like Dagster's own. So
the constructor sets it, unless the user set it (``0`` turns batching off).
Every process that writes events to this instance builds its instance, and the
instance builds this storage at once, before the first event: the CLI, the
webserver and the daemon (the planned events of the runs they create), the run
worker and step workers. A process that never builds it writes no events here
(it keeps Dagster's default unless its parent had built the storage, whose
value it inherits; an instance that is not this one then batches too, which
Dagster's other storages support). The Postgres instance (deploy/postgres)
does not load this module: it batches when the user exports the variable.
The module lives outside ``defs/`` so that loading the definitions (which
imports every module there) never imports it: only ``dagster.yaml`` does.

It subclasses a private Dagster class and calls some of its methods; the
release is pinned in pyproject.toml and tests/defs/test_event_log.py fails,
naming the method, when one of them changes its signature.
"""

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._serdes import ConfigurableClassData

#: events this storage writes as one group: those Dagster batches and mirrors in the asset index
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
    """Dagster's SQLite event log (the same files, under ``<instance folder>/history/runs``),
    storing a batch of asset events in one transaction per database."""

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None):
        # Dagster gives its own storage <instance folder>/history/runs from its defaults, but a
        # storage named in dagster.yaml only its config: without a base_dir the folder is the
        # instance's, known when the instance registers (DAGSTER_HOME may name another one)
        self._inst_data = inst_data
        if base_dir is not None:
            super().__init__(base_dir, inst_data)
        # Dagster's only switch for batches, read per event (see the module's docstring)
        os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)

    def register_instance(self, instance: dg.DagsterInstance) -> None:
        if not hasattr(self, "_base_dir"):
            super().__init__(os.path.join(instance.root_directory, "history", "runs"), self._inst_data)
        super().register_instance(instance)

    @classmethod
    def config_type(cls) -> dict:
        return {"base_dir": dg.Field(dg.StringSource, is_required=False)}

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> "BatchedSqliteEventLogStorage":
        return cls(config_value.get("base_dir"), inst_data=inst_data)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Consecutive asset events of one run in one write; any other event on its own, in order."""
        stored = 0
        for group in _groups(events):
            try:
                if len(group) == 1:
                    self.store_event(group[0])
                else:
                    self._store_asset_events(group)
            except Exception:
                if not stored:
                    raise  # nothing stored: Dagster stores the batch again, event by event
                for event in events[stored:]:  # what Dagster's fallback does, without the stored part
                    self.store_event(event)
                return
            stored += len(group)

    def _store_asset_events(self, events: list[EventLogEntry]) -> None:
        """What :meth:`store_event` does for each asset event (the run's log, then its mirror in
        the index with its tags and the asset's latest event), for all of them at once."""
        inserts = [self.prepare_insert_event(event) for event in events]
        run_id = events[0].run_id
        with self.run_connection(run_id) as conn:
            logged = [_event_id(conn.execute(insert)) for insert in inserts]
        try:
            with self.index_transaction() as conn:
                stored = [_event_id(conn.execute(insert)) for insert in inserts]
                ids = [event_id for event_id in stored if event_id is not None]
                if len(ids) < len(stored):
                    raise dg.DagsterInvariantViolationError("Cannot store asset event tags for null event id.")
                self._store_asset_event_tags(conn, events, ids)
                for event, event_id in zip(events, ids):
                    self._store_asset_event(conn, event, event_id)
        except BaseException:  # an interrupt too: the run's log keeps no event the index lacks
            with self.run_connection(run_id) as conn:
                conn.execute(SqlEventLogStorageTable.delete().where(SqlEventLogStorageTable.c.id.in_(logged)))
            raise


def _groups(events: Sequence[EventLogEntry]) -> Iterator[list[EventLogEntry]]:
    """The batch in order: each run of consecutive asset events of one run, every other event alone."""
    group: list[EventLogEntry] = []
    for event in events:
        if (
            group
            and event.dagster_event_type in BATCHED
            and group[0].dagster_event_type in BATCHED
            and group[0].run_id == event.run_id
        ):
            group.append(event)
            continue
        if group:
            yield group
        group = [event]
    if group:
        yield group


def _event_id(result: Any) -> int | None:
    """The id SQLite gave the event row an insert stored (None where it gave none)."""
    key = result.inserted_primary_key
    return key[0] if key else None
