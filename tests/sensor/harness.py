"""Helpers of the sensor tests: evaluate real ticks, make real stores, run real processes.

Nothing here is a double: ticks run the real sensor against real stores written
by Hermes's own ``SessionDB``; the end-to-end tests start real Dagster
processes and a real writer process. Every process is started in its own
process group and killed as a group (:func:`kill_group`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from dagster._core.definitions.instigation_logger import get_instigation_log_records
from dagster._core.execution.build_resources import wrap_resources_for_execution
from dagster._core.log_manager import LOG_RECORD_METADATA_ATTR

from hermes_assets.defs import sensor_cursor, settings
from hermes_assets.defs.resources import HermesStores, HermesWarehouse
from hermes_assets.defs.tags import NO_SESSIONS_TAG
from hermes_assets.lib.basics import logs
from hermes_assets.lib.changes.watch import ROTATION_TICKS
from tests.support.definitions import load_definitions

REPO = Path(__file__).resolve().parents[2]
PYTHON = Path(sys.executable)
DAGSTER = PYTHON.parent / "dagster"
SENSOR = "hermes_state_sensor"
RUN_KEY = re.compile(r"^(\d{4}-\d{2}-\d{2})@([0-9a-f]{12})$")


class LoadedDefinitions:
    """The project's definitions as ``dagster dev`` loads them (``definitions.defs()``), loaded once per
    distinct settings of the environment: a tick reads the settings the definitions were loaded
    with (``HERMES_ASSETS_SENSOR_MAX_RUNS`` ...), so a test that sets one gets definitions of its own."""

    def __init__(self) -> None:
        self._by_settings: dict[settings.Settings, dg.Definitions] = {}

    def __call__(self) -> dg.Definitions:
        current = settings.load()
        if current not in self._by_settings:
            self._by_settings[current] = load_definitions()
        else:  # what loading them sets, as another test's definitions may have set another level
            logs.configure(level=current.log_level)
        return self._by_settings[current]


definitions = LoadedDefinitions()


_ephemeral = None


def _instance() -> dg.DagsterInstance:
    """One ephemeral instance for every tick (building one per context costs ~50 ms of migrations)."""
    global _ephemeral
    if _ephemeral is None:
        _ephemeral = dg.DagsterInstance.ephemeral()
    return _ephemeral


@dataclass
class Tick:
    """One evaluated tick: what it asked for and the cursor it left."""

    #: the runs of days with sessions (what changed in a store, retries)
    run_requests: list[dg.RunRequest]
    skip: str | None
    cursor: str | None  # the cursor after the tick
    #: the tick's own log (level name, message), when it was evaluated with one
    log: list[tuple[str, str]] = field(default_factory=list)
    #: the runs of partition days no store holds a session on (requested once, tagged so)
    empty_requests: list[dg.RunRequest] = field(default_factory=list)

    @property
    def days(self) -> list[str]:
        return sorted(r.partition_key for r in self.run_requests)

    @property
    def run_keys(self) -> dict[str, str]:
        return {r.partition_key: r.run_key for r in self.run_requests}


class SensorDriver:
    """Evaluates ``hermes_state_sensor`` tick after tick, carrying the cursor like the daemon does."""

    def __init__(self, hermes_home: Path | None = None, busy_timeout_ms: int = 2000, state_db: Path | None = None):
        self.resource = HermesStores(
            hermes_home=None if hermes_home is None else str(hermes_home),
            state_db=None if state_db is None else str(state_db),
            busy_timeout_ms=busy_timeout_ms,
        )
        #: the warehouse a tick looks at before it requests runs (is this host refused there?)
        root = tempfile.mkdtemp(prefix="hermes-sensor-warehouse-")
        self.warehouse = HermesWarehouse(root=root)
        weakref.finalize(self, shutil.rmtree, root, True)  # the tests' /tmp stays as it was
        self.cursor: str | None = None
        self.seen_run_keys: set[str] = set()
        self.ticks = 0
        #: the instance of the last tick (the sensor keeps its state in it, beside the cursor)
        self.instance: dg.DagsterInstance | None = None

    def tick(self, logged: dg.DagsterInstance | None = None) -> Tick:
        """One tick; on a ``logged`` instance (a persistent one), with the log Dagster keeps for
        the tick as the daemon's ticks have (the UI's tick log), read back into ``Tick.log``."""
        defs = definitions()
        sensor = defs.resolve_sensor_def(SENSOR)
        self.ticks += 1
        instance = logged or _instance()
        if self.instance is not None and instance is not self.instance and self.cursor:
            # the sensor keeps its state in the instance: the daemon ticks on one; a test that
            # switches instances carries the state over
            state = sensor_cursor.state_of(self.instance, self.cursor)
            self.cursor = sensor_cursor.summarize(instance, None, state) if state else self.cursor
        self.instance = instance
        with dg.SensorEvaluationContext(
            instance_ref=logged.get_ref() if logged else None,
            cursor=self.cursor,
            # the daemon names each tick's log; build_sensor_context would name it by the second
            log_key=["__repository__", SENSOR, f"tick-{id(self)}-{self.ticks}"] if logged else None,
            repository_name="__repository__" if logged else None,
            definitions=defs,
            instance=logged or _instance(),
            sensor_name=SENSOR if logged else None,
            resources=wrap_resources_for_execution({"hermes": self.resource, "warehouse": self.warehouse}),
        ) as ctx:
            data = sensor.evaluate_tick(ctx)
        requests = list(data.run_requests or [])
        empty = [r for r in requests if NO_SESSIONS_TAG.items() <= r.tags.items()]
        tick = Tick([r for r in requests if r not in empty], data.skip_message, data.cursor, empty_requests=empty)
        if logged is not None and data.log_key:
            tick.log = [
                (r["levelname"], r[LOG_RECORD_METADATA_ATTR]["orig_message"])
                for r in get_instigation_log_records(logged, data.log_key)
            ]
        if data.cursor is not None:
            self.cursor = data.cursor
        for r in tick.run_requests:
            assert RUN_KEY.match(r.run_key), r.run_key
            assert r.run_key.startswith(r.partition_key + "@")
            assert r.tags.get("hermes/trigger") == "sensor"
            # a reused key would be silently skipped by Dagster: every request must be fresh
            assert r.run_key not in self.seen_run_keys, f"run key {r.run_key} reused"
            self.seen_run_keys.add(r.run_key)
        for r in tick.empty_requests:
            assert r.tags.get("hermes/trigger") == "sensor" and r.run_key not in self.seen_run_keys, r.run_key
            self.seen_run_keys.add(r.run_key)
        return tick

    def settle(self) -> None:
        """Tick until the rotation stops: after the store files last changed it reads a few days'
        long text on each of the next 16 ticks (SPEC §8 step 2); then a tick runs no SQL."""
        for _ in range(ROTATION_TICKS):
            tick = self.tick()
            assert tick.run_requests == [], f"settling requested {tick.days}"

    @property
    def state(self) -> dict:
        """The sensor's state, which the cursor Dagster keeps names (``defs/sensor_cursor.py``)."""
        text = sensor_cursor.state_of(self.instance, self.cursor) if self.instance else None
        return json.loads(text) if text else {}

    def store_state(self, path: Path) -> dict:
        return self.state["stores"][str(path)]


