"""Fault 7: kill -9 of a materialization while it writes (SPEC §2 atomic replacement).

The store changes on every captured day and gains a new day, so the run that
gets killed has old files to replace and a new file to create. After each
kill every partition file must be the old one or the new one (byte for byte),
never partial; the next run must complete and write what an uninterrupted run
writes.

Two ways to kill:

- at exact points: a fork of the test process runs the materialization with
  test-side hooks on ``open``, ``os.replace`` and ``fcntl.flock`` (no hook in
  production code) that stop it at a point and let the test SIGKILL it there;
- at real points: the ``dagster`` CLI in a subprocess, SIGKILLed (with its
  process group) as its log shows it writing partitions.
"""

from __future__ import annotations

import builtins
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_assets.defs.resources import HermesWarehouse
from tests.faults import forking
from tests.faults.helpers import (
    DAY1,
    DAY4,
    REPO,
    FileProxy,
    assert_sound,
    captured_files,
    forget_instance,
    grow,
    warehouse_state,
    write_scenario,
)
from tests.support.hermes_writer import DAY_S, START_S

PAD = "the quick brown fox jumps over the lazy dog " * 40


def _build(install, tmp_path):
    """Old files of three days; then Hermes changes all three and starts a fourth.
    Returns (old state, new state, folder holding a copy of the old warehouse)."""
    with install.writer() as w:
        write_scenario(w, 3, text=PAD)
    install.run(DAY1, DAY4).ok()
    old_copy = tmp_path / "old-warehouse"
    shutil.copytree(install.warehouse, old_copy, ignore=shutil.ignore_patterns(".staging"))
    old = warehouse_state(install.warehouse)
    with install.writer() as w:
        grow(w, 3, text=PAD)
        w.at(START_S + 3 * DAY_S)
        w.msg(w.session("fourth-day", "cli", cwd="/work/repo-3"), "user", "a new day " + PAD)
    reference = tmp_path / "new-warehouse"
    shutil.copytree(old_copy, reference)
    install.run(DAY1, DAY4, defs=install.defs(warehouse=HermesWarehouse(root=str(reference)))).ok()
    new = warehouse_state(reference)
    assert len(captured_files(old)) == 9 and len(captured_files(new)) == 12
    assert len(old.files) > 9 and len(new.files) > 12  # and the analytics layer's, written by the same runs
    assert all(new.files[rel] != old.files[rel] for rel in old.files if "hermes_sessions" in rel or "gateway" in rel)
    return old, new, old_copy


def _restore(install, old_copy: Path) -> None:
    shutil.rmtree(install.warehouse)
    shutil.copytree(old_copy, install.warehouse)


def _assert_old_or_new(install, old, new) -> dict[str, str]:
    """Every partition file is its old or its new version (readable); returns rel -> which."""
    now = warehouse_state(install.warehouse)  # reads every file whole: a torn one raises
    which = {}
    for rel, digest in now.files.items():
        if digest == old.files.get(rel):
            which[rel] = "old"
        elif digest == new.files.get(rel):
            which[rel] = "new"
        else:
            raise AssertionError(f"{rel} is neither the old nor the new file: torn or wrong")
    for rel in old.files:
        assert rel in now.files, f"{rel} vanished"
    return which


# --------------------------------------------------------------------------
# exact kill points (a forked child, test-side hooks)
# --------------------------------------------------------------------------


