"""Forked copies of the test process: run code as an unprivileged user, or up to a point
where the test kills it with SIGKILL.

A fork inherits every module already imported, which matters twice here: the
child that drops to uid 65534 cannot read Python's own files (they live under
a 0700 home), and a child killed at a kill point starts in milliseconds, not
the seconds a fresh interpreter importing Dagster takes.

Protocol on one pipe: ``EVENT <name>`` lines while running (see :func:`emit`),
then one ``RESULT <json>`` line. The child leads its own session, so
:meth:`Child.kill9` also kills any worker processes it forked.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time
import traceback
from collections.abc import Callable

NOBODY = 65534

_event_fd: int | None = None


def emit(name: str) -> None:
    """From inside a child (or a process it forked): report reaching ``name``."""
    if _event_fd is not None:
        os.write(_event_fd, f"EVENT {name}\n".encode())


def park() -> None:
    """Wait to be killed (a kill point reached)."""
    while True:
        time.sleep(3600)


class Child:
    def __init__(self, pid: int, fd: int):
        self.pid, self.fd = pid, fd
        self._buffer = b""
        self._result: dict | None = None
        self.events: list[str] = []

    def _line(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def wait_event(self, name: str, timeout: float = 60) -> bool:
        """Read events until ``name`` (True) or the child's result or the timeout (False)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._line(max(0.0, deadline - time.monotonic()))
            if line is None:
                return False
            if line.startswith("RESULT "):
                self._result = json.loads(line[7:])
                return False
            self.events.append(line[6:])
            if line[6:] == name:
                return True

    def result(self, timeout: float = 120) -> dict:
        """The child's return value (``{"ok": True, "value": ...}`` or ``{"ok": False, "error": ...}``)."""
        deadline = time.monotonic() + timeout
        while self._result is None:
            line = self._line(max(0.0, deadline - time.monotonic()))
            if line is None:
                self.kill9()
                raise AssertionError(f"child {self.pid} gave no result within {timeout} s (events {self.events})")
            if line.startswith("RESULT "):
                self._result = json.loads(line[7:])
            else:
                self.events.append(line[6:])
        self._reap()
        return self._result

    def kill9(self) -> None:
        """SIGKILL the child and everything it started (its session)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._reap()

    def _reap(self) -> None:
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def fork(fn: Callable[[], object], *, nobody: bool = False) -> Child:
    """Run ``fn()`` in a forked child (as uid/gid 65534 when ``nobody``); its return value
    must be JSON-serializable."""
    global _event_fd
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        return Child(pid, read_fd)
    # the child: never returns into pytest
    try:
        os.close(read_fd)
        os.setsid()
        _event_fd = write_fd
        if nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        payload = {"ok": True, "value": fn()}
    except BaseException as exc:
        payload = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "kind": getattr(exc, "error_kind", None),
            "traceback": traceback.format_exc()[-3000:],
        }
    try:
        os.write(write_fd, ("RESULT " + json.dumps(payload, default=str) + "\n").encode())
    finally:
        os._exit(0)