# --------------------------------------------------------------------------
# stores
# --------------------------------------------------------------------------


def snapshot(db: Path, dest: Path) -> Path:
    """A consistent copy of a live store (SQLite's backup API), as a single file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = sqlite3.connect(dest)
    try:
        src.backup(out)
    finally:
        src.close()
        out.close()
    return dest


def checkpoint(db: Path) -> None:
    """What Hermes does every 50 writes: fold the WAL into the db file (files move, rows do not)."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def count_rows(db: Path, sql: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], env: dict, log: Path, cwd: Path | None = None) -> subprocess.Popen:
    """Start ``cmd`` in a new process group (so it and all its children can be killed together)."""
    out = open(log, "ab")
    try:
        return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        out.close()


def kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the process group of ``proc`` (started by :func:`start`), then SIGKILL what is left."""
    if proc is None:
        return
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        proc.wait()
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.1)
        if not _group_alive(pgid):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies count as gone: reap what we can
    try:
        while os.waitpid(-pgid, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return _non_zombie_in_group(pgid)


def _non_zombie_in_group(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def project_env(**extra: str) -> dict:
    """The environment of a child process: this one, minus settings that would leak a real setup."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "DAGSTER_"))}
    env.update({k: str(v) for k, v in extra.items()})
    env.setdefault("HERMES_ASSETS_LOG_FORMAT", "json")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def copy_instance_config(dagster_home: Path) -> None:
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", dagster_home / "dagster.yaml")
