"""The batched event logs check the private Dagster API they rely on, and fall back when it moved.

``hermes_assets/event_log`` subclasses Dagster's SQLite and Postgres event logs.
The checks they make when they are built are the ones pinned here, against the
installed Dagster; a simulated change makes the storage Dagster's own, with one
warning naming the method, and leaves the environment as the user set it. The
capture hands check evaluations in batches only to a storage that says it takes
them, and marks them with Dagster's private event API, checked here too.
"""

from __future__ import annotations

import inspect
import logging
import os

import dagster as dg
import pytest
from dagster._core.definitions.events import (
    AssetMaterializationFailure,
    AssetMaterializationFailureReason,
    AssetMaterializationFailureType,
)
from dagster._core.events import (
    ASSET_CHECK_EVENTS,
    ASSET_EVENTS,
    BATCH_WRITABLE_EVENTS,
    AssetFailedToMaterializeData,
    AssetMaterializationPlannedData,
    AssetObservationData,
    DagsterEventType,
    StepMaterializationData,
)
from dagster._core.events.log import EventLogEntry
from dagster._core.instance.methods.event_methods import EventMethods
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster_postgres.event_log.event_log import PostgresEventLogStorage

from hermes_assets import event_log
from hermes_assets.defs import check_events
from hermes_assets.event_log import BatchedSqliteEventLogStorage, grouped, postgres
from hermes_assets.event_log import sqlite as sqlite_log
from hermes_assets.event_log.grouped import parameters

RELIED_ON = sqlite_log.RELIED_ON
#: (Dagster's storage, what the project's subclass of it relies on)
BASES = {
    "sqlite": (SqliteEventLogStorage, sqlite_log.RELIED_ON),
    "postgres": (PostgresEventLogStorage, postgres.RELIED_ON),
}


def incompatibility():
    return grouped.incompatibility(SqliteEventLogStorage, RELIED_ON)


@pytest.fixture(autouse=True)
def _fresh_warning():
    grouped.warn_once.cache_clear()
    yield
    grouped.warn_once.cache_clear()


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, (_, relied) in BASES.items() for n in sorted(relied)])
def test_the_dagster_methods_it_relies_on_keep_their_signature(kind, name):
    base, relied_on = BASES[kind]
    method = getattr(base, name, None)
    where = f"Dagster {dg.__version__}: {base.__name__}.{name}"
    advice = "hermes_assets/event_log would fall back to Dagster's own log: re-read both before upgrading"
    assert method is not None, f"{where} is gone. {advice}"
    assert parameters(method) == relied_on[name], f"{where}({parameters(method)}). {advice}"


@pytest.mark.parametrize("kind", sorted(BASES))
def test_the_installed_dagster_is_compatible(kind):
    assert grouped.incompatibility(*BASES[kind]) is None


@pytest.mark.parametrize("kind", sorted(BASES))
def test_the_check_rows_are_written_through_the_index_connection_a_group_holds(kind):
    """A group's check events are written in its transaction: Dagster's methods that write their
    rows open the index with ``index_connection`` (which the storage hands the group's connection;
    on SQLite another connection would wait for the group's lock)."""
    base, _ = BASES[kind]
    advice = f"Dagster {dg.__version__} changed how {base.__name__} writes check rows: re-read hermes_assets/event_log"
    for name in ("_store_asset_check_evaluation_planned", "_update_asset_check_evaluation"):
        source = inspect.getsource(getattr(base, name))
        assert "self.index_connection()" in source and "_connect(" not in source, (name, advice)


def _entry(event_type: DagsterEventType) -> EventLogEntry:
    """An asset event of each kind a group writes, as a run stores it."""
    key = dg.AssetKey("hermes_sessions")
    data = {
        DagsterEventType.ASSET_MATERIALIZATION: lambda: StepMaterializationData(
            dg.AssetMaterialization(key, partition="d")
        ),
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED: lambda: AssetMaterializationPlannedData(key, partition="d"),
        DagsterEventType.ASSET_OBSERVATION: lambda: AssetObservationData(dg.AssetObservation(key, partition="d")),
        DagsterEventType.ASSET_FAILED_TO_MATERIALIZE: lambda: AssetFailedToMaterializeData(
            AssetMaterializationFailure(
                asset_key=key,
                partition="d",
                failure_type=AssetMaterializationFailureType.FAILED,
                reason=AssetMaterializationFailureReason.FAILED_TO_MATERIALIZE,
            )
        ),
    }[event_type]()
    event = dg.DagsterEvent(event_type.value, "__ASSET_JOB", event_specific_data=data)
    return EventLogEntry(None, logging.DEBUG, "", "run", 1.0, dagster_event=event)


@pytest.mark.parametrize("kind", sorted(BASES))
@pytest.mark.parametrize("index_columns", [True, False])
def test_an_asset_event_of_a_higher_rank_writes_every_column_of_a_lower_one(kind, index_columns):
    """A group writes an asset's row once per rank (grouped.ASSET_ROW_RANK): sound while what each
    kind of event writes on the row holds what every kind ranked below it writes."""
    columns = {
        event_type: set(BASES[kind][0]._get_asset_entry_values(None, _entry(event_type), 1, index_columns))  # type: ignore[arg-type]
        for event_type in grouped.ASSET_ROW_RANK
    }
    ranked = sorted(grouped.ASSET_ROW_RANK, key=grouped.ASSET_ROW_RANK.get)  # type: ignore[arg-type]
    assert columns[ranked[0]] == set()  # rank 0 writes nothing
    for lower, higher in zip(ranked, ranked[1:]):
        assert columns[lower] <= columns[higher], (lower, higher, columns)
    assert columns[ranked[-1]]


