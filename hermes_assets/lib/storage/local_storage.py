"""A warehouse in a local folder (a plain path), and what every storage on this machine's disk
shares: POSIX locks beside the data, fsync and rename, the modes on everything, hard-link pins
and links for exclusive creates (:mod:`.interface` says what each operation promises)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs

from hermes_assets.lib.storage import local_files
from hermes_assets.lib.storage.interface import LOCK_FILE, FileStamp, Pin
from hermes_assets.lib.storage.local_files import PRIVATE, FileModes


class LocalStorage:
    """A local folder: POSIX locks beside the data, fsync and rename, modes on everything."""

    local = True
    cheap_listing = True

    def __init__(self, root: str, *, modes: FileModes = PRIVATE, owner: str = ""):
        self.root = self.uri = os.path.abspath(os.path.expanduser(root))
        self.modes = modes
        self.owner = owner
        self.fs = pafs.LocalFileSystem()
        #: the folders this storage gave their modes (a storage per step): not given them again
        #: unless made again (:func:`local_files.make_dirs`)
        self.folders_done: set[tuple] = set()

    @property
    def spool(self) -> str:
        return self.root

    def make_spool_dirs(self, folder: str) -> None:
        local_files.make_dirs(folder, self.modes, self.root)

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def location(self, path: str) -> str:
        return path

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def folders_holding(self, base: str, name: str) -> list[str]:
        if not os.path.isdir(base):
            return []
        return [d for d in os.listdir(base) if os.path.exists(os.path.join(base, d, name))]

    def files_under(self, base: str, depth: int, name: str | None = None) -> list[FileStamp]:
        return local_files_under(base, depth, name)

    def open_input(self, path: str) -> pa.NativeFile:
        return pa.OSFile(path)

    def read_bytes(self, path: str) -> pa.Buffer | None:
        return local_files.read_bytes(path)

    def read_pinned(self, path: str, pin_as: str) -> tuple[pa.Buffer, Pin] | None:
        return read_pinned_locally(path, pin_as)

    def still_current(self, path: str, pin: Pin) -> bool:
        return local_still_current(path, pin)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        folder = os.path.join(self.root, key)
        local_files.make_dirs(folder, self.modes, self.root, self.folders_done)
        with local_files.locked(os.path.join(folder, LOCK_FILE), self.modes.file):
            yield

    def put(self, path: str, data: pa.Buffer, *, durable: bool = True) -> None:
        local_files.atomic_write(path, data, self.modes.file, fsync=durable, owner=self.owner)

    def put_file(self, path: str, source: str) -> None:
        local_files.link_into_place(source, path, self.modes.file, self.owner)

    def read_versioned(self, path: str) -> tuple[pa.Buffer, str] | None:
        return local_files.read_versioned(path)

    def put_if(self, path: str, data: pa.Buffer, expected: str | None) -> bool:
        return put_if_locally(path, data, expected, self.modes, self.root, self.owner, self.folders_done)

    def delete(self, path: str) -> None:
        local_files.delete(path)

    def fix_modes(self, folder: str) -> None:
        fix_local_modes(folder, self.root, self.modes, self.folders_done)


def local_files_under(base: str, depth: int, name: str | None = None) -> list[FileStamp]:
    """:meth:`Storage.files_under` on this machine's disk: a listing of each folder, and a stat of
    each file found (``name``: of those so named only)."""
    out: list[FileStamp] = []

    def walk(folder: str, prefix: str, left: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if left > 1:
                    walk(entry.path, f"{prefix}{entry.name}/", left - 1)
            elif (name is None or entry.name == name) and entry.is_file(follow_symlinks=False):
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # replaced meanwhile
                    continue
                out.append(FileStamp(prefix + entry.name, info.st_size, info.st_mtime_ns, info.st_ino))

    walk(base, "", depth)
    return out


def fix_local_modes(folder: str, root: str, modes: FileModes, done: set[tuple] | None = None) -> None:
    """The modes of ``folder``, of the folders above it up to ``root`` (included), and of its files
    (``done``: the folders given their modes already, :func:`local_files.make_dirs`)."""
    if not os.path.isdir(folder):
        return
    local_files.make_dirs(folder, modes, os.path.dirname(root), done)
    local_files.chmod_files(folder, modes)


def put_if_locally(
    path: str,
    data: pa.Buffer,
    expected: str | None,
    modes: FileModes,
    root: str,
    owner: str,
    done: set[tuple] | None = None,
) -> bool:
    """:meth:`Storage.put_if` on this machine's disk (the caller holds the file's lock for a replace;
    ``done``: the folders given their modes already, :func:`local_files.make_dirs`)."""
    local_files.make_dirs(os.path.dirname(path), modes, os.path.dirname(root), done)
    if expected is None:
        return local_files.create_exclusive(path, data, modes.file, owner=owner)
    current = local_files.read_versioned(path)
    if current is None or current[1] != expected:
        return False
    local_files.atomic_write(path, data, modes.file, owner=owner)
    return True


def read_pinned_locally(path: str, pin_as: str) -> tuple[pa.Buffer, Pin] | None:
    """Link the file to ``pin_as`` first, then read the linked file: the bytes are those of
    the pinned inode, whatever replaces ``path`` meanwhile."""
    try:
        os.link(path, pin_as)
    except OSError:  # no file, or no hard links here (or across these folders, file:// and its spool)
        return None
    data = local_files.read_bytes(pin_as)
    return (data, Pin(pin_as)) if data is not None else None


def local_still_current(path: str, pin: Pin) -> bool:
    try:
        return os.path.samefile(pin.link, path)
    except FileNotFoundError:
        return False
