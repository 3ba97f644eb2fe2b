"""This user's processes as Linux's ``/proc`` shows them: a pid and its start time name one
process even after its pid is reused; a process's descendants, its command line, and how to
wait for a tree of processes to be gone or signal it (``make stop``, :mod:`hermes_assets.dev`)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    pid: int
    started: int  # clock ticks after boot (/proc/<pid>/stat field 22)


def stat_of(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time) of ``pid``, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[19])


def proc_of(pid: int) -> Proc | None:
    stat = stat_of(pid)
    return None if stat is None else Proc(pid, stat[2])


def alive(proc: Proc) -> bool:
    """Whether ``proc`` still runs (a zombie has exited: only its parent's wait is missing)."""
    stat = stat_of(proc.pid)
    return stat is not None and stat[2] == proc.started and stat[0] not in ("Z", "X")


def all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def descendants(roots: set[Proc]) -> set[Proc]:
    """Every live process below ``roots`` (children, their children ...)."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        stat = stat_of(pid)
        if stat is not None:
            children.setdefault(stat[1], []).append(pid)
    found: set[Proc] = set()
    todo = [p.pid for p in roots if alive(p)]
    while todo:
        for child in children.get(todo.pop(), []):
            proc = proc_of(child)
            if proc is not None and proc not in found and alive(proc):
                found.add(proc)
                todo.append(child)
    return found


def cmdline(pid: int) -> list[str]:
    try:
        return [p.decode(errors="replace") for p in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if p]
    except OSError:
        return []


def command(pid: int) -> str:
    """``pid``'s whole command line as ``ps`` shows it, its program by name."""
    parts = cmdline(pid)
    return " ".join([os.path.basename(parts[0]), *parts[1:]]) if parts else "?"


def wait_gone(procs: set[Proc], timeout_s: float) -> set[Proc]:
    """Wait until none of ``procs`` (and of the processes they start meanwhile) runs, for at most
    ``timeout_s``; returns those still running."""
    deadline = time.monotonic() + timeout_s
    while True:
        procs = {p for p in procs | descendants(procs) if alive(p)}
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(0.2)


def send_signal(procs: set[Proc], sig: signal.Signals) -> None:
    for proc in procs:
        if alive(proc):
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass
