"""The batched event log checks the private Dagster API it relies on, and falls back when it moved.

``hermes_assets/event_log.py`` subclasses Dagster's SQLite event log. The
checks it makes when it is built are the ones pinned here, against the
installed Dagster; a simulated change makes the storage Dagster's own, with one
warning naming the method, and leaves the environment as the user set it.
"""

from __future__ import annotations

import inspect
import logging
import os

import dagster as dg
import pytest
from dagster._core.events import ASSET_EVENTS, BATCH_WRITABLE_EVENTS
from dagster._core.instance.methods.event_methods import EventMethods
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from hermes_assets import event_log
from hermes_assets.event_log import RELIED_ON, BatchedSqliteEventLogStorage, incompatibility, parameters


@pytest.fixture(autouse=True)
def _fresh_warning():
    event_log._warn_once.cache_clear()
    yield
    event_log._warn_once.cache_clear()


@pytest.mark.parametrize("name", sorted(RELIED_ON))
def test_the_dagster_methods_it_relies_on_keep_their_signature(name):
    method = getattr(SqliteEventLogStorage, name, None)
    where = f"Dagster {dg.__version__}: SqliteEventLogStorage.{name}"
    advice = "hermes_assets/event_log.py would fall back to Dagster's own log: re-read both before upgrading"
    assert method is not None, f"{where} is gone. {advice}"
    assert parameters(method) == RELIED_ON[name], f"{where}({parameters(method)}). {advice}"


def test_the_installed_dagster_is_compatible():
    assert incompatibility() is None


def test_the_instance_registers_its_event_log_once_its_folder_is_known():
    source = inspect.getsource(dg.DagsterInstance.__init__)
    advice = f"Dagster {dg.__version__} changed DagsterInstance.__init__: re-read hermes_assets/event_log.py"
    assert source.index("self._local_artifact_storage =") < source.index("_event_storage.register_instance"), advice
    assert isinstance(inspect.getattr_static(dg.DagsterInstance, "root_directory"), property), advice


def test_the_events_it_groups_are_the_ones_dagster_batches_and_mirrors():
    advice = f"Dagster {dg.__version__} changed its event sets: re-read hermes_assets/event_log.py"
    assert event_log.BATCHED <= ASSET_EVENTS, advice  # Dagster's store_event mirrors them in the index
    assert event_log.BATCHED <= BATCH_WRITABLE_EVENTS, advice  # and its runs hand them over in batches
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
        event_log._warn_once.cache_clear()  # as another process of the same instance (the daemon, a run)
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
        storages[0].store_event_batch(["e1", "e2"])  # type: ignore[list-item]
        assert called == [["e1", "e2"]]  # Dagster's own batch write, not this storage's
    finally:
        for storage in storages:
            storage.dispose()


def test_another_change_is_reported_again(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(SqliteEventLogStorage, "_store_asset_event", _moved)
    with caplog.at_level(logging.WARNING, logger="hermes_assets.event_log"):
        BatchedSqliteEventLogStorage(str(tmp_path / "runs")).dispose()
        event_log._warn_once.cache_clear()
        monkeypatch.setattr(SqliteEventLogStorage, "prepare_insert_event", _moved)  # but the first is checked first
        monkeypatch.setattr(SqliteEventLogStorage, "_store_asset_event", SqliteEventLogStorage._store_asset_event_tags)
        BatchedSqliteEventLogStorage(str(tmp_path / "runs")).dispose()
    warnings = [r.getMessage() for r in caplog.records if r.name == "hermes_assets.event_log"]
    assert len(warnings) == 2 and "_store_asset_event(" in warnings[0] and "prepare_insert_event(" in warnings[1]
    assert oct((tmp_path / "runs" / event_log.FALLBACK_NOTE).stat().st_mode & 0o777) == "0o600"
