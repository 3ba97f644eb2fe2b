"""``make run`` and ``make stop``: one Dagster per folder, on a port that is free, stopped whole.

``python -m hermes_assets.dev [dg dev options]`` checks, before anything
starts, and refuses with one line and exit status 2 (:data:`EXIT_REFUSED`):

- a bad setting (``defs/settings.py``);
- a host the warehouse refuses: its label is another installation's, or one of its
  stores is captured there under another label (``settings.check_host``);
- an instance already running for this ``DAGSTER_HOME`` (its PID and port are
  named, and ``make stop``): two daemons on one instance would both tick the
  sensors, and the second webserver could not serve anyway;
- a port another program holds (named when this user may see it, by its whole
  command line, and by the folder it serves when it is a Dagster of another folder;
  a free port is suggested: ``make run PORT=3001``).

It then becomes ``dg dev`` (its services at warning: every sensor and automation tick
is a line of theirs at info; at ``HERMES_ASSETS_LOG_LEVEL=debug``, or with a ``--log-level``
of your own, as asked), and a detached process says, in one line, when the UI answers.
``dg dev`` runs in this process (``exec``: Ctrl-C and signals
reach it directly) holding an exclusive lock on
``$DAGSTER_HOME/.hermes_assets-dev.pid``, which names its PID and port. The
lock, not the file's presence, says an instance runs: it goes when the
process goes, however it ends, and a start that is refused never writes the
file, so ``make stop`` cannot lose track of the instance that runs.
``python -m hermes_assets.dev --check [options]`` runs the checks alone and
prints a refusal on stdout (``make run`` reads it there, so a refusal is make's
own one line, and an event the settings log, such as redaction being off, is
not mistaken for one).

``python -m hermes_assets.dev --stop`` stops that instance whole: SIGTERM to
``dg dev``, which shuts down its webserver, daemon and code server; it returns
when every one of those processes has exited (any left after the grace
period are terminated, then killed).

Why not plain ``dg dev``: Dagster's dev command stops on SIGTERM by treating it
like Ctrl-C, but a shell that starts a command in the background (``make run &``
in a script) starts it with Ctrl-C *ignored*, and Dagster then ignores SIGTERM
too. Resetting both signals to their defaults before ``exec`` makes a
``make run`` started from a script stoppable like one started from a terminal.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hermes_assets import proc_tree
from hermes_assets.defs import settings
from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.storage.object_store import UNREACHABLE

PID_FILE = ".hermes_assets-dev.pid"
#: the exit status of a refused start (as a bad setting's)
EXIT_REFUSED = 2
#: Dagster's webserver defaults
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 3000
#: how long ``dg dev`` has to shut its services down, then what is left gets SIGTERM, then SIGKILL
STOP_TIMEOUT_S = 60
LEFTOVER_GRACE_S = 10


class Refused(Exception):
    """A start that must not go ahead; the message is the one line a person sees."""


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or ".").resolve()


def pid_file() -> Path:
    return dagster_home() / PID_FILE


def _dagster(cmd: list[str]) -> bool:
    """Whether a command is one of Dagster's servers (its webserver, ``dg dev``, ``dagster dev``)."""
    return _is(cmd, "dagster_webserver", "dagster-webserver") or _dev(cmd)


def _holder(pid: int) -> str:
    """``pid N: <its whole command line>``, and the folder it serves when it is a Dagster of another folder."""
    line = f"pid {pid}: {proc_tree.command(pid)}"
    if not _dagster(proc_tree.cmdline(pid)):
        return line
    home = _home_of(pid)
    if home is None:
        try:
            home = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            return f"{line}, a Dagster"
    return f"{line}, the Dagster of {home}"


# --------------------------------------------------------------------------
# the instance of this folder: the holder of the pid file's lock, else a daemon serving it
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Running:
    pid: int
    port: str


def running() -> Running | None:
    """The Dagster running for this folder, or None: whoever holds the pid file's lock (a
    ``make run``), else a ``dg dev`` / ``dagster dev`` started by hand on this folder."""
    path = pid_file()
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return _started_by_hand()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _recorded(path)
    finally:
        os.close(fd)
    return _started_by_hand()  # nobody holds the lock: what the file names has ended


def _is(cmd: list[str], module: str, script: str) -> bool:
    return any(part == module or os.path.basename(part) == script for part in cmd[:3])


def _dev(cmd: list[str]) -> bool:
    """``dg dev`` or ``dagster dev`` (run as a script by its venv's python, or directly)."""
    return "dev" in cmd[:3] and any(os.path.basename(part) in ("dg", "dagster") for part in cmd[:2])


