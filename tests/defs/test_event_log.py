"""The default instance's event log writes Dagster's event batches in one go.

``dagster.yaml`` names :class:`~hermes_assets.event_log.BatchedSqliteEventLogStorage`.
It must store exactly what Dagster's own SQLite event log stores, where it
stores it: the same rows in the same tables of the same databases (the index
and one per run), so the same events of a run, the same materialized and
failed partitions (what the UI shows), the same latest materialization per
partition. Captures here run on two instances that differ only in their
event log; events of every kind are also replayed into both storages, split
into batches every way, and through Dagster's own batching with a write that
fails. It subclasses a private Dagster class: what it relies on is checked in
the fast lane (tests/defs/test_event_log_compat.py).
"""

from __future__ import annotations

import collections
import json
import logging
import math
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy.engine
import sqlalchemy.event
import sqlalchemy.exc
import sqlalchemy.pool
import yaml
from dagster._core.definitions.events import (
    AssetMaterializationFailure,
    AssetMaterializationFailureReason,
    AssetMaterializationFailureType,
)
from dagster._core.events import (
    BATCH_WRITABLE_EVENTS,
    AssetObservationData,
    DagsterEvent,
    DagsterEventBatchMetadata,
    DagsterEventType,
)
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

from hermes_assets import event_log
from hermes_assets.defs import capture_assets as capture_defs
from hermes_assets.event_log import BatchedSqliteEventLogStorage
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.capture import progress as steps_progress
from tests.conftest import suite_days
from tests.defs.harness import DATASETS, SMALL_DAYS, md_values

#: the partitions of the suite's definitions (tests/conftest.py)
SUITE_PARTITIONS = suite_days().partitions

pytestmark = pytest.mark.slow  # Dagster runs (tests/support/fast_lane.py)

REPO = Path(__file__).resolve().parents[2]
FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]


# --------------------------------------------------------------------------
# two instances, and what they stored
# --------------------------------------------------------------------------


def _instance(home: Path, *, batched: bool) -> dg.DagsterInstance:
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert config["event_log_storage"]["class"] == BatchedSqliteEventLogStorage.__name__
    if not batched:
        del config["event_log_storage"]  # Dagster's own SQLite event log
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dg.DagsterInstance.from_config(str(home))


#: columns SQLite fills with the wall clock when a row is inserted: they differ between any two writes
CLOCK = {"create_timestamp", "update_timestamp", "migration_completed"}
#: the columns of a run's rows that two runs of the same capture share (ids included: the same order);
#: the rest holds the runs' own times and ids (timestamps, serialized events and their records)
SAME_IN_TWO_RUNS = {
    "id",
    "run_id",
    "dagster_event_type",
    "step_key",
    "asset_key",
    "partition",
    "event_id",
    "key",
    "check_name",
    "execution_status",
    "evaluation_event_storage_id",
    "materialization_event_storage_id",
    "last_run_id",
    "name",
}


def _tables(runs_dir: Path, *, runs: list[str] | None = None) -> dict:
    """Every row of every table of every database of an event log (``index`` and one per run), in
    the order of its ids. ``runs``: the run ids of a capture, compared by their place in it with
    another capture's (then only :data:`SAME_IN_TWO_RUNS`); otherwise every column but :data:`CLOCK`."""
    names = {run_id: f"run {i}" for i, run_id in enumerate(runs or [])}
    out = {}
    for path in sorted(runs_dir.glob("*.db")):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
                cursor = conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid')
                columns = [c[0] for c in cursor.description]
                keep = [i for i, c in enumerate(columns) if c not in CLOCK and (runs is None or c in SAME_IN_TWO_RUNS)]
                out[(names.get(path.stem, path.stem), table)] = [
                    tuple((columns[i], names.get(row[i], row[i])) for i in keep) for row in cursor
                ]
        finally:
            conn.close()
    return out


def _runs_dir(instance: dg.DagsterInstance) -> Path:
    return Path(instance.event_log_storage._base_dir)


def _events(instance: dg.DagsterInstance, run_id: str) -> collections.Counter:
    records = instance.get_records_for_run(run_id, limit=100_000).records
    return collections.Counter(
        r.event_log_entry.dagster_event_type for r in records if r.event_log_entry.is_dagster_event
    )


