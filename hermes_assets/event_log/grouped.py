"""What the batched event logs share: the groups they write in one go, and their guard.

Dagster hands an event log whole batches of events (a run's planned
materializations and checks, the materializations of one output, and the
capture's check evaluations of its days, :mod:`hermes_assets.defs.check_events`),
but its own storages then write most of them one by one, each in its own
connections. :class:`GroupedWrites` writes each run of consecutive asset and
check events of one run in one transaction per database: the same rows in the
same tables, in the same order, so the UI, the partition status and every query
see what they saw before. Other events (steps, run status, log lines) go
through Dagster's own ``store_event`` unchanged.

When a write fails, each event of the batch is still stored once:

* nothing of the batch is stored yet: the error reaches Dagster, which stores
  the batch again event by event (``handle_new_event``'s fallback);
* part of the batch is stored: Dagster's fallback would store that part twice,
  so the rest is stored here event by event, and only an error of that goes on.

The storages subclass private Dagster classes. Each checks, when it is built,
the methods it relies on (:func:`incompatibility`: presence and parameters); if
any differs in the installed Dagster, the storage is Dagster's own (it stores
each event on its own, batching stays as the user set it) and says so once,
naming the method: an upgrade of Dagster can slow the bookkeeping down, never
stop the instance from starting.
"""

import contextlib
import datetime as dt
import functools
import inspect
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
import sqlalchemy as db
from dagster._core import events as dagster_events
from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable, SqlEventLogStorageTable

#: asset events this storage writes as one group: those Dagster batches and mirrors in the asset index
ASSET_GROUPED = frozenset(
    {
        DagsterEventType.ASSET_MATERIALIZATION,
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
        DagsterEventType.ASSET_OBSERVATION,
        DagsterEventType.ASSET_FAILED_TO_MATERIALIZE,
    }
)
#: check events it writes as one group: the planned ones Dagster batches, and the evaluations the
#: capture hands over in batches (only to a storage that says it takes them: see
#: :attr:`GroupedWrites.batches_check_evaluations`)
CHECK_GROUPED = frozenset({DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED, DagsterEventType.ASSET_CHECK_EVALUATION})
GROUPED = ASSET_GROUPED | CHECK_GROUPED
#: what an asset event writes on its asset's row of the index (Dagster's ``_store_asset_event``),
#: as a rank: each writes the columns of the ranks below it and more (its latest materialization,
#: run, time); a failed materialization writes none. An event whose columns a later event of its
#: asset writes again leaves no trace in the row, so a group writes the row once per rank, not
#: once per event (tests/defs/test_event_log_compat.py holds the ranks against Dagster's own).
ASSET_ROW_RANK = {
    DagsterEventType.ASSET_FAILED_TO_MATERIALIZE: 0,
    DagsterEventType.ASSET_OBSERVATION: 1,
    DagsterEventType.ASSET_MATERIALIZATION_PLANNED: 2,
    DagsterEventType.ASSET_MATERIALIZATION: 3,
}
#: how many events Dagster buffers before it hands them over (a batch also ends with its output)
BATCH_SIZE = "1000"
BATCH_SIZE_VARIABLE = "DAGSTER_EVENT_BATCH_SIZE"

_log = logging.getLogger("hermes_assets.event_log")


def parameters(fn: Any) -> str:
    """A callable's parameters as a ``RELIED_ON`` table writes them."""
    return ", ".join(
        p.name + ("" if p.default is inspect.Parameter.empty else f"={p.default!r}")
        for p in inspect.signature(fn).parameters.values()
    )


def incompatibility(base: type, relied_on: dict[str, str]) -> str | None:
    """What of ``base`` (a Dagster event log) a storage relies on (``relied_on``: method ->
    parameters) differs in the installed Dagster; None: nothing."""
    for name, expected in relied_on.items():
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
    checks: frozenset = frozenset(getattr(dagster_events, "ASSET_CHECK_EVENTS", ()))
    batched: frozenset = frozenset(getattr(dagster_events, "BATCH_WRITABLE_EVENTS", ()))
    if not (mirrored >= ASSET_GROUPED and batched >= ASSET_GROUPED and checks >= CHECK_GROUPED):
        return "the asset and check events Dagster batches and mirrors in its index changed"
    return None


