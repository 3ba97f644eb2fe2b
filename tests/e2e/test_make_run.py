"""``make run`` and ``make stop`` as a person types them: one Dagster per folder, stopped whole.

- A second ``make run`` for the same ``DAGSTER_HOME`` is refused before anything
  starts: one line naming the running instance's PID and port and ``make stop``,
  exit status 2, within seconds; the first keeps serving. ``make stop`` then stops
  that first instance, and returns only when its webserver, daemon and code
  server have all exited.
- So is a second start beside a ``dg dev`` typed by hand on the folder, which
  ``make stop`` stops too.
- A port another program holds is refused the same way, naming the port and how
  to choose another (``make run PORT=...``).
- A store named in ``HERMES_STATE_DB`` that vanishes while Dagster runs fails the
  sensor's ticks (FAILURE, what the UI shows red) with the one line naming it; the
  first tick after it is back captures what Hermes wrote meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from hermes_assets.dev import PID_FILE
from hermes_assets.lib.basics.schemas import MESSAGES
from tests.defs.harness import new_capture, read_day
from tests.e2e.conftest import REPO
from tests.e2e.test_backfill_graphql import _free_port
from tests.e2e.test_first_hour import DG, _graphql, clean_env, make, run
from tests.support.hermes_writer import HermesWriter

pytestmark = pytest.mark.e2e

#: how long a loaded machine may take to bring the webserver up
UP_TIMEOUT_S = 180
#: how long a refusal may take, at most
REFUSAL_S = 30


@pytest.fixture
def install(tmp_path):
    cap = new_capture(tmp_path / "install")
    shutil.copyfile(REPO / "dagster.yaml", cap.dagster_home / "dagster.yaml")
    return cap


def start_make_run(env: dict, port: int, console: Path) -> subprocess.Popen:
    with open(console, "wb") as out:
        return subprocess.Popen(
            make("run", env, port=port),
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def serves(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10) as resp:
            return resp.status == 200
    except OSError:
        return False


def wait_up(proc: subprocess.Popen, port: int, console: Path) -> None:
    deadline = time.monotonic() + UP_TIMEOUT_S
    while not serves(port):
        assert proc.poll() is None, console.read_text()[-4000:]
        assert time.monotonic() < deadline, f"not serving on {port}: " + console.read_text()[-4000:]
        time.sleep(1)


def tree(pid: int) -> set[int]:
    """``pid`` and every process below it."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True, check=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        child, parent = map(int, line.split())
        children.setdefault(parent, []).append(child)
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def running(pids: set[int]) -> list[str]:
    """``ps`` lines of the processes of ``pids`` still running (zombies have exited)."""
    out = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,stat=,cmd="], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if int(ln.split()[0]) in pids and not ln.split()[1].startswith("Z")]


def lines_of(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]


def refused(env: dict, port: int) -> tuple[list[str], float, subprocess.CompletedProcess]:
    began = time.monotonic()
    proc = run(make("run", env, port=port), env, timeout=REFUSAL_S + 30)
    return lines_of(proc), time.monotonic() - began, proc


def stop_for_good(proc: subprocess.Popen, env: dict) -> subprocess.CompletedProcess:
    """``make stop``, then make sure nothing of the group outlives the test, whatever happened."""
    try:
        return run(make("stop", env), env, timeout=180)
    finally:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_second_make_run_is_refused_in_one_line_and_make_stop_stops_the_first_whole(install, tmp_path):
    port = _free_port()
    env = clean_env(**install.environ())
    first = start_make_run(env, port, tmp_path / "first.txt")
    try:
        wait_up(first, port, tmp_path / "first.txt")
        dg_dev = int((install.dagster_home / PID_FILE).read_text().split()[0])
        for again in (port, _free_port()):  # the same port, or another: this folder has its instance
            lines, took, second = refused(env, again)
            assert second.returncode == 2, lines
            assert took < REFUSAL_S, took
            assert len(lines) == 1, lines
            (line,) = lines
            assert f"pid {dg_dev}, port {port}" in line and "`make stop`" in line, line
            assert str(install.dagster_home) in line and "Traceback" not in line
        assert serves(port), "the first instance still serves"
        assert first.poll() is None
        assert int((install.dagster_home / PID_FILE).read_text().split()[0]) == dg_dev, "its record is untouched"
        services = tree(first.pid)
        commands = "\n".join(running(services))
        assert "dagster_webserver" in commands and "dagster._daemon" in commands and "grpc" in commands, commands
    finally:
        stop = stop_for_good(first, env)
    assert stop.returncode == 0 and stop.stdout.startswith(f"stopped dg dev (pid {dg_dev}"), stop.stdout + stop.stderr
    assert running(services - {first.pid}) == [], "make stop returned before every process had exited"
    assert first.returncode == 0, "make run ends cleanly when dg dev is stopped"
    assert not serves(port)
    again = run(make("stop", env), env)
    assert again.returncode == 0 and again.stdout.startswith("nothing to stop"), again.stdout