def _status(instance: dg.DagsterInstance) -> dict[str, tuple[list[str], list[str]]]:
    """Per dataset: (materialized, failed) partitions, as the UI's partition status computes them."""
    out = {}
    for dataset in DATASETS:
        value = get_and_update_asset_status_cache_value(instance, dg.AssetKey(dataset), SUITE_PARTITIONS)
        out[dataset] = (
            sorted(value.deserialize_materialized_partition_subsets(SUITE_PARTITIONS).get_partition_keys()),
            sorted(value.deserialize_failed_partition_subsets(SUITE_PARTITIONS).get_partition_keys()),
        )
    return out


def _latest(instance: dg.DagsterInstance) -> dict:
    """(dataset, day) -> rows_written of the partition's latest materialization."""
    out = {}
    for dataset in DATASETS:
        for day in SMALL_DAYS:
            found = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(dataset), asset_partitions=[day]), limit=1
            ).records
            mat = found[0].asset_materialization if found else None
            out[(dataset, day)] = md_values(mat.metadata)["rows_written"] if mat else None
    return out


@pytest.fixture(autouse=True)
def no_progress_reports(monkeypatch):
    """A step that runs past two seconds reports its progress in the run's log (defs/run_progress.py):
    by the clock, so a run slowed down by a loaded machine would store a line more than the run it is
    compared with, and every id after it would differ. Here no step reports, however long it takes
    (as on an idle machine; reporting every day instead would cost ~4 s a capture test)."""
    monkeypatch.setattr(steps_progress, "REPORT_EVERY_S", math.inf)


@pytest.fixture
def stored_batches(monkeypatch):
    """The groups the storage wrote in one go (sizes), spied on its own method."""
    sizes: list[int] = []
    write = BatchedSqliteEventLogStorage._store_group

    def spy(self, events):
        sizes.append(len(events))
        return write(self, events)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_store_group", spy)
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)  # the storage turns batching on
    return sizes


# --------------------------------------------------------------------------
# real captures on both instances
# --------------------------------------------------------------------------


def test_the_batched_event_log_stores_what_dagsters_own_stores(small, stored_batches, tmp_path):
    _settle(small)
    results = {}
    for batched in (False, True):
        with _instance(tmp_path / f"home-{batched}", batched=batched) as instance:
            assert isinstance(instance.event_log_storage, BatchedSqliteEventLogStorage) == batched
            first = small.materialize(FIRST, LAST, instance=instance)
            again = small.materialize(FIRST, LAST, instance=instance)
            assert first.success and again.success
            results[batched] = (
                _events(instance, first.run_id),
                _events(instance, again.run_id),
                _status(instance),
                _latest(instance),
                _tables(_runs_dir(instance), runs=[first.run_id, again.run_id]),
            )
    assert results[True] == results[False]
    events, _, status, latest, _ = results[True]
    days = len(SMALL_DAYS)
    assert events[dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED] == 3 * days
    assert events[dg.DagsterEventType.ASSET_MATERIALIZATION] == 3 * days
    # each dataset's day_valid on each day, and hermes_state's three checks once
    assert events[dg.DagsterEventType.ASSET_CHECK_EVALUATION] == 3 * days + 3
    assert all(status[d] == (SMALL_DAYS, []) for d in DATASETS)
    assert all(rows is not None for rows in latest.values())
    # per run: its planned events (materializations and checks) in one group, each dataset's
    # materialized days in one, the evaluations of the days in one, hermes_state's in one
    assert sorted(stored_batches) == sorted([3, 3 * days, days, days, days, 3 * days + 3] * 2)


def _settle(small) -> None:
    """The host settles its place in the warehouse once (its ids and the layout, with one log line
    the first time): settled before both captures, so the two instances see the same runs."""
    small.defs().resources["warehouse"].open().adopt_legacy()


def _failed_run_both_ways(small, tmp_path) -> dict[bool, tuple]:
    """A run of the small range that fails, on Dagster's own event log (False) and on the batched
    one (True): per log, its events by type, the partition status and every table row."""
    _settle(small)
    results = {}
    for batched in (False, True):
        with _instance(tmp_path / f"home-{batched}", batched=batched) as instance:
            result = small.materialize(FIRST, LAST, instance=instance, raise_on_error=False)
            assert not result.success
            results[batched] = (
                _events(instance, result.run_id),
                _status(instance),
                _tables(_runs_dir(instance), runs=[result.run_id]),
            )
    return results


def test_a_failed_run_marks_its_partitions_failed_as_before(small, stored_batches, tmp_path):
    small.policy_list.parent.mkdir(parents=True)
    small.policy_list.write_text("{ not json")  # the run fails before any day is written
    statuses = _failed_run_both_ways(small, tmp_path)
    assert statuses[True] == statuses[False]
    events, status, _ = statuses[True]
    assert events[dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED] == 3 * len(SMALL_DAYS)
    # Dagster keeps no failed-to-materialize event in an SQLite event log: the status comes from the run
    assert events[dg.DagsterEventType.ASSET_FAILED_TO_MATERIALIZE] == 0
    assert all(status[d] == ([], SMALL_DAYS) for d in DATASETS), status


