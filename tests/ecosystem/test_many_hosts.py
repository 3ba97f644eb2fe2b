"""Several hosts, one warehouse (SPEC §2): two machines capture their own Hermes into one
shared folder, or one S3-compatible bucket, at the same time, with nothing between them.

Each host is its own installation: its own ``DAGSTER_HOME`` (its own Dagster instance),
its own store written by the real Hermes writer, its own ``HERMES_ASSETS_HOST``; both
stores hold the same session ids. Both run ``dagster asset materialize`` (captures and
analytics) over the same days at the same time; one is killed with ``kill -9`` as it
writes its partitions while the other's store is still being written, and started again.
Afterwards every message of both stores is in the warehouse exactly once, each row names
its host, the analytics equal a recomputation over both hosts' files, and a re-run of
both writes nothing.
"""

from __future__ import annotations

import collections
import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from hermes_assets.lib.analytics import daily
from hermes_assets.lib.analytics.usage import daily_usage
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.loading import DatasetDays
from tests.ecosystem.test_object_storage import s3_endpoint  # noqa: F401  (fixture: moto's S3 server)
from tests.sensor.harness import DAGSTER, REPO, copy_instance_config, project_env
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter, openai_call

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

HOSTS = ("alpha", "beta")
DAYS = ("2026-06-01", "2026-06-02", "2026-06-03")
#: sessions per host, the same ids on both (as API-server ids that collide)
SESSIONS_PER_HOST = 9
RUN_TIMEOUT_S = 300


def write_sessions(store: Path, host: str, first: int, count: int, *, start_s: float) -> None:
    """``count`` sessions ``s<first>``... spread over :data:`DAYS`, each with a few turns and a
    tool call; their text names the host (the ids do not)."""
    with HermesWriter(store, start_s=start_s) as w:
        for i in range(first, first + count):
            w.at(START_S + (i % len(DAYS)) * DAY_S + 60 * i)
            sid = w.session(f"s{i}", "cli", cwd=f"/work/{host}", model=f"model-{i % 2}")
            for turn in range(6):
                w.msg(sid, "user", f"{host} asks {i}.{turn} " + "words " * 40)
                w.msg(sid, "assistant", "", tool_calls=[openai_call(f"c{i}{turn}", "terminal", {"cmd": "ls"})])
                w.msg(
                    sid, "tool", json.dumps({"exit_code": turn % 2}), tool_call_id=f"c{i}{turn}", tool_name="terminal"
                )
                w.msg(sid, "assistant", f"{host} answers {i}.{turn}")
            w.end(sid)


def grow(store: Path, host: str, sid: str) -> None:
    """More messages in an existing session (Hermes appending to a live store)."""
    with HermesWriter(store, start_s=START_S + 2 * DAY_S) as w:
        w.msg(sid, "user", f"{host} comes back to {sid}")
        w.msg(sid, "assistant", f"{host} replies in {sid}")


