"""The SQLite event log of the default instance, writing Dagster's event batches in one go.

A ranged capture reports, per day and dataset, one planned materialization
when the run is created and one materialization when the day is written: on
a year of history about 2,000 events. Dagster's SQLite event log stores each
event on its own: a new engine and connection to the run's database and
another to the asset index, each closed after one insert, and in WAL mode the
close of the last connection checkpoints the file (fsyncs included). That was
about 16 ms of CPU and, on a busy disk, 70 ms of wall time per event (a
330-day run over days without sessions took 75-105 s, 20 s of it CPU).

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
the storage sets it when it is built, to ``1000``, unless the user set it
(``0`` turns batching off): in the processes that build this instance (the
CLI, the webserver, the daemon, run and step workers) and in the processes
they start, which inherit it. Nothing else reads it: any other Dagster
instance in such a process batches too, which Dagster's other storages
support. docs/development.md says the same. The Postgres instance
(deploy/postgres) does not load this module: it batches when the user exports
the variable. The module lives outside ``defs/`` so that loading the
definitions (which imports every module there) never imports it: only
``dagster.yaml`` does.

It subclasses a private Dagster class and calls some of its methods. It checks
them when it is built (:func:`incompatibility`: each method's presence and
parameters, as :data:`RELIED_ON` names them, and the events Dagster batches).
If any of them differs in the installed Dagster, the storage is Dagster's own
SQLite event log (it stores each event on its own, batching stays off) and
says so once per process, naming the method: an upgrade of Dagster can slow
the bookkeeping down, never stop the instance from starting.
"""

import contextlib
import functools
import inspect
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg
from dagster._core import events as dagster_events
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
BATCH_SIZE_VARIABLE = "DAGSTER_EVENT_BATCH_SIZE"

#: what this storage overrides or calls on Dagster's SQLite event log, with the parameters it passes
RELIED_ON = {
    "__init__": "self, base_dir, inst_data=None",
    "register_instance": "self, instance",
    "from_config_value": "inst_data, config_value",
    "store_event": "self, event",
    "store_event_batch": "self, events",
    "run_connection": "self, run_id=None",
    "index_transaction": "self",
    "prepare_insert_event": "self, event",
    "_store_asset_event_tags": "self, conn, events, event_ids",
    "_store_asset_event": "self, conn, event, event_id",
}

_log = logging.getLogger("hermes_assets.event_log")


def parameters(fn: Any) -> str:
    """A callable's parameters as :data:`RELIED_ON` writes them."""
    return ", ".join(
        p.name + ("" if p.default is inspect.Parameter.empty else f"={p.default!r}")
        for p in inspect.signature(fn).parameters.values()
    )


def incompatibility(base: type = SqliteEventLogStorage) -> str | None:
    """What of Dagster's SQLite event log this storage relies on differs in the installed Dagster
    (None: nothing). ``base``: the class it subclasses."""
    for name, expected in RELIED_ON.items():
        method = getattr(base, name, None)
        if method is None:
            return f"{base.__name__}.{name} is gone"
        try:
            got = parameters(method)
        except (TypeError, ValueError):
            return f"{base.__name__}.{name} has no readable signature"
        if got != expected:
            return f"{base.__name__}.{name}({got}), was ({expected})"
    mirrored: frozenset = frozenset(getattr(dagster_events, "ASSET_EVENTS", ()))
    batched: frozenset = frozenset(getattr(dagster_events, "BATCH_WRITABLE_EVENTS", ()))
    if not (mirrored >= BATCHED and batched >= BATCHED):
        return "the asset events Dagster batches and mirrors in its index changed"
    return None


#: beside the event log's databases: the change last reported for this instance
FALLBACK_NOTE = ".hermes_event_log_fallback"


@functools.cache
def _warn_once(problem: str, folder: str) -> None:
    """One warning per instance and change: the first process of the instance that meets the
    change says it (the webserver, the daemon and the run workers all build the storage)."""
    note = os.path.join(folder, FALLBACK_NOTE)
    said = f"Dagster {dg.__version__}: {problem}"
    try:
        with open(note, encoding="utf-8") as f:
            before: str | None = f.read()
    except OSError:
        before = None
    if before == said:
        _log.debug("hermes_assets.event_log: %s (reported already)", said)
        return
    draft = f"{note}.{os.getpid()}"
    try:
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(said)
        if before is None:
            os.link(draft, note)  # of processes starting together, only the first one's link is made
        else:
            os.replace(draft, note)  # another change than the one reported
    except FileExistsError:
        _log.debug("hermes_assets.event_log: %s (reported by another process)", said)
        return
    except OSError:
        pass  # an unwritable folder: say it in this process
    finally:
        with contextlib.suppress(OSError):
            os.unlink(draft)
    _log.warning(
        "hermes_assets.event_log: Dagster %s changed what the batched event log relies on (%s); "
        "using Dagster's own SQLite event log, which stores each event on its own",
        dg.__version__,
        problem,
    )


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log (the same files, under ``<instance folder>/history/runs``),
    storing a batch of asset events in one transaction per database."""

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None):
        # Dagster gives its own storage <instance folder>/history/runs from its defaults, but a
        # storage named in dagster.yaml only its config: without a base_dir the folder is the
        # instance's, known when the instance registers (DAGSTER_HOME may name another one)
        self._inst_data = inst_data
        self.fallback = incompatibility(SqliteEventLogStorage)
        if base_dir is not None:
            self._open(base_dir)
        if self.fallback is None:
            # Dagster's only switch for batches, read per event (see the module's docstring)
            os.environ.setdefault(BATCH_SIZE_VARIABLE, BATCH_SIZE)

    def _open(self, base_dir: str) -> None:
        super().__init__(base_dir, self._inst_data)
        if self.fallback is not None:  # Dagster's own storage: batching stays as the user set it
            _warn_once(self.fallback, base_dir)

    def register_instance(self, instance: dg.DagsterInstance) -> None:
        if not hasattr(self, "_base_dir"):
            self._open(os.path.join(instance.root_directory, "history", "runs"))
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
        if self.fallback is not None:
            super().store_event_batch(events)
            return
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
