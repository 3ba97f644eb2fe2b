"""Fault 8: the disk fills up while a run writes (SPEC §2 atomic replacement).

The warehouse lives on a 1 MiB tmpfs (``mount -t tmpfs -o size=1m``, as root).
Where mounting is not allowed, the same limit is enforced by wrapping ``open``
so writes under the warehouse raise ENOSPC past 1 MiB (what the kernel does).
A new message of incompressible text then makes a day's files too big.
"""

from __future__ import annotations

import base64
import builtins
import errno
import os
import shutil
import subprocess

import pytest

from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib.storage import local_storage
from tests.faults.helpers import (
    DAY1,
    DAY2,
    GATEWAY,
    MESSAGES,
    SESSIONS,
    FileProxy,
    assert_nothing_lost,
    assert_sound,
    assert_untouched,
    warehouse_state,
    write_scenario,
)
from tests.support.hosts import HOST_DIR

LIMIT = 1024 * 1024


class _QuotaFile(FileProxy):
    """A file opened for writing under the quota: past the limit, write what fits and raise ENOSPC."""

    def __init__(self, f, disk: SmallDisk):
        super().__init__(f)
        self._disk = disk

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        room = max(0, self._disk.limit - self._disk.used())
        if len(view) > room:
            self._f.write(view[:room])
            self._f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._f.write(view)


class SmallDisk:
    """The warehouse on a filesystem of ``LIMIT`` bytes: a real tmpfs, else an ``open`` quota."""

    def __init__(self, root, monkeypatch):
        self.root, self.limit, self.mounted = root, LIMIT, False
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0 and shutil.which("mount"):
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)], capture_output=True)
            self.mounted = done.returncode == 0
        if not self.mounted:
            real_open = builtins.open

            def quota_open(file, mode="r", *args, **kwargs):
                f = real_open(file, mode, *args, **kwargs)
                inside = isinstance(file, (str, os.PathLike)) and os.path.abspath(file).startswith(str(root) + os.sep)
                return _QuotaFile(f, self) if inside and any(c in mode for c in "wax+") else f

            monkeypatch.setattr(builtins, "open", quota_open)

    def used(self) -> int:
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())

    def grow(self) -> None:
        """The user frees space (here: the filesystem grows to 64 MiB)."""
        if self.mounted:
            subprocess.run(["mount", "-o", "remount,size=64m", str(self.root)], check=True)
        else:
            self.limit = 64 * LIMIT

    def close(self) -> None:
        if self.mounted:
            if subprocess.run(["umount", str(self.root)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(self.root)], capture_output=True)
            self.mounted = False


@pytest.fixture
def small_disk(install, monkeypatch):
    disk = SmallDisk(install.warehouse, monkeypatch)
    try:
        yield disk
    finally:
        disk.close()


#: incompressible text per case: 1.5 MB no longer fits even staged; 250 kB stages (the day's
#: staged tables hold it three times, ~750 kB: content and content_text of hermes_messages,
#: content_text of the canonical rows), but then the hermes_messages file (content and
#: content_text, zstd) does not fit beside them: merged by the stage step (the day's file is
#: read once, there) it fails while staging; on a filesystem without hard links, where the
#: write step merges, it fails while replacing the partition (200 kB there: the small disk also
#: holds the analytics' files, and 160-235 kB is the window where staging fits and the write does not)
SIZES = {"while_staging": 1_500_000, "while_staging_a_merged_day": 250_000, "while_replacing_a_partition": 200_000}


@pytest.mark.parametrize("when", sorted(SIZES))
def test_disk_full_fails_clearly_and_leaves_the_old_file(install, small_disk, tmp_path, monkeypatch, when):
    """Protects SPEC §2's atomic replacement when the disk fills: a run whose new rows do
    not fit fails with ENOSPC, and
    - full while staging: no partition file changes at all;
    - full while replacing a partition: the error names that partition and says the old
      file is unchanged; that file keeps its old bytes, its temp file is removed, and
      every other file is either its old version or the correct new one, never partial.
    After space is freed, the next run succeeds with the same files as a run that never
    hit the limit, and nothing captured is lost."""
    with install.writer() as w:
        write_scenario(w, 2)
    install.run(DAY1, DAY2).ok()
    before = install.state()
    with install.writer() as w:
        w.msg("tui-0", "assistant", base64.b64encode(os.urandom(SIZES[when] * 3 // 4)).decode())
    # what a run with room writes (from a copy of the old files, off the small disk)
    reference = tmp_path / "reference"
    shutil.copytree(install.warehouse, reference, ignore=shutil.ignore_patterns(".lock", ".read_at", ".staging"))
    install.run(DAY1, DAY2, defs=install.defs(warehouse=HermesWarehouse(root=str(reference)))).ok()
    new = warehouse_state(reference)

    if when == "while_replacing_a_partition":  # no pin of the old file: the write step merges (SPEC §2 replace)
        monkeypatch.setattr(local_storage.LocalStorage, "read_pinned", lambda self, path, pin_as: None)
    out = install.run(DAY1, DAY2)
    assert not out.success
    failures = out.failures
    assert failures and all(f.cls_name == "OSError" and "No space left on device" in f.message for f in failures), (
        failures
    )
    if when.startswith("while_staging"):
        assert any("while staging" in f.message and "no partition file was changed" in f.message for f in failures), (
            failures
        )
        assert_untouched(install.warehouse, before)
    else:
        messages = f"{MESSAGES}/day={DAY1}/{HOST_DIR}/part-0.parquet"
        assert any(
            str(install.warehouse / messages) in f.message and "previous file is unchanged" in f.message
            for f in failures
        ), failures
        now = install.state()
        assert now.files[messages] == before.files[messages]
        for rel, digest in now.files.items():
            assert digest in (before.files.get(rel), new.files.get(rel)), rel
        assert_sound(install.warehouse)
        # a day's files are written sessions, messages, canonical rows: the first one made it
        sessions = f"{SESSIONS}/day={DAY1}/{HOST_DIR}/part-0.parquet"
        assert now.files[sessions] == new.files[sessions]

    small_disk.grow()
    install.run(DAY1, DAY2).ok()
    after = install.state()
    assert after.files == new.files
    assert_nothing_lost(before, after, datasets=(GATEWAY, MESSAGES, SESSIONS))
    assert_sound(install.warehouse)