#: what a group's writes call on Dagster's SQL event log (both backends), with the parameters passed
GROUP_RELIED_ON = {
    "store_event": "self, event",
    "store_event_batch": "self, events",
    "index_connection": "self",
    "index_transaction": "self",
    "_event_to_row": "self, event",
    "store_asset_check_event": "self, event, event_id",
    # what store_asset_check_event calls: each writes through index_connection (the group's transaction)
    "_store_asset_check_evaluation_planned": "self, event, event_id",
    "_update_asset_check_evaluation": "self, event, event_id",
    "_store_asset_event_tags": "self, conn, events, event_ids",
    "_store_asset_event": "self, conn, event, event_id",
}

#: beside a SQLite event log's databases: the change last reported for this instance
FALLBACK_NOTE = ".hermes_event_log_fallback"


@functools.cache
def warn_once(problem: str, folder: str | None, storage: str) -> None:
    """One warning per instance and change: the first process of the instance that meets the
    change says it (the webserver, the daemon and the run workers all build the storage). With
    no ``folder`` (a database server), once per process."""
    said = f"Dagster {dg.__version__}: {problem}"
    if folder is not None and not _first_to_note(said, os.path.join(folder, FALLBACK_NOTE)):
        return
    _log.warning(
        "hermes_assets.event_log: Dagster %s changed what the batched event log relies on (%s); "
        "using Dagster's own %s event log, which stores each event on its own",
        dg.__version__,
        problem,
        storage,
    )


def _first_to_note(said: str, note: str) -> bool:
    """Whether this process is the first to note ``said`` in the file ``note`` (then it says it)."""
    try:
        with open(note, encoding="utf-8") as f:
            before: str | None = f.read()
    except OSError:
        before = None
    if before == said:
        _log.debug("hermes_assets.event_log: %s (reported already)", said)
        return False
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
        return False
    except OSError:
        pass  # an unwritable folder: say it in this process
    finally:
        with contextlib.suppress(OSError):
            os.unlink(draft)
    return True


def turn_batches_on() -> None:
    """Dagster's only switch for batches, read per event: on, unless the user set it (``0``: off).
    Set in the processes that build the storage (the CLI, the webserver, the daemon, run and step
    workers) and inherited by the processes they start."""
    os.environ.setdefault(BATCH_SIZE_VARIABLE, BATCH_SIZE)


