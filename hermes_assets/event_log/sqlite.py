"""The SQLite event log of the default instance, writing Dagster's event batches in one go.

A ranged capture reports, per day and dataset, one planned materialization
when the run is created, one materialization when the day is written and one
evaluation of the day's check: on a year of history about 3,000 events.
Dagster's SQLite event log stores each event on its own: a new engine and
connection to the run's database and another to the asset index (two for a
check event), each closed after one insert, and in WAL mode the close of the
last connection checkpoints the file (fsyncs included). That was about 16 ms
of CPU and, on a busy disk, 70 ms of wall time per event.

This storage writes each group of a batch (:mod:`.grouped`) in one
transaction on the run's database and one on the index. The run's database
is still closed after each write, which is what the UI's live run view
watches. Every write, of an event on its own too (a step's start, a log line),
still opens its own connection and closes it, but on an engine kept per
database (the last few used, :data:`ENGINES_KEPT`) instead of one built and
thrown away per write: SQLAlchemy's engine holds the statements it compiled,
which each event's insert then reuses (an event on its own about half the
CPU: 4 ms before, 2 ms after). When the index refuses a group (locked past SQLite's busy timeout, a
full disk), the group's rows are taken out of the run's database again, so the
two databases agree, then the error goes on.

Each database is made as Dagster makes it (its tables, WAL mode, Alembic's stamp of the latest
revision), without reading Alembic's ~90 migration scripts for each one: Dagster reads them all
twice for each new run's database and once more for the index at each process's first write
(about 20 ms of CPU each time), though only a database without a stamp needs the latest revision.
Here a database that has a stamp is left as it is (Dagster's too, after reading the scripts); a
new, empty one is made with the scripts read once per process, in WAL mode from its first
statement (Dagster's tables are made one statement at a time, each its own transaction: in WAL
mode each one a write to the log, not a rollback journal made, synced and deleted); any other
state (tables without a stamp, another process making it at the same time) is Dagster's
``_initdb``'s, with its retries.

A cancel cannot land inside a batch: Dagster buffers an output's events while
it emits them, with no user code between them, and raises a captured
interrupt only inside user code. A killed process loses what Dagster still
buffered, the events of the output it was emitting (as Dagster's own storage
with batches on): the days are written, and show as not materialized until a
later run writes them again.

Dagster turns batching on with one switch only, the environment variable
``DAGSTER_EVENT_BATCH_SIZE``, which its instance reads on every event (there
is no key for it in ``dagster.yaml``); unset, it never calls
``store_event_batch`` and this storage behaves exactly like Dagster's own. So
the storage sets it when it is built, to ``1000``, unless the user set it
(``0`` turns batching off). Nothing else reads it: any other Dagster instance
in such a process batches too, which Dagster's other storages support. The
package lives outside ``defs/`` so that loading the definitions (which imports
every module there) never imports it: only ``dagster.yaml`` does.
"""

import functools
import os
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
import sqlalchemy as db
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import SqlEventLogStorageMetadata, SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.sql import get_alembic_config, safe_commit
from dagster._serdes import ConfigurableClassData
from sqlalchemy.pool import NullPool

from hermes_assets.event_log.grouped import (
    GROUP_RELIED_ON,
    GroupedWrites,
    incompatibility,
    turn_batches_on,
    warn_once,
)

#: what this storage overrides or calls on Dagster's SQLite event log, with the parameters it passes
RELIED_ON = {
    "__init__": "self, base_dir, inst_data=None",
    "register_instance": "self, instance",
    "from_config_value": "inst_data, config_value",
    "run_connection": "self, run_id=None",
    # its connections: Dagster's, each write on a connection of its own, the engine kept
    "_connect": "self, shard",
    "_initdb": "self, engine, for_index_shard=False",
    "conn_string_for_shard": "self, shard_name",
    "dispose": "self",
    **GROUP_RELIED_ON,
}

#: the engines kept, one per database (the index, a run's log): the last ones used (a process that
#: reads the logs of many runs, the webserver, keeps no engine per run it ever read)
ENGINES_KEPT = 8