class Host:
    def __init__(self, name: str, base: Path, warehouse: str, extra_env: dict[str, str]):
        self.name = name
        self.home = base / name
        self.store = self.home / "hermes" / "state.db"
        self.dagster_home = self.home / "dagster"
        copy_instance_config(self.dagster_home)
        self.env = project_env(
            DAGSTER_HOME=str(self.dagster_home),
            HERMES_HOME=str(self.home / "hermes"),
            HERMES_STATE_DB=str(self.store),
            HERMES_ASSETS_WAREHOUSE=warehouse,
            HERMES_ASSETS_HOST=name,
            HERMES_ASSETS_START_DATE=DAYS[0],
            HERMES_ASSETS_POLICY_LIST=str(self.home / "policy.json"),
            HERMES_ASSETS_SPOOL=str(self.home / "spool"),
            HERMES_ASSETS_WORKERS="1",
            # every event printed (the console prints warnings alone): the test reads each file's write
            HERMES_ASSETS_LOG_LEVEL="debug",
            **extra_env,
        )
        self.logs: list[Path] = []

    def start(self) -> subprocess.Popen:
        log = self.home / f"run-{len(self.logs)}.log"
        self.logs.append(log)
        cmd = [str(DAGSTER), "asset", "materialize", "-m", "hermes_assets.definitions", "--select", "*"]
        cmd += ["--partition-range", f"{DAYS[0]}...{DAYS[-1]}"]
        with open(log, "wb") as out:
            return subprocess.Popen(
                cmd, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def log_text(self) -> str:
        return self.logs[-1].read_text(errors="replace")

    def messages(self) -> set[tuple[str, int]]:
        """(sid, mid) of every message of the store, as Hermes holds them (read-only)."""
        conn = sqlite3.connect(f"file:{self.store}?mode=ro", uri=True)
        try:
            return {(str(s), int(m)) for s, m in conn.execute("SELECT session_id, id FROM messages")}
        finally:
            conn.close()

    def sessions(self) -> set[str]:
        conn = sqlite3.connect(f"file:{self.store}?mode=ro", uri=True)
        try:
            return {str(s) for (s,) in conn.execute("SELECT id FROM sessions")}
        finally:
            conn.close()


def finish(proc: subprocess.Popen, host: Host) -> None:
    assert proc.wait(RUN_TIMEOUT_S) == 0, f"{host.name}'s run failed:\n{host.log_text()[-4000:]}"


def kill_while_writing(proc: subprocess.Popen, host: Host) -> int:
    """SIGKILL the run's process group once its log shows it writing a partition file;
    -> the files it had written by then."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        writes = host.log_text().count('"hermes.warehouse.day_written"')
        if writes:
            os.killpg(proc.pid, 9)
            proc.wait(30)
            return writes
        time.sleep(0.02)
    raise AssertionError(f"{host.name}'s run ended before it wrote anything:\n{host.log_text()[-4000:]}")


def changed_writes(host: Host) -> int:
    return sum(
        1
        for line in host.log_text().splitlines()
        if '"hermes.warehouse.day_written"' in line and '"changed": true' in line
    )


def run_two_hosts(warehouse: str, base: Path, extra_env: dict[str, str], reader: Warehouse) -> dict:
    alpha, beta = (Host(name, base, warehouse, extra_env) for name in HOSTS)
    for host in (alpha, beta):
        write_sessions(host.store, host.name, 0, SESSIONS_PER_HOST - 2, start_s=START_S)

    # both capture the same days at once; beta's store is written while it runs; alpha is killed mid-write
    runs = {host.name: host.start() for host in (alpha, beta)}
    write_sessions(beta.store, beta.name, SESSIONS_PER_HOST - 2, 2, start_s=START_S)
    killed_after = kill_while_writing(runs["alpha"], alpha)
    finish(runs["beta"], beta)

    # alpha's Hermes goes on meanwhile; both run again at once (alpha restarted)
    write_sessions(alpha.store, alpha.name, SESSIONS_PER_HOST - 2, 2, start_s=START_S)
    grow(alpha.store, alpha.name, "s1")
    grow(beta.store, beta.name, "s1")
    runs = {host.name: host.start() for host in (alpha, beta)}
    for host in (alpha, beta):
        finish(runs[host.name], host)
    # and once more at once: the last analytics of a day are computed after both hosts' files
    runs = {host.name: host.start() for host in (alpha, beta)}
    for host in (alpha, beta):
        finish(runs[host.name], host)
    rerun_writes = {host.name: changed_writes(host) for host in (alpha, beta)}

    # every message of both stores, exactly once, naming its host
    messages = reader_rows(reader, MESSAGES, ["host", "session_id", "id", "source_deleted"])
    sessions = reader_rows(reader, SESSIONS, ["host", "id"])
    for host in (alpha, beta):
        mine = [(r["session_id"], r["id"]) for r in messages if r["host"] == host.name]
        assert not [k for k, n in collections.Counter(mine).items() if n > 1], f"{host.name}: a message twice"
        assert set(mine) == host.messages(), host.name
        assert {r["id"] for r in sessions if r["host"] == host.name} == host.sessions()
        assert not any(r["source_deleted"] for r in messages)
    assert {r["host"] for r in messages} == set(HOSTS)
    gateway = reader_rows(reader, GATEWAY, ["host", "session_id", "part_id"])
    part_ids = [r["part_id"] for r in gateway]
    assert len(part_ids) == len(set(part_ids)), "two hosts' canonical rows share an id"
    assert all(r["session_id"].startswith(f"hermes-{r['host']}:") for r in gateway)
    assert {r["session_id"] for r in gateway} >= {f"hermes-{h}:s0" for h in HOSTS}  # the colliding ids, both kept
    # each host's files hold its own rows only
    for name in HOSTS:
        own = Warehouse(reader.uri, spool=str(base / "reader-spool"), host=name)
        for dataset in (GATEWAY, SESSIONS, MESSAGES):
            for day in own.own_days(dataset):
                assert set(own.read_own(dataset, day, columns=["host"])["host"].to_pylist()) == {name}
    # the analytics equal a recomputation over both hosts' files
    for day in DAYS:
        tables = {name: DatasetDays(reader, name, [day], cols).read(day) for name, cols in daily.INPUTS.items()}
        usage = daily_usage(day, tables[SESSIONS], tables[MESSAGES], tables[GATEWAY]).table
        for dataset in daily.ANALYTICS:
            expected = daily.compute_day(dataset, day, tables).table
            # a derived day without a row has no file (a day without a skill loaded, say)
            assert reader.read(dataset, day) == (expected if expected.num_rows else None), (dataset, day)
        assert pc.sum(usage["sessions"]).as_py() >= 2 * (SESSIONS_PER_HOST // len(DAYS))
    return {
        "killed_after_writes": killed_after,
        "rerun_changed_writes": rerun_writes,
        "messages": len(messages),
        "canonical_rows": len(gateway),
    }


def reader_rows(reader: Warehouse, dataset: str, columns: list[str]) -> list[dict]:
    return [row for day in reader.days(dataset) for row in reader.read(dataset, day, columns=columns).to_pylist()]


def test_two_hosts_capture_into_one_shared_folder_at_once(tmp_path):
    warehouse = tmp_path / "shared-warehouse"
    figures = run_two_hosts(str(warehouse), tmp_path, {}, Warehouse(str(warehouse), host="reader"))
    assert figures["rerun_changed_writes"] == {"alpha": 0, "beta": 0}, figures
    print(figures)


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch):
    import pyarrow.fs as pafs

    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
    for name, value in creds.items():
        monkeypatch.setenv(name, value)
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", region="us-east-1", allow_bucket_creation=True)
    fs.create_dir("hermes-many-hosts")
    uri = f"s3://hermes-many-hosts/team/warehouse?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    return uri, creds


def test_two_hosts_capture_into_one_bucket_at_once(tmp_path, s3_env):
    uri, creds = s3_env
    reader = Warehouse(uri, spool=str(tmp_path / "reader-spool"), host="reader")
    figures = run_two_hosts(uri, tmp_path, creds, reader)
    assert figures["rerun_changed_writes"] == {"alpha": 0, "beta": 0}, figures
    print(figures)