def _home_of(pid: int) -> Path | None:
    """The ``DAGSTER_HOME`` process ``pid`` was started with (relative to its working folder)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    for entry in env:
        if entry.startswith(b"DAGSTER_HOME="):
            value = entry.split(b"=", 1)[1].decode(errors="replace")
            return Path(cwd, value).resolve() if value else None
    return None


def _started_by_hand() -> Running | None:
    """A Dagster daemon of this folder that no ``make run`` started: the ``dg dev`` / ``dagster dev``
    above it (or the daemon itself), and the port of the webserver beside it."""
    home = dagster_home()
    for pid in proc_tree.all_pids():
        if pid == os.getpid() or not _is(proc_tree.cmdline(pid), "dagster._daemon", "dagster-daemon"):
            continue
        if _home_of(pid) != home:
            continue
        stat = proc_tree.stat_of(pid)
        root = stat[1] if stat is not None and _dev(proc_tree.cmdline(stat[1])) else pid
        port = "?"
        for proc in proc_tree.descendants({p for p in [proc_tree.proc_of(root)] if p is not None}):
            cmd = proc_tree.cmdline(proc.pid)
            if _is(cmd, "dagster_webserver", "dagster-webserver"):
                port = _option(cmd, ("--port", "-p"), str(DEFAULT_PORT))
        return Running(root, port)
    return None


def _recorded(path: Path) -> Running:
    words = path.read_text().split()
    pid = int(words[0]) if words and words[0].isdigit() else 0
    return Running(pid, words[1] if len(words) > 1 else "?")


def _lock(port: int) -> int:
    """Take the pid file's lock for this process, recording its pid and port; the descriptor
    stays open across ``exec`` (the lock lives as long as ``dg dev``). Refused when held."""
    path = pid_file()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Refused(_already(_recorded(path))) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {port}\n".encode())
    os.set_inheritable(fd, True)
    return fd


def _already(instance: Running) -> str:
    return (
        f"Dagster is already running for {dagster_home()} (pid {instance.pid}, port {instance.port}: "
        f"http://127.0.0.1:{instance.port}); `make stop` stops it"
    )


# --------------------------------------------------------------------------
# the port
# --------------------------------------------------------------------------


def _taken(host: str, port: int) -> bool:
    """Whether the webserver could not listen on ``host:port`` (bound by someone else)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False  # a host we cannot resolve: the webserver will say so
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the webserver does
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


def _listener(port: int) -> str | None:
    """``pid N (command)`` of the process listening on ``port``, when this user may see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    for pid in proc_tree.all_pids() if inodes else []:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return _holder(pid)
            except OSError:
                continue
    return None


def _free_port_after(host: str, port: int) -> int:
    for candidate in range(port + 1, min(port + 100, 65536)):
        if not _taken(host, candidate):
            return candidate
    return port + 1


def _port_line(host: str, port: int) -> str:
    holder = _listener(port)
    by = f" (by {holder})" if holder else ""
    return (
        f"port {port} is taken{by}: choose another, e.g. `make run PORT={_free_port_after(host, port)}` "
        f"(or stop what holds it)"
    )


# --------------------------------------------------------------------------
# start, check, stop
# --------------------------------------------------------------------------


def _option(args: list[str], names: tuple[str, ...], default: str) -> str:
    """The value of ``dg dev`` option ``names`` in ``args`` (``--port 3001`` or ``--port=3001``)."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return default


def address(args: list[str]) -> tuple[str, int]:
    """The webserver's host and port ``dg dev`` will use with ``args``."""
    host = _option(args, ("--host", "-h"), DEFAULT_HOST)
    port = _option(args, ("--port", "-p"), str(DEFAULT_PORT))
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise Refused(f"PORT={port} is not a port number (1-65535), e.g. `make run PORT=3001`")
    return host, int(port)


def check(args: list[str]) -> tuple[str, int]:
    """Every reason not to start, as :class:`Refused` (one line): the settings, an instance of
    this folder already running, a taken port. Returns the webserver's host and port."""
    try:
        loaded = settings.check()
        with contextlib.suppress(*UNREACHABLE):  # a warehouse not reachable now: the runs name it
            settings.check_host(loaded)  # this host's label or a store another host's: refused
    except ConfigurationError as exc:
        raise Refused(str(exc)) from None
    host, port = address(args)
    instance = running()
    if instance is not None:
        raise Refused(_already(instance))
    if _taken(host, port):
        raise Refused(_port_line(host, port))
    return host, port


def dev_args(args: list[str], loaded: settings.Settings) -> list[str]:
    """``dg dev``'s options: ``args``, with Dagster's services (its daemon, webserver and code
    server) at warning unless a ``--log-level`` is given: every sensor and automation tick is a
    line of theirs at info. At ``HERMES_ASSETS_LOG_LEVEL=debug``, at info."""
    if _option(args, ("--log-level",), ""):
        return list(args)
    return [*args, "--log-level", "info" if loaded.log_level == "debug" else "warning"]