def test_a_run_stopped_between_two_batches_stores_what_dagsters_own_stores(
    small, stored_batches, monkeypatch, tmp_path
):
    """Stopped as a cancel stops it (Dagster raises this in user code when the run worker is told to
    stop), in the write step after the sessions' output: its batch stored, the next ones never made."""
    metadata = capture_defs.day_metadata

    def canceled(result, projected):
        if result.dataset == MESSAGES:
            raise dg.DagsterExecutionInterruptedError("the run was canceled")
        return metadata(result, projected)

    monkeypatch.setattr(capture_defs, "day_metadata", canceled)
    results = _failed_run_both_ways(small, tmp_path)
    assert results[True] == results[False]
    events, status, _ = results[True]
    assert events[dg.DagsterEventType.ASSET_MATERIALIZATION] == len(SMALL_DAYS)
    assert status == {SESSIONS: (SMALL_DAYS, []), MESSAGES: ([], SMALL_DAYS), GATEWAY: ([], SMALL_DAYS)}


# --------------------------------------------------------------------------
# events of every kind, replayed into both storages
# --------------------------------------------------------------------------


def _captured(small, home: Path, last: str = SMALL_DAYS[2]) -> list[EventLogEntry]:
    """Every event of one capture of the first days, as Dagster's own event log stored them."""
    with _instance(home, batched=False) as instance:
        result = small.materialize(FIRST, last, instance=instance)
        return [r.event_log_entry for r in instance.get_records_for_run(result.run_id, limit=100_000).records]


def _asset_event(run_id: str, dataset: str, day: str, *, failed: bool = False) -> EventLogEntry:
    """An observation (with a data version, a tag the index keeps) or a failed materialization:
    events a capture does not emit, which Dagster batches and mirrors in the index."""
    if failed:
        event = DagsterEvent.build_asset_failed_to_materialize_event(
            "__ASSET_JOB",
            "hermes_capture.write_partitions",
            AssetMaterializationFailure(
                asset_key=dataset,
                partition=day,
                failure_type=AssetMaterializationFailureType.FAILED,
                reason=AssetMaterializationFailureReason.FAILED_TO_MATERIALIZE,
            ),
        )
    else:
        observation = dg.AssetObservation(dataset, partition=day, tags={"dagster/data_version": f"v-{day}"})
        event = DagsterEvent(
            DagsterEventType.ASSET_OBSERVATION.value,
            "__ASSET_JOB",
            event_specific_data=AssetObservationData(observation),
        )
    return EventLogEntry(
        error_info=None,
        level=logging.DEBUG,
        user_message="",
        run_id=run_id,
        timestamp=time.time(),
        step_key=None,
        job_name="__ASSET_JOB",
        dagster_event=event,
    )


def _every_kind(small, home: Path) -> list[EventLogEntry]:
    """A capture's events (planned, materialized, checks planned and evaluated, steps, the run, log
    lines), observations of its run, then failed materializations of another run within them."""
    events = _captured(small, home)
    run_id = events[0].run_id
    extra = [_asset_event(run_id, d, day) for d in DATASETS for day in SMALL_DAYS[:3]]
    other = [_asset_event("a" * 8 + "-other-run", d, day, failed=True) for d in DATASETS for day in SMALL_DAYS[:2]]
    extra[4:4] = other
    kinds = {e.dagster_event_type for e in events + extra}
    assert set(event_log.GROUPED) <= kinds
    return events + extra


def _own(events: list[EventLogEntry], runs_dir: Path) -> dict:
    storage = SqliteEventLogStorage(str(runs_dir))
    try:
        for event in events:
            storage.store_event(event)
    finally:
        storage.dispose()
    return _tables(runs_dir)


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_replayed_events_of_every_kind_give_the_same_rows(small, stored_batches, tmp_path, size):
    events = _every_kind(small, tmp_path / "source")
    expected = _own(events, tmp_path / "own")
    storage = BatchedSqliteEventLogStorage(str(tmp_path / "batched"))
    try:
        for i in range(0, len(events), size):
            storage.store_event_batch(events[i : i + size])
    finally:
        storage.dispose()
    assert _tables(tmp_path / "batched") == expected
    assert sum(stored_batches) > 0 if size > 1 else not stored_batches