class _HalfWriter(FileProxy):
    """A file whose first ``write`` puts half the bytes on disk, then stops at a kill point."""

    def __init__(self, f, point: str):
        super().__init__(f)
        self._point = point

    def write(self, data):
        view = memoryview(data).cast("B")
        self._f.write(view[: len(view) // 2])
        self._f.flush()
        os.fsync(self._f.fileno())
        forking.emit(self._point)
        forking.park()


def _install_hooks(point: str) -> None:
    """In the child only: stop at ``point`` (emit it, then wait for SIGKILL)."""
    real_open, real_replace, real_flock, real_link = builtins.open, os.replace, fcntl.flock, os.link
    renames = [0]

    def is_part(path) -> bool:
        return str(path).endswith("/part-0.parquet")

    def hooked_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        name = str(file)
        if "w" in mode:
            if point == "staging_half_written" and "/.staging/" in name:
                return _HalfWriter(f, point)
            if point == "temp_half_written" and "/day=" in name and name.endswith(".tmp"):
                return _HalfWriter(f, point)
        return f

    def hooked_replace(src, dst, *args, **kwargs):
        if is_part(dst):
            if point == "temp_written_before_rename" and str(src).endswith(".tmp"):
                stop()

        result = real_replace(src, dst, *args, **kwargs)
        if is_part(dst):
            renames[0] += 1
            if point == "first_file_renamed" or (point == "third_file_renamed" and renames[0] == 3):
                stop()
        return result

    def hooked_link(src, dst, *args, **kwargs):
        if point == "staged_file_before_rename" and "/.staging/" in str(src):
            stop()
        return real_link(src, dst, *args, **kwargs)

    def hooked_flock(fd, operation):
        result = real_flock(fd, operation)
        if point == "day_lock_held" and operation == fcntl.LOCK_EX:
            stop()
        return result

    def stop():
        forking.emit(point)
        forking.park()

    builtins.open, os.replace, fcntl.flock, os.link = hooked_open, hooked_replace, hooked_flock, hooked_link


KILL_POINTS = [
    "staging_half_written",  # a staged day half on disk (before any partition is touched)
    "day_lock_held",  # inside the per-day lock, before reading the old file
    "temp_half_written",  # half of a partition's temp file on disk
    "temp_written_before_rename",  # temp file complete and fsynced, not renamed yet
    "staged_file_before_rename",  # a new day's file, encoded once while staging, about to be put in place
    "first_file_renamed",  # one partition replaced, its folder not yet fsynced
    "third_file_renamed",  # some partitions new, the others still old
]


@pytest.fixture
def crash_world(install, tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_ASSETS_WORKERS", "1")  # one process: the kill points come in a fixed order
    return (install, *_build(install, tmp_path))


def test_kill_9_at_every_write_point_leaves_old_or_new_files(crash_world):
    """Protects SPEC §2 "replaced atomically": a materialization SIGKILLed at each point of
    its write path (a staged file half written, inside a day lock, a partition's temp file
    half written, complete but not renamed, a new day's staged file about to be renamed,
    just after a rename, and after three renames) leaves every partition file either its
    old or its new version, byte for byte, never partial and never missing; a killed
    holder's day lock does not block anyone; the next run completes, writes exactly the
    files of an uninterrupted run, and removes the dead writer's temp file."""
    install, old, new, old_copy = crash_world
    defs = install.definitions()
    seen = {}
    for point in KILL_POINTS:
        _restore(install, old_copy)

        def materialize(point=point):
            forget_instance()
            _install_hooks(point)
            return install.run(DAY1, DAY4, defs=defs).success

        child = forking.fork(materialize)
        reached = child.wait_event(point, timeout=60)
        child.kill9()
        assert reached, f"{point}: the run never reached the kill point (events {child.events})"
        seen[point] = sorted(set(_assert_old_or_new(install, old, new).values()))
        install.run(DAY1, DAY4).ok()
        assert warehouse_state(install.warehouse).files == new.files, point
        assert_sound(install.warehouse)
    # the points did land at different stages of the write
    assert seen["staging_half_written"] == ["old"], seen
    assert seen["third_file_renamed"] == ["new", "old"], seen


# --------------------------------------------------------------------------
# real points: the dagster CLI, SIGKILLed as it writes
# --------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("after_writes", [0, 2, 5])
def test_kill_9_of_the_dagster_cli_while_it_writes(crash_world, after_writes):
    """Protects SPEC §2 against a real kill -9: `dagster asset materialize` over a day
    range (default parallel workers) is SIGKILLed with its process group as soon as its
    log has reported `after_writes` partition writes. Every partition file is then its
    old or new version, and the next run completes with exactly the new files."""
    _kill_the_cli_after(crash_world, after_writes)


@pytest.fixture
def crash_world_uri(install, tmp_path, monkeypatch):
    """:func:`crash_world` with the same warehouse folder named by a ``file://`` URI: every
    write goes through pyarrow's filesystem layer (temp file + ``FileSystem.move``)."""
    uri = {"HERMES_ASSETS_WAREHOUSE": install.warehouse.as_uri(), "HERMES_ASSETS_SPOOL": str(tmp_path / "spool")}
    for name, value in uri.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERMES_ASSETS_WORKERS", "1")
    return (install, *_build(install, tmp_path)), uri


@pytest.mark.e2e
def test_kill_9_of_the_dagster_cli_writing_a_uri_warehouse(crash_world_uri):
    """The same real kill -9 with ``HERMES_ASSETS_WAREHOUSE=file:///…`` (the object-store
    code path): old or new files only, and the next run writes exactly the new files."""
    world, uri = crash_world_uri
    _kill_the_cli_after(world, 2, uri)


def _kill_the_cli_after(world, after_writes: int, settings: dict | None = None) -> None:
    install, old, new, old_copy = world
    _restore(install, old_copy)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "DAGSTER_"))}
    # at debug: each day written is a line of its own (the console prints warnings alone otherwise)
    env.update(install.environ(), HERMES_ASSETS_LOG_FORMAT="json", PYTHONUNBUFFERED="1", **(settings or {}))
    env["HERMES_ASSETS_LOG_LEVEL"] = "debug"
    dagster = str(Path(sys.executable).with_name("dagster"))
    proc = subprocess.Popen(
        [
            dagster,
            "asset",
            "materialize",
            "-m",
            "hermes_assets.definitions",
            "--select",
            "*",
            "--partition-range",
            f"{DAY1}...{DAY4}",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    writes, started, deadline = 0, False, time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if (writes >= after_writes > 0) or (after_writes == 0 and started):
                break
            line = proc.stdout.readline()
            if not line:
                break
            started = started or b"STEP_START" in line
            if b'"hermes.warehouse.day_written"' in line and b'"changed": true' in line:
                writes += 1
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(30)
    assert writes >= after_writes, f"the run ended after {writes} writes"
    _assert_old_or_new(install, old, new)
    install.run(DAY1, DAY4).ok()
    assert warehouse_state(install.warehouse).files == new.files
    assert_sound(install.warehouse)
