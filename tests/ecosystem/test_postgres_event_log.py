"""The batched Postgres event log stores what Dagster's own Postgres event log stores.

``deploy/postgres/dagster.yaml`` names
:class:`~hermes_assets.event_log.postgres.BatchedPostgresEventLogStorage`. A
capture's events (planned materializations and checks, materializations, check
evaluations of its days and of ``hermes_state``, steps, log lines), with
observations of another run among them, are stored on a real server twice: by
Dagster's own storage event by event, and by the batched one in batches split
every way. Every row of every table is the same, and each group was written in
one transaction.
"""

from __future__ import annotations

import pytest
import sqlalchemy as db
from dagster_postgres.event_log.event_log import PostgresEventLogStorage

from hermes_assets.event_log.postgres import BatchedPostgresEventLogStorage
from tests.defs.conftest import capture, small  # noqa: F401  (fixtures: the small store, installed)
from tests.defs.harness import DATASETS, SMALL_DAYS
from tests.defs.test_event_log import _asset_event, _captured
from tests.ecosystem.pg_cluster import pg_cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

#: columns the server fills with its clock when a row is inserted
CLOCK = {"create_timestamp", "update_timestamp", "migration_completed"}
#: a surrogate key nothing refers to (rows of asset_keys are found by asset_key): Dagster's upsert of
#: an asset's row takes a number of its sequence each time, even when it updates the row, so the
#: id a new asset gets counts the writes of other assets' rows before it (fewer in a group)
SEQUENCE_ONLY = {("asset_keys", "id")}


def _database(cluster, name: str) -> str:
    cluster._run("createdb", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", name)
    return cluster.url.rsplit("/", 1)[0] + "/" + name


def _tables(url: str) -> dict:
    engine = db.create_engine(url)
    out = {}
    try:
        with engine.connect() as conn:
            for table in sorted(db.inspect(conn).get_table_names()):
                order = "asset_key" if table == "asset_keys" else "1"
                rows = conn.execute(db.text(f'SELECT * FROM "{table}" ORDER BY {order}')).mappings().all()
                out[table] = [
                    {k: v for k, v in row.items() if k not in CLOCK and (table, k) not in SEQUENCE_ONLY} for row in rows
                ]
    finally:
        engine.dispose()
    return out


@pytest.mark.parametrize("size", [2, 7, 1000])
def test_batches_give_the_rows_dagsters_own_postgres_log_gives(pg_cluster, small, tmp_path, size):
    events = _captured(small, tmp_path / "source", last=SMALL_DAYS[3])
    other = [_asset_event("a" * 8 + "-other-run", d, SMALL_DAYS[0]) for d in DATASETS]
    events[len(events) // 2 : len(events) // 2] = other
    own_url, batched_url = _database(pg_cluster, "own"), _database(pg_cluster, "batched")
    own = PostgresEventLogStorage(own_url)
    try:
        for event in events:
            own.store_event(event)
    finally:
        own.dispose()
    groups: list[int] = []
    batched = BatchedPostgresEventLogStorage(batched_url)
    assert batched.fallback is None and batched.batches_check_evaluations
    write = batched._store_group
    batched._store_group = lambda group: (groups.append(len(group)), write(group))[1]  # type: ignore[method-assign]
    try:
        for i in range(0, len(events), size):
            batched.store_event_batch(events[i : i + size])
    finally:
        batched.dispose()
    assert _tables(batched_url) == _tables(own_url)
    assert groups and max(groups) > 1