def _handled(instance: dg.DagsterInstance, events: list[EventLogEntry]) -> list[EventLogEntry]:
    """The events through Dagster's instance as a run emits them: the batchable ones as one batch
    (Dagster's buffer, its call of store_event_batch and its fallback), the others one by one (no
    run's own events: there is no run in this instance). -> the events in the order they are stored."""
    events = [e for e in events if not e.get_dagster_event().is_job_event]
    batch = [e for e in events if e.dagster_event_type in BATCH_WRITABLE_EVENTS]
    metadata = DagsterEventBatchMetadata("one-batch", False)
    order = []
    for event in events:
        if event.dagster_event_type in BATCH_WRITABLE_EVENTS:
            last = event is batch[-1]
            instance.handle_new_event(event, batch_metadata=metadata._replace(is_end=last))
            order.extend(batch if last else [])
        else:
            instance.handle_new_event(event)
            order.append(event)
    return order


@pytest.mark.parametrize("failing", [1, 2], ids=["first group", "second group"])
def test_a_write_that_fails_in_a_batch_stores_each_event_once(small, stored_batches, monkeypatch, tmp_path, failing):
    """The index refuses one group of asset events (locked past the busy timeout): the first group,
    so nothing of the batch is stored and Dagster stores it again event by event; or a later one."""
    events = [e for e in _captured(small, tmp_path / "source") if e.is_dagster_event]
    # a run's batch is one group (its asset and check events); observations of another run within
    # it make three, as a batch of several runs would
    planned = max(
        i for i, e in enumerate(events) if e.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION_PLANNED
    )
    events[planned + 1 : planned + 1] = [_asset_event("a" * 8 + "-other-run", d, FIRST) for d in DATASETS]
    calls = []
    tags = BatchedSqliteEventLogStorage._store_asset_event_tags

    def locked_once(self, conn, batch, ids):
        calls.append(len(batch))
        if len(calls) == failing:
            raise sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
        return tags(self, conn, batch, ids)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_store_asset_event_tags", locked_once)
    with _instance(tmp_path / "home", batched=True) as instance:
        stored = _handled(instance, events)
        tables = _tables(_runs_dir(instance))
    assert tables == _own(stored, tmp_path / "own")
    assert len(calls) > failing and calls[failing - 1] > 1  # the failure hit a group, then events went on


def test_an_interrupt_in_a_write_leaves_no_event_the_index_lacks(small, stored_batches, monkeypatch, tmp_path):
    events = [e for e in _captured(small, tmp_path / "source") if e.is_dagster_event]
    planned = [e for e in events if e.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION_PLANNED]

    def interrupted(self, conn, batch, ids):
        raise KeyboardInterrupt

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_store_asset_event_tags", interrupted)
    storage = BatchedSqliteEventLogStorage(str(tmp_path / "batched"))
    try:
        with pytest.raises(KeyboardInterrupt):
            storage.store_event_batch(planned)
        assert not storage.get_records_for_run(planned[0].run_id).records
        assert not storage.get_asset_records()
    finally:
        storage.dispose()
    tables = _tables(tmp_path / "batched")
    assert not tables[(planned[0].run_id, "event_logs")] and not tables[("index", "event_logs")]


# --------------------------------------------------------------------------
# configuration: the switch Dagster reads, the Postgres instance, the home
# --------------------------------------------------------------------------


