"""The default instance's event log writes Dagster's event batches in one go (issue 21).

``dagster.yaml`` names :class:`~hermes_assets.defs.event_log.BatchedSqliteEventLogStorage`.
It must store exactly what Dagster's own SQLite event log stores, where it
stores it: the same events of a run, the same materialized and failed
partitions (what the UI shows), the same latest materialization per
partition. Each run here is the same capture on two instances that differ
only in their event log.
"""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

from hermes_assets.defs.event_log import BatchedSqliteEventLogStorage
from hermes_assets.defs.partitions import daily_partitions
from tests.defs.harness import DATASETS, SMALL_DAYS, md_values

REPO = Path(__file__).resolve().parents[2]
FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]


def _instance(home: Path, *, batched: bool) -> dg.DagsterInstance:
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert config["event_log_storage"]["class"] == BatchedSqliteEventLogStorage.__name__
    if not batched:
        del config["event_log_storage"]  # Dagster's own SQLite event log
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dg.DagsterInstance.from_config(str(home))


def _events(instance: dg.DagsterInstance, run_id: str) -> collections.Counter:
    records = instance.get_records_for_run(run_id, limit=100_000).records
    return collections.Counter(
        r.event_log_entry.dagster_event_type for r in records if r.event_log_entry.is_dagster_event
    )


def _status(instance: dg.DagsterInstance) -> dict[str, tuple[list[str], list[str]]]:
    """Per dataset: (materialized, failed) partitions, as the UI's partition status computes them."""
    out = {}
    for dataset in DATASETS:
        value = get_and_update_asset_status_cache_value(instance, dg.AssetKey(dataset), daily_partitions)
        out[dataset] = (
            sorted(value.deserialize_materialized_partition_subsets(daily_partitions).get_partition_keys()),
            sorted(value.deserialize_failed_partition_subsets(daily_partitions).get_partition_keys()),
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


@pytest.fixture
def stored_batches(monkeypatch):
    """The batches the storage wrote in one go (sizes), spied on its own method."""
    sizes: list[int] = []
    write = BatchedSqliteEventLogStorage._store_asset_events

    def spy(self, events):
        sizes.append(len(events))
        return write(self, events)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_store_asset_events", spy)
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)  # the storage turns batching on
    return sizes


def test_the_batched_event_log_stores_what_dagsters_own_stores(small, stored_batches, tmp_path):
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
            )
    assert results[True] == results[False]
    events, _, status, latest = results[True]
    days = len(SMALL_DAYS)
    assert events[dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED] == 3 * days
    assert events[dg.DagsterEventType.ASSET_MATERIALIZATION] == 3 * days
    assert all(status[d] == (SMALL_DAYS, []) for d in DATASETS)
    assert all(rows is not None for rows in latest.values())
    # two runs: their planned events in one batch each, then each dataset's days in one
    assert stored_batches.count(days) == 2 * 3 and max(stored_batches) > days


def test_a_failed_run_marks_its_partitions_failed_as_before(small, stored_batches, tmp_path):
    small.policy_list.parent.mkdir(parents=True)
    small.policy_list.write_text("{ not json")  # the run fails before any day is written
    statuses = {}
    for batched in (False, True):
        with _instance(tmp_path / f"home-{batched}", batched=batched) as instance:
            result = small.materialize(FIRST, LAST, instance=instance, raise_on_error=False)
            assert not result.success
            statuses[batched] = (_events(instance, result.run_id), _status(instance))
    assert statuses[True] == statuses[False]
    events, status = statuses[True]
    assert events[dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED] == 3 * len(SMALL_DAYS)
    assert all(status[d] == ([], SMALL_DAYS) for d in DATASETS), status


def test_the_storage_needs_a_home(monkeypatch, tmp_path):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with pytest.raises(dg.DagsterInvariantViolationError, match="DAGSTER_HOME"):
        BatchedSqliteEventLogStorage()
    storage = BatchedSqliteEventLogStorage(str(tmp_path / "runs"))
    try:
        assert Path(storage._base_dir) == tmp_path / "runs"
    finally:
        storage.dispose()
        shutil.rmtree(tmp_path / "runs", ignore_errors=True)