def test_a_dagster_started_by_hand_on_the_folder_is_refused_too_and_make_stop_stops_it(install, tmp_path):
    """A ``dg dev`` typed by hand with this ``DAGSTER_HOME`` holds no lock: its daemon, found by the
    instance it serves, is what ``make run`` refuses to start a second of, and what ``make stop`` stops."""
    port = _free_port()
    env = clean_env(**install.environ())
    log = tmp_path / "by-hand.txt"
    with open(log, "wb") as out:
        by_hand = subprocess.Popen(
            [DG, "dev", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_up(by_hand, port, log)
        lines, took, second = refused(env, _free_port())
        assert second.returncode == 2 and took < REFUSAL_S, lines
        assert len(lines) == 1 and f"pid {by_hand.pid}, port {port}" in lines[0], lines
        services = tree(by_hand.pid)
    finally:
        stop = stop_for_good(by_hand, env)
    assert stop.returncode == 0 and stop.stdout.startswith(f"stopped dg dev (pid {by_hand.pid}"), stop.stdout
    assert running(services) == []


def test_a_busy_port_is_refused_in_one_line_naming_it(install):
    env = clean_env(**install.environ())
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        lines, took, proc = refused(env, port)
    assert proc.returncode == 2, lines
    assert took < REFUSAL_S, took
    assert len(lines) == 1, lines
    (line,) = lines
    assert f"port {port} is taken (by pid {os.getpid()}:" in line, line
    assert "`make run PORT=" in line and line.endswith(".  Stop."), line
    assert not (install.dagster_home / PID_FILE).exists(), "nothing started"


# --------------------------------------------------------------------------
# a store that vanishes under a running instance
# --------------------------------------------------------------------------

TICKS_Q = """
query {
  sensorOrError(sensorSelector: {repositoryName: "__repository__", repositoryLocationName: "hermes_assets",
                                 sensorName: "hermes_state_sensor"}) {
    __typename
    ... on Sensor { sensorState { ticks(limit: 20) { id status timestamp runIds error { message } } } }
    ... on PythonError { message }
  }
}"""
#: long enough for a few ticks and one capture run on a loaded machine
TICK_TIMEOUT_S = 240


def ticks_after(port: int, since: float) -> list[dict]:
    doc = _graphql(port, TICKS_Q)["sensorOrError"]
    assert doc["__typename"] == "Sensor", doc
    return sorted((t for t in doc["sensorState"]["ticks"] if t["timestamp"] > since), key=lambda t: t["timestamp"])


def session_day(store: Path) -> str:
    """The UTC day the store's only session started (its partition), read read-only."""
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        (started,) = db.execute("SELECT started_at FROM sessions").fetchone()
    return time.strftime("%Y-%m-%d", time.gmtime(started))


def messages_of(install, day: str) -> int:
    table = read_day(install.warehouse, MESSAGES, day)
    return 0 if table is None else table.num_rows


def wait_for(what: str, probe, proc: subprocess.Popen, console: Path):
    deadline = time.monotonic() + TICK_TIMEOUT_S
    while True:
        assert proc.poll() is None, console.read_text()[-4000:]
        try:
            found = probe()
        except OSError:  # the webserver is busy: ask again
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: " + console.read_text()[-4000:]
        time.sleep(2)


def write(install, messages: list[str], *, new_session: bool = False) -> None:
    """Hermes (its own writer) writes ``messages`` in one session, a minute ago."""
    writer = HermesWriter(install.store, home=install.home)
    try:
        writer.at(time.time() - 60)
        if new_session:
            writer.session("s-vanish", "cli", model="model-a")
        for text in messages:
            writer.msg("s-vanish", "user", text)
    finally:
        writer.close()


def test_a_store_that_vanishes_fails_the_ticks_in_one_line_and_its_return_heals_them(install, tmp_path):
    store = install.store
    write(install, ["hello"], new_session=True)
    today = session_day(store)  # the session's day, never the clock's: the test may run across midnight UTC
    port = _free_port()
    env = clean_env(**install.environ(), HERMES_STATE_DB=str(store), HERMES_ASSETS_POLL_SECONDS="5")
    console = tmp_path / "console.txt"
    proc = start_make_run(env, port, console)
    try:
        wait_up(proc, port, console)
        wait_for("the first capture", lambda: messages_of(install, today) == 1, proc, console)

        away = tmp_path / "away"
        away.mkdir()
        gone_at = time.time()
        for name in os.listdir(store.parent):  # the store and its -wal/-shm, as a move of the folder would
            if name.startswith("state.db"):
                os.rename(store.parent / name, away / name)
        line = (
            f"HERMES_STATE_DB names {store}, which does not exist: check the path "
            "(unset HERMES_STATE_DB to use the Hermes home's own store)."
        )
        failed = wait_for(
            "a failed tick",
            lambda: [t for t in ticks_after(port, gone_at) if t["status"] == "FAILURE"],
            proc,
            console,
        )
        message = failed[0]["error"]["message"]
        assert message.splitlines()[0].endswith(line), message  # the line itself, not a wrapper of it
        assert "START_DATE" not in message and failed[0]["runIds"] == []

        for name in os.listdir(away):
            os.rename(away / name, store.parent / name)
        write(install, ["more", "and more"])  # what Hermes wrote meanwhile, once it is back
        back_at = time.time()
        healed = wait_for(
            "a tick after the store returned",
            lambda: [t for t in ticks_after(port, back_at) if t["status"] == "SUCCESS" and t["runIds"]],
            proc,
            console,
        )
        assert healed
        wait_for("the capture after the return", lambda: messages_of(install, today) == 3, proc, console)
        assert [t["status"] for t in ticks_after(port, back_at)].count("FAILURE") == 0
    finally:
        stop = stop_for_good(proc, env)
    assert stop.returncode == 0, stop.stdout + stop.stderr