class GroupedWrites:
    """The part of a batched event log its SQL backends share: a batch split in groups, each group
    written by the backend's :meth:`_store_group`, whose index writes share one transaction."""

    #: None, or what of Dagster's storage moved (the storage is then Dagster's own)
    fallback: str | None = None
    _held: threading.local

    @property
    def batches_check_evaluations(self) -> bool:
        """Whether a run may hand this storage its check evaluations in batches (the capture looks)."""
        return self.fallback is None

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Consecutive asset and check events of one run in one write; any other event on its own, in order."""
        if self.fallback is not None:
            super().store_event_batch(events)  # type: ignore[misc]
            return
        stored = 0
        for group in groups(events):
            try:
                if len(group) == 1:
                    self.store_event(group[0])  # type: ignore[attr-defined]
                else:
                    self._store_group(group)
            except Exception:
                if not stored:
                    raise  # nothing stored: Dagster stores the batch again, event by event
                for event in events[stored:]:  # what Dagster's fallback does, without the stored part
                    self.store_event(event)  # type: ignore[attr-defined]
                return
            stored += len(group)

    def _store_group(self, events: list[EventLogEntry]) -> None:
        raise NotImplementedError

    def _store_in_index(
        self, conn: Any, events: list[EventLogEntry], ids: Sequence[int | None], rows: list[dict[str, Any]]
    ) -> None:
        """What Dagster's ``store_event`` does in the index for each event of a group, for all of
        them in the transaction of ``conn``: an asset event's tags and its asset's row, a check
        event's row of the check's executions. ``rows``: the events' rows as the log stores them."""
        if any(event_id is None for event_id in ids):
            raise dg.DagsterInvariantViolationError("Cannot store asset event tags for null event id.")
        assets = [(e, i) for e, i in zip(events, ids) if e.dagster_event_type in ASSET_GROUPED]
        checks = [(e, i, r) for e, i, r in zip(events, ids, rows) if e.dagster_event_type in CHECK_GROUPED]
        with self._holding(conn):
            if assets:
                self._store_asset_event_tags(conn, [e for e, _ in assets], [i for _, i in assets])  # type: ignore[attr-defined]
            for event, event_id in asset_row_writes(assets):
                self._store_asset_event(conn, event, event_id)  # type: ignore[attr-defined]
            if checks:
                self._store_check_rows(conn, checks)

    def _store_check_rows(self, conn: Any, checks: list[tuple[EventLogEntry, Any, dict[str, Any]]]) -> None:
        """Each check event's row(s) of its check's executions, in order, as Dagster's own methods
        write them: a planned event's rows (one per day) in one statement; the evaluations of a
        day whose planned row the run holds once, in one statement for all; any other check event
        by Dagster's own method (its writes open the index: they get this transaction's connection)."""
        planned = _planned_rows(conn, checks[0][0].run_id)
        updates: list[dict[str, Any]] = []
        for event, event_id, row in checks:
            day = _day_evaluated(event)
            if day is not None and planned.get(day) == 1:
                updates.append(_evaluation_values(event, event_id, row))
                continue
            if updates:  # in order: the evaluations before this event first
                conn.execute(_UPDATE_EVALUATION, updates)
                updates = []
            if event.dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED:
                rows = _planned_values(event, event_id, row)
                conn.execute(AssetCheckExecutionsTable.insert(), rows)
                for values in rows:
                    key = (values["asset_key"], values["check_name"], values["partition"])
                    planned[key] = planned.get(key, 0) + 1
            else:
                self.store_asset_check_event(event, event_id)  # type: ignore[attr-defined]
        if updates:
            conn.execute(_UPDATE_EVALUATION, updates)

    @contextlib.contextmanager
    def _holding(self, conn: Any) -> Iterator[None]:
        """While inside: this thread's index connections are ``conn`` (its transaction)."""
        held = self._local()
        held.conn = conn
        try:
            yield
        finally:
            held.conn = None

    def _local(self) -> threading.local:
        try:
            return self._held
        except AttributeError:
            self._held = threading.local()
            return self._held

    def index_connection(self) -> Any:
        conn = getattr(self._local(), "conn", None)
        if conn is not None:
            return contextlib.nullcontext(conn)
        return super().index_connection()  # type: ignore[misc]

    def materializations_of_run(
        self, run_id: str, asset_key: dg.AssetKey, partitions: Sequence[str]
    ) -> dict[str, tuple[int, float]]:
        """The latest materialization a run stored of each of an asset's ``partitions``: its storage
        id and time, read from the index's columns (one query, no event read back)."""
        t = SqlEventLogStorageTable.c
        query = (
            db.select(t.partition, t.id, t.timestamp)
            .where(
                t.asset_key == asset_key.to_string(),
                t.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION.value,
                t.run_id == run_id,
                t.partition.in_(list(partitions)),
            )
            .order_by(t.id)
        )
        with self.index_connection() as conn:
            found = conn.execute(query).all()
        # the column holds the event's time in UTC, to the microsecond
        return {p: (i, ts.replace(tzinfo=dt.UTC).timestamp()) for p, i, ts in found}

    @property
    def supports_asset_checks(self) -> bool:
        """Dagster asks on every check event (a connection each time): a table found stays found."""
        if self.fallback is None and getattr(self, "_check_table_found", False):
            return True
        found = bool(super().supports_asset_checks)  # type: ignore[misc]
        self._check_table_found = found
        return found


def groups(events: Sequence[EventLogEntry]) -> Iterator[list[EventLogEntry]]:
    """The batch in order: each run of consecutive asset and check events of one run, every other
    event alone."""
    group: list[EventLogEntry] = []
    for event in events:
        if (
            group
            and event.dagster_event_type in GROUPED
            and group[0].dagster_event_type in GROUPED
            and group[0].run_id == event.run_id
        ):
            group.append(event)
            continue
        if group:
            yield group
        group = [event]
    if group:
        yield group


