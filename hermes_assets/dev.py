"""``make run`` and ``make stop``: Dagster on this folder, started and stopped cleanly.

``python -m hermes_assets.dev [dg dev options]`` checks the settings first
(one line and exit status 2 on a bad one, before Dagster starts), then
becomes ``dg dev`` (``exec``: same process, so Ctrl-C and signals reach it
directly) and records its pid in ``$DAGSTER_HOME/.hermes_assets-dev.pid``.

``python -m hermes_assets.dev --stop`` sends that process SIGTERM and waits
for it: ``dg dev`` shuts its webserver, daemon and code server down and exits.

Why not plain ``dg dev``: Dagster's dev command stops on SIGTERM by treating it
like Ctrl-C, but a shell that starts a command in the background (``make run &``
in a script) starts it with Ctrl-C *ignored*, and Dagster then ignores SIGTERM
too. Resetting both signals to their defaults before ``exec`` makes a
``make run`` started from a script stoppable like one started from a terminal.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from hermes_assets.defs import settings
from hermes_assets.lib.errors import ConfigurationError

PID_FILE = ".hermes_assets-dev.pid"
STOP_TIMEOUT_S = 60


def pid_file() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or ".").resolve() / PID_FILE


def start(args: list[str]) -> int:
    try:
        settings.check()
    except ConfigurationError as exc:
        print(exc, file=sys.stderr, flush=True)
        return 2
    dg = str(Path(sys.executable).with_name("dg"))
    pid_file().write_text(f"{os.getpid()}\n")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)  # an ignored signal stays ignored across exec: undo it
    os.execv(dg, [dg, "dev", *args])


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live ``dg dev`` (not a stale pid file naming another process)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(b"/dg") or part == b"dg" for part in cmdline) and b"dev" in cmdline


def stop() -> int:
    path = pid_file()
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        print(f"nothing to stop: no `make run` recorded in {path.parent}")
        return 0
    if not _running(pid):
        path.unlink(missing_ok=True)
        print(f"nothing to stop: process {pid} of {path} is not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if _running(pid):
        print(f"dg dev (pid {pid}) did not stop within {STOP_TIMEOUT_S} s", file=sys.stderr)
        return 1
    path.unlink(missing_ok=True)
    print(f"stopped dg dev (pid {pid})")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--stop"]:
        return stop()
    return start(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
