"""``make run``'s checks, in process (``hermes_assets/dev.py``; the real ``make run`` twice, a busy
port and ``make stop`` are in ``tests/e2e/test_make_run.py``).

- The webserver's address is read from ``dg dev``'s own options, and a port that is no port is
  one line.
- The instance of a folder is whoever holds the lock of its pid file: held, it is named (pid and
  port); released (its process ended, however), nothing runs, whatever the file still says.
- A port someone listens on is refused, naming the listener and a free port to use instead.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from hermes_assets import dev


@pytest.fixture
def home(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("HERMES_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "no-hermes"))
    return tmp_path


@pytest.mark.parametrize(
    "args, address",
    [
        ([], ("127.0.0.1", 3000)),
        (["--port", "3001"], ("127.0.0.1", 3001)),
        (["-p=3002", "--host", "0.0.0.0"], ("0.0.0.0", 3002)),
    ],
)
def test_the_address_is_dg_devs_own_options(args, address):
    assert dev.address(args) == address


@pytest.mark.parametrize("port", ["abc", "0", "70000"])
def test_a_port_that_is_no_port_is_one_line(port):
    with pytest.raises(dev.Refused, match=rf"^PORT={port} is not a port number \(1-65535\)"):
        dev.address(["--port", port])


def test_the_instance_is_whoever_holds_the_lock(home):
    assert dev.running() is None
    fd = dev._lock(3005)
    try:
        assert dev.running() == dev.Running(os.getpid(), "3005")
        with pytest.raises(dev.Refused) as refused:
            dev.check(["--port", "3005"])
        assert str(refused.value) == (
            f"Dagster is already running for {home} (pid {os.getpid()}, port 3005: http://127.0.0.1:3005); "
            "`make stop` stops it"
        )
        with pytest.raises(dev.Refused):
            dev._lock(3006)  # a second start: refused, the record untouched
        assert dev.running() == dev.Running(os.getpid(), "3005")
    finally:
        os.close(fd)
    assert dev.running() is None  # released: the file still names the pid, nothing runs
    assert (home / dev.PID_FILE).exists()
    assert oct((home / dev.PID_FILE).stat().st_mode & 0o777) == "0o600"


def test_a_taken_port_is_refused_naming_who_holds_it(home):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(dev.Refused) as refused:
            dev.check(["--port", str(port)])
    line = str(refused.value)
    assert line.startswith(f"port {port} is taken (by pid {os.getpid()}: "), line
    (suggested,) = re.findall(r"`make run PORT=(\d+)`", line)
    assert int(suggested) > port and "\n" not in line


def test_a_bad_setting_comes_first(home, monkeypatch):
    monkeypatch.setenv("HERMES_STATE_DB", str(home / "typo" / "state.db"))
    with pytest.raises(dev.Refused, match=r"^HERMES_STATE_DB names .*typo/state\.db, which does not exist"):
        dev.check([])


def test_the_check_prints_a_refusal_alone_on_stdout(home, monkeypatch, capsys):
    """``make run`` reads the refusal from stdout: a warning the settings log (redaction off) is not
    one, and a refusal is the line itself."""
    monkeypatch.setenv("HERMES_ASSETS_REDACT_SECRETS", "off")
    assert dev.main(["--check", "--port", "0"]) == dev.EXIT_REFUSED  # port 0: no port
    assert capsys.readouterr().out == "PORT=0 is not a port number (1-65535), e.g. `make run PORT=3001`\n"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    assert dev.main(["--check", "--port", str(free)]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_a_port_held_by_a_dagster_of_another_folder_names_its_whole_command_and_folder(home, tmp_path):
    """The holder's whole command line (never cut mid-word), and, a Dagster webserver, its folder."""
    other = tmp_path / "another-clone"
    other.mkdir()
    script = tmp_path / "bin" / "dagster-webserver"  # what Dagster's webserver runs as, by its script's name
    script.parent.mkdir()
    script.write_text(
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True)\n"
        "time.sleep(120)\n"
    )
    long_option = "--workspace=" + "/very/long/path/of/a/temporary/workspace" * 3 + "/workspace.yaml"
    holder = subprocess.Popen(
        [sys.executable, str(script), "--port", "0", long_option],
        env={**os.environ, "DAGSTER_HOME": str(other)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(holder.stdout.readline())
        with pytest.raises(dev.Refused) as refused:
            dev.check(["--port", str(port)])
    finally:
        holder.kill()
        holder.wait()
    line = str(refused.value)
    assert f"(by pid {holder.pid}: python" in line and f"{script} --port 0 {long_option}, " in line, line
    assert f"the Dagster of {other})" in line and "\n" not in line


@pytest.mark.parametrize(
    "args, level, expected",
    [
        ([], "info", ["--log-level", "warning"]),  # Dagster's services quiet: no line per tick
        ([], "debug", ["--log-level", "info"]),
        (["--log-level", "debug"], "info", ["--log-level", "debug"]),  # one's own choice stands
    ],
)
def test_dagsters_services_are_at_warning_unless_asked(home, monkeypatch, args, level, expected):
    monkeypatch.setenv("HERMES_ASSETS_LOG_LEVEL", level)
    from hermes_assets.defs import settings

    assert dev.dev_args(["--port", "3001", *args], settings.load()) == ["--port", "3001", *expected]