def asset_row_writes(events: list[tuple[EventLogEntry, Any]]) -> list[tuple[EventLogEntry, Any]]:
    """The asset events of a group whose write of their asset's row leaves a trace, in order: per
    asset, its first event that writes the row (which may create it), and each event no later
    event of its asset writes over (:data:`ASSET_ROW_RANK`)."""
    keep = set()
    first: dict[Any, int] = {}
    best_after: dict[Any, int] = {}  # per asset: the highest rank among the events after this one
    for index in range(len(events) - 1, -1, -1):
        event = events[index][0]
        key = event.get_dagster_event().asset_key
        rank = ASSET_ROW_RANK.get(event.get_dagster_event().event_type, 3)
        if rank and rank > best_after.get(key, 0):
            keep.add(index)
        best_after[key] = max(best_after.get(key, 0), rank)
        if rank:
            first[key] = index
    keep.update(first.values())
    return [events[i] for i in sorted(keep)]


def _planned_rows(conn: Any, run_id: str) -> dict[tuple[str, str, str | None], int]:
    """The run's rows of check executions: how many per (asset, check, partition)."""
    t = AssetCheckExecutionsTable.c
    query = (
        db.select(t.asset_key, t.check_name, t.partition, db.func.count())
        .where(t.run_id == run_id)
        .group_by(t.asset_key, t.check_name, t.partition)
    )
    return {(a, c, p): n for a, c, p, n in conn.execute(query)}


_t = AssetCheckExecutionsTable.c
#: Dagster's update of a planned row by its evaluation (``_update_asset_check_evaluation``), for many rows
_UPDATE_EVALUATION = (
    AssetCheckExecutionsTable.update()
    .where(
        db.and_(
            _t.asset_key == db.bindparam("w_asset_key"),
            _t.check_name == db.bindparam("w_check_name"),
            _t.run_id == db.bindparam("w_run_id"),
            _t.partition == db.bindparam("w_partition"),
        )
    )
    .values(
        execution_status=db.bindparam("v_status"),
        evaluation_event=db.bindparam("v_event"),
        evaluation_event_timestamp=db.bindparam("v_timestamp"),
        evaluation_event_storage_id=db.bindparam("v_event_id"),
        materialization_event_storage_id=db.bindparam("v_materialization_id"),
        partition=db.bindparam("v_partition"),
    )
)


def _day_evaluated(event: EventLogEntry) -> tuple[str, str, str] | None:
    """(asset, check, partition) of the evaluation of a check on a day; None for any other event."""
    if event.dagster_event_type != DagsterEventType.ASSET_CHECK_EVALUATION:
        return None
    evaluation = event.get_dagster_event().event_specific_data
    partition = getattr(evaluation, "partition", None)
    if partition is None:
        return None
    return evaluation.asset_key.to_string(), evaluation.check_name, partition  # type: ignore[union-attr]


def _planned_values(event: EventLogEntry, event_id: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows Dagster's own method writes for a planned check (one per day it is planned on, or
    one without a day), the event serialized once (as the log stores it)."""
    planned = event.get_dagster_event().event_specific_data
    subset = planned.partitions_subset  # type: ignore[union-attr]
    return [
        {
            "asset_key": planned.asset_key.to_string(),  # type: ignore[union-attr]
            "check_name": planned.check_name,  # type: ignore[union-attr]
            "partition": partition,
            "run_id": event.run_id,
            "execution_status": AssetCheckExecutionRecordStatus.PLANNED.value,
            "evaluation_event": row["event"],
            "evaluation_event_timestamp": row["timestamp"],
            "evaluation_event_storage_id": event_id,
        }
        for partition in (subset.get_partition_keys() if subset else [None])
    ]


def _evaluation_values(event: EventLogEntry, event_id: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The parameters of :data:`_UPDATE_EVALUATION` for one evaluation: the values Dagster's own
    update writes (the event as the log stores it, its time, its id, the materialization judged)."""
    evaluation = event.get_dagster_event().event_specific_data
    target = evaluation.target_materialization_data  # type: ignore[union-attr]
    status = AssetCheckExecutionRecordStatus.SUCCEEDED if evaluation.passed else AssetCheckExecutionRecordStatus.FAILED  # type: ignore[union-attr]
    return {
        "w_asset_key": evaluation.asset_key.to_string(),  # type: ignore[union-attr]
        "w_check_name": evaluation.check_name,  # type: ignore[union-attr]
        "w_run_id": event.run_id,
        "w_partition": evaluation.partition,  # type: ignore[union-attr]
        "v_status": status.value,
        "v_event": row["event"],
        "v_timestamp": row["timestamp"],
        "v_event_id": event_id,
        "v_materialization_id": target.storage_id if target else None,
        "v_partition": evaluation.partition,  # type: ignore[union-attr]
    }