def start(args: list[str]) -> int:
    try:
        host, port = check(args)
        loaded = settings.load()  # checked: it loads
        _lock(port)
        if _taken(host, port):  # taken between the check and the lock
            raise Refused(_port_line(host, port))
    except Refused as refused:
        print(refused, file=sys.stderr, flush=True)
        return EXIT_REFUSED
    dg = str(Path(sys.executable).with_name("dg"))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)  # an ignored signal stays ignored across exec: undo it
    # the automation reads each updated day's materialization time, up to 100 days a tick by default,
    # and warns for every asset and tick past that: a first capture of a long history updates every day
    os.environ.setdefault(TIMESTAMP_FETCH_VARIABLE, str(TIMESTAMP_FETCH_DAYS))
    _announce(host, port)
    os.execv(dg, [dg, "dev", *dev_args(args, loaded)])


# --------------------------------------------------------------------------
# the line that says the UI is up (Dagster's own says it at info, which make run keeps quiet)
# --------------------------------------------------------------------------

#: Dagster's variable of how many updated partitions of an asset a tick of the automation reads the
#: time of (then one warning per asset and tick), and the days this project lets it read: three years
TIMESTAMP_FETCH_VARIABLE = "DAGSTER_MAX_PARTITIONS_FOR_DA_TIMESTAMP_FETCH"
TIMESTAMP_FETCH_DAYS = 1100
#: how long the UI may take to come up before the line gives up
ANNOUNCE_WITHIN_S = 600


def _announce(host: str, port: int) -> None:
    """Start, detached, the process that says once the UI answers (:func:`announce`): this process
    becomes ``dg dev`` right after, and the announcer is no child of it."""
    spawned = subprocess.Popen(
        [sys.executable, "-m", "hermes_assets.dev", "--announce", host, str(port), str(os.getpid())],
        stdin=subprocess.DEVNULL,
    )
    spawned.wait()  # it forks the announcer and returns at once


def announce(host: str, port: int, parent: int) -> int:
    """Wait until the webserver answers on ``host:port``, then say so in one line; give up when
    ``dg dev`` (``parent``) has ended. Runs in a grandchild of ``make run`` (its parent returned)."""
    if os.fork():
        return 0
    os.setsid()  # no child of dg dev's group: Ctrl-C is dg dev's to handle; its end ends this wait
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"
    deadline = time.monotonic() + ANNOUNCE_WITHIN_S
    dg_dev = proc_tree.proc_of(parent)
    while time.monotonic() < deadline and dg_dev is not None and proc_tree.alive(dg_dev):
        try:
            with urllib.request.urlopen(f"{url}/server_info", timeout=5) as answer:
                if answer.status == 200:
                    print(
                        f"hermes_assets: the Dagster UI is up on {url} (Ctrl-C or `make stop` stops it)",
                        file=sys.stderr,
                        flush=True,
                    )
                    break
        except OSError:
            pass
        time.sleep(0.5)
    os._exit(0)


def stop() -> int:
    instance = running()
    if instance is None:
        print(f"nothing to stop: no `make run` is running for {dagster_home()}")
        return 0
    root = proc_tree.proc_of(instance.pid)
    if root is None or not proc_tree.alive(root):  # the lock is held, but not by the process it names
        print(f"the lock of {pid_file()} is held, but pid {instance.pid} is not running", file=sys.stderr)
        return 1
    tree = {root} | proc_tree.descendants({root})  # webserver, daemon, code server: tracked even once orphaned
    os.kill(root.pid, signal.SIGTERM)
    left = proc_tree.wait_gone(tree, STOP_TIMEOUT_S)
    forced = len(left)
    if left:  # dg dev did not take its services down in time: what is left goes by force
        proc_tree.send_signal(left, signal.SIGTERM)
        left = proc_tree.wait_gone(left, LEFTOVER_GRACE_S)
        proc_tree.send_signal(left, signal.SIGKILL)
        left = proc_tree.wait_gone(left, 5)
    if left:
        print(f"dg dev (pid {root.pid}) left processes running: {sorted(p.pid for p in left)}", file=sys.stderr)
        return 1
    pid_file().unlink(missing_ok=True)
    late = f" ({forced} did not stop within {STOP_TIMEOUT_S} s and were terminated)" if forced else ""
    print(f"stopped dg dev (pid {root.pid}, port {instance.port}) and its {len(tree) - 1} processes{late}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--stop"]:
        return stop()
    if argv[:1] == ["--announce"]:
        return announce(argv[1], int(argv[2]), int(argv[3]))
    if argv[:1] == ["--check"]:  # the refusal alone on stdout (what make reads); events stay on stderr
        try:
            check(argv[1:])
        except Refused as refused:
            print(str(refused).rstrip("."), flush=True)  # make ends the line with ".  Stop."
            return EXIT_REFUSED
        return 0
    return start(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