def test_only_an_instances_dagster_yaml_loads_the_event_logs(small):
    """deploy/postgres/dagster.yaml names the Postgres one, dagster.yaml the SQLite one, and nothing
    of the project imports them: loading the definitions never does (an instance without them never
    loads them). A capture on a dagster.yaml without it: the tests above, Dagster's own."""
    config = yaml.safe_load((REPO / "deploy" / "postgres" / "dagster.yaml").read_text())
    assert config["event_log_storage"]["module"] == "hermes_assets.event_log.postgres"
    code = (
        "import sys; from hermes_assets.definitions import defs; defs(); "
        "print(sorted(m for m in sys.modules if m.startswith('hermes_assets')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=small.environ(), cwd=REPO, check=True
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"'))
    assert "hermes_assets.defs.checks" in loaded and "hermes_assets.event_log" not in loaded


@pytest.mark.parametrize("dagster_home", ["unset", "another folder"])
def test_the_log_is_in_the_instances_folder_as_dagsters_own(monkeypatch, tmp_path, dagster_home):
    """An instance opened from its folder (DagsterInstance.from_config, a ref in a child process)
    keeps its event log where Dagster's own would be, whatever DAGSTER_HOME says."""
    if dagster_home == "unset":
        monkeypatch.delenv("DAGSTER_HOME", raising=False)
    else:
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    folders = {}
    for batched in (False, True):
        with _instance(tmp_path / f"home-{batched}", batched=batched) as instance:
            folders[batched] = _runs_dir(instance).relative_to(tmp_path / f"home-{batched}")
            with dg.DagsterInstance.from_ref(instance.get_ref()) as child:  # as a run worker opens it
                assert _runs_dir(child) == _runs_dir(instance)
    assert folders[True] == folders[False] == Path("history", "runs")
    assert not (tmp_path / "elsewhere").exists()
    storage = BatchedSqliteEventLogStorage(str(tmp_path / "given"))  # a base_dir in its config
    try:
        assert Path(storage._base_dir) == tmp_path / "given"
    finally:
        storage.dispose()


def _log_line(run_id: str, i: int) -> EventLogEntry:
    return EventLogEntry(
        error_info=None,
        level=logging.INFO,
        user_message=f'hermes.capture.project {{"i": {i}}}',
        run_id=run_id,
        timestamp=time.time(),
        step_key="hermes_capture.project_rows",
        job_name="__ASSET_JOB",
        dagster_event=None,
    )


def test_each_write_has_its_own_connection_on_an_engine_kept_per_database(tmp_path):
    """Events stored one by one (a step's, a log line) keep Dagster's connections, one per write,
    closed after it (the close is what the UI's live view sees), on one engine per database for
    all of them (Dagster built and disposed of one per write: its statements compiled each time)."""
    engines: dict[int, object] = {}
    opened, closed = [], []

    def executed(conn, *args):
        engines.setdefault(id(conn.engine), conn.engine)  # held: an id is never reused here

    listeners = [
        (sqlalchemy.engine.Engine, "before_execute", executed),
        (sqlalchemy.pool.Pool, "connect", lambda *a: opened.append(1)),
        (sqlalchemy.pool.Pool, "close", lambda *a: closed.append(1)),
    ]
    for listener in listeners:
        sqlalchemy.event.listen(*listener)
    storage = BatchedSqliteEventLogStorage(str(tmp_path / "runs"))
    try:
        storage.store_event(_log_line("r" * 36, -1))  # the run's database made
        engines.clear()
        opened.clear()
        closed.clear()
        for i in range(20):
            storage.store_event(_log_line("r" * 36, i))
        assert len(engines) == 1 and len(opened) == len(closed) == 20
        assert [e.user_message for e in storage.get_logs_for_run("r" * 36)][-1] == 'hermes.capture.project {"i": 19}'
        # a process that writes (or reads) many runs keeps the engines of the last few only
        for n in range(3 * event_log.sqlite.ENGINES_KEPT):
            storage.store_event(_log_line(f"{n:036d}", n))
        assert len(storage._engines) == event_log.sqlite.ENGINES_KEPT
    finally:
        storage.dispose()
        for listener in listeners:
            sqlalchemy.event.remove(*listener)
    assert not storage._engines


def _schema(path: Path) -> tuple:
    """What makes a database Dagster's: its objects, its journal mode and its Alembic stamp."""
    with sqlite3.connect(path) as conn:
        objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()
        stamp = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    return objects, mode, stamp


def test_each_database_is_made_as_dagsters_own_makes_it(tmp_path):
    """The run's database and the index, made without reading Alembic's scripts for each: the same
    tables, indexes, journal mode and stamp as Dagster's own storage makes; a database Dagster made
    is left as it is (its events read back, one more stored)."""
    run = "r" * 36
    ours, dagsters = BatchedSqliteEventLogStorage(str(tmp_path / "ours")), SqliteEventLogStorage(str(tmp_path / "dg"))
    try:
        for storage in (ours, dagsters):
            storage.store_event(_log_line(run, 0))
    finally:
        ours.dispose()
        dagsters.dispose()
    for name in ("index.db", f"{run}.db"):
        made = _schema(tmp_path / "ours" / name)
        assert made == _schema(tmp_path / "dg" / name), name
        assert made[1] == ("wal",) and made[2] and made[0]
    before = _schema(tmp_path / "dg" / f"{run}.db")
    reopened = BatchedSqliteEventLogStorage(str(tmp_path / "dg"))
    try:
        reopened.store_event(_log_line(run, 1))
        assert [e.user_message for e in reopened.get_logs_for_run(run)][-1] == 'hermes.capture.project {"i": 1}'
    finally:
        reopened.dispose()
    assert _schema(tmp_path / "dg" / f"{run}.db") == before