class BatchedSqliteEventLogStorage(GroupedWrites, SqliteEventLogStorage):
    """Dagster's SQLite event log (the same files, under ``<instance folder>/history/runs``),
    storing a batch of asset and check events in one transaction per database."""

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None):
        # Dagster gives its own storage <instance folder>/history/runs from its defaults, but a
        # storage named in dagster.yaml only its config: without a base_dir the folder is the
        # instance's, known when the instance registers (DAGSTER_HOME may name another one)
        self._inst_data = inst_data
        self._engines: OrderedDict[str, db.engine.Engine] = OrderedDict()
        self.fallback = incompatibility(SqliteEventLogStorage, RELIED_ON)
        if base_dir is not None:
            self._open(base_dir)
        if self.fallback is None:
            turn_batches_on()

    def _open(self, base_dir: str) -> None:
        super().__init__(base_dir, self._inst_data)
        if self.fallback is not None:  # Dagster's own storage: batching stays as the user set it
            warn_once(self.fallback, base_dir, "SQLite")

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

    @contextmanager
    def _connect(self, shard: str, *args: Any, **kwargs: Any) -> Iterator[db.engine.Connection]:
        """Dagster's connection to one database (a new one per write, in a transaction, closed after
        it: the close of the last one checkpoints the WAL, which the UI's live view watches), made by
        an engine kept for the next writes (Dagster builds one per write and disposes of it).
        Dagster's own, whatever it is called with, when the storage fell back to Dagster's."""
        if self.fallback is not None:
            with super()._connect(shard, *args, **kwargs) as conn:
                yield conn
            return
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _initdb(self, engine: db.engine.Engine, for_index_shard: bool = False) -> None:
        """Dagster's making of a database, the scripts read once per process (the module's docstring)."""
        if self.fallback is None:
            try:
                with engine.connect() as conn:
                    migrations = MigrationContext.configure(conn)
                    if migrations.get_current_revision() is not None:
                        return
                    if not db.inspect(conn).get_table_names():
                        conn.execute(db.text("PRAGMA journal_mode=WAL;"))
                        SqlEventLogStorageMetadata.create_all(conn)
                        migrations.stamp(_migration_scripts(), "head")
                        safe_commit(conn)
                        return
            except (db.exc.DatabaseError, sqlite3.DatabaseError):
                pass  # another process is making it: Dagster's waits for it
        super()._initdb(engine, for_index_shard)

    def _engine(self, shard: str) -> db.engine.Engine:
        """The kept engine of ``shard``'s database (made as Dagster makes it: no pool, its busy timeout)."""
        engine = self._engines.get(shard)
        if engine is None:
            engine = db.create_engine(
                self.conn_string_for_shard(shard),
                poolclass=NullPool,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
            )
            self._engines[shard] = engine
            while len(self._engines) > ENGINES_KEPT:
                self._engines.popitem(last=False)[1].dispose()
        else:
            self._engines.move_to_end(shard)
        return engine

    def dispose(self) -> None:
        while self._engines:
            self._engines.popitem()[1].dispose()
        super().dispose()

    def _store_group(self, events: list[EventLogEntry]) -> None:
        """What :meth:`store_event` does for each event (the run's log, then its mirror in the
        index with what the index keeps of it), for all of them at once."""
        rows = [self._event_to_row(event) for event in events]
        run_id = events[0].run_id
        with self.run_connection(run_id) as conn:
            logged = _insert(conn, rows)
        try:
            with self.index_transaction() as conn:
                self._store_in_index(conn, events, list(_insert(conn, rows)), rows)
        except BaseException:  # an interrupt too: the run's log keeps no event the index lacks
            with self.run_connection(run_id) as conn:
                conn.execute(
                    SqlEventLogStorageTable.delete().where(SqlEventLogStorageTable.c.id.between(logged[0], logged[-1]))
                )
            raise


@functools.cache
def _migration_scripts() -> ScriptDirectory:
    """Dagster's Alembic scripts of the event log, as its SQLite event log reads them (once per process)."""
    return ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__))


def _insert(conn: Any, rows: list[dict[str, Any]]) -> range:
    """Insert the event rows in one statement (executed for each row); -> their ids. SQLite gives
    the rows of one statement consecutive ids, the last one last_insert_rowid()."""
    conn.execute(SqlEventLogStorageTable.insert(), rows)
    last = conn.execute(db.text("SELECT last_insert_rowid()")).scalar_one()
    return range(last - len(rows) + 1, last + 1)
