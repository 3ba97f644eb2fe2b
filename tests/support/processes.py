"""Pids of processes in a known state, for tests of what a dead or live writer leaves behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from hermes_assets.lib.storage.local_files import process_state


def dead_pid() -> int:
    """A pid no process of this host can have: above Linux's largest pid (``PID_MAX_LIMIT``,
    2**22 on 64-bit kernels), so ``os.kill(pid, 0)`` finds nothing, and no process is started."""
    return 2**22 + 1


def zombie() -> subprocess.Popen:
    """A child that has exited and is not yet reaped (``wait()`` it when done): a zombie, whose pid
    ``os.kill(pid, 0)`` still finds."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process_state(child.pid) == "Z":
            return child
        time.sleep(0.01)
    os.kill(child.pid, 9)
    raise AssertionError(f"child {child.pid} did not become a zombie in 30 s")