def test_the_capture_marks_its_check_evaluations_as_one_batch_with_dagsters_own_api():
    """The capture marks a batch the way Dagster marks an output's materializations; the storages
    say they take such batches under the name the capture looks for."""
    assert check_events.batching_api() is not None
    assert check_events.TAKES_BATCHES == "batches_check_evaluations"
    assert isinstance(inspect.getattr_static(grouped.GroupedWrites, check_events.TAKES_BATCHES), property)
    source = inspect.getsource(dg.DagsterEvent.from_step)
    assert "batch_metadata" in source and "log_step_event" in source


def test_the_instance_registers_its_event_log_once_its_folder_is_known():
    source = inspect.getsource(dg.DagsterInstance.__init__)
    advice = f"Dagster {dg.__version__} changed DagsterInstance.__init__: re-read hermes_assets/event_log.py"
    assert source.index("self._local_artifact_storage =") < source.index("_event_storage.register_instance"), advice
    assert isinstance(inspect.getattr_static(dg.DagsterInstance, "root_directory"), property), advice


def test_the_events_it_groups_are_the_ones_dagster_batches_and_mirrors():
    advice = f"Dagster {dg.__version__} changed its event sets: re-read hermes_assets/event_log.py"
    assert event_log.ASSET_GROUPED <= ASSET_EVENTS, advice  # Dagster's store_event mirrors them in the index
    assert event_log.ASSET_GROUPED <= BATCH_WRITABLE_EVENTS, advice  # and its runs hand them over in batches
    assert event_log.CHECK_GROUPED <= ASSET_CHECK_EVENTS, advice  # its store_event keeps them per check
    # the one switch of batches, read on every event
    assert event_log.BATCH_SIZE_VARIABLE in inspect.getsource(EventMethods._get_event_batch_size), advice
    assert "_is_batch_writing_enabled" in inspect.getsource(EventMethods.handle_new_event), advice


def test_the_storage_turns_dagsters_batches_on_unless_the_user_set_them(monkeypatch, tmp_path):
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    BatchedSqliteEventLogStorage(str(tmp_path / "a")).dispose()
    assert EventMethods._get_event_batch_size(None) == int(event_log.BATCH_SIZE)
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "0")  # the user's: batches off
    BatchedSqliteEventLogStorage(str(tmp_path / "b")).dispose()
    assert EventMethods._get_event_batch_size(None) == 0


def _moved(self, conn, event, event_id, *, extra=None):  # a changed signature, as an upgrade might bring
    raise AssertionError("the fallback never calls a method that changed")


@pytest.mark.parametrize("change", ["signature", "gone"])
def test_a_changed_dagster_gives_dagsters_own_log_with_one_warning(monkeypatch, tmp_path, caplog, change):
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    if change == "signature":
        monkeypatch.setattr(SqliteEventLogStorage, "_store_asset_event", _moved)
    else:
        monkeypatch.setattr(SqliteEventLogStorage, "_store_asset_event_tags", None)  # as if removed
    assert incompatibility() is not None
    with caplog.at_level(logging.WARNING, logger="hermes_assets.event_log"):
        storages = [BatchedSqliteEventLogStorage(str(tmp_path / "runs")) for _ in range(2)]
        grouped.warn_once.cache_clear()  # as another process of the same instance (the daemon, a run)
        storages.append(BatchedSqliteEventLogStorage(str(tmp_path / "runs")))
    try:
        warnings = [r.getMessage() for r in caplog.records if r.name == "hermes_assets.event_log"]
        assert len(warnings) == 1, warnings  # once per instance, however many processes build its storage
        method = "_store_asset_event(" if change == "signature" else "_store_asset_event_tags is gone"
        assert method in warnings[0] and "Dagster's own SQLite event log" in warnings[0]
        assert all(s.fallback for s in storages)
        assert "DAGSTER_EVENT_BATCH_SIZE" not in os.environ  # batching stays off, as Dagster's default
        called = []
        monkeypatch.setattr(SqliteEventLogStorage, "store_event_batch", lambda self, events: called.append(events))
        assert not storages[0].batches_check_evaluations  # the capture yields its evaluations one by one
        storages[0].store_event_batch(["e1", "e2"])  # type: ignore[list-item]
        assert called == [["e1", "e2"]]  # Dagster's own batch write, not this storage's
    finally:
        for storage in storages:
            storage.dispose()


def test_another_change_is_reported_again(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(SqliteEventLogStorage, "_store_asset_event", _moved)
    with caplog.at_level(logging.WARNING, logger="hermes_assets.event_log"):
        BatchedSqliteEventLogStorage(str(tmp_path / "runs")).dispose()
        grouped.warn_once.cache_clear()
        monkeypatch.setattr(SqliteEventLogStorage, "_event_to_row", _moved)  # but the first is checked first
        monkeypatch.setattr(SqliteEventLogStorage, "_store_asset_event", SqliteEventLogStorage._store_asset_event_tags)
        BatchedSqliteEventLogStorage(str(tmp_path / "runs")).dispose()
    warnings = [r.getMessage() for r in caplog.records if r.name == "hermes_assets.event_log"]
    assert len(warnings) == 2 and "_store_asset_event(" in warnings[0] and "_event_to_row(" in warnings[1]
    assert oct((tmp_path / "runs" / event_log.FALLBACK_NOTE).stat().st_mode & 0o777) == "0o600"
