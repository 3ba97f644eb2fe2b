"""Where a warehouse's files live: one small interface over a local folder and pyarrow.fs.

The warehouse says what happens to a file (read it, replace it, list a
dataset's days, lock a day); a :class:`Storage` says how, on its filesystem:

* :class:`LocalStorage`, a plain path (``/data/warehouse``, ``~/wh``): the
  day's lock file sits beside the data, staged files in ``<root>/.staging``,
  every replace is a temp file, fsync and rename, and every folder and file
  gets the warehouse's modes;
* :class:`ArrowStorage`, a URI (``s3://bucket/prefix``, ``gs://…``,
  ``abfs://…``, ``hdfs://…``, and ``file:///…``, which takes this same path on
  the local disk) through ``pyarrow.fs`` for every read, listing, write and
  delete. Object stores have no rename and no locks, so a file is replaced by
  one upload on an object store (S3, GCS, Azure), whose new object appears
  whole or not at all; on a filesystem with folders (``file://``, HDFS) by a
  temp file beside it (``.part-0.parquet.<host>.<pid>.<random>.tmp``: hidden,
  never matched by ``day=*/host=*/part-0.parquet``, and never another
  writer's, on this host or another) and ``FileSystem.move``, a rename. Staging and the
  day locks live in a local spool folder (default a folder per user and
  warehouse under the system temp dir). The locks order the writers of one
  host; several hosts writing one bucket each write their own files
  (:mod:`~hermes_assets.lib.warehouse.hosts`), so they need none between them. A ``file://`` warehouse is local: it gets the modes too; object
  stores keep their own access control.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from hermes_assets.lib.warehouse import local_files
from hermes_assets.lib.warehouse.local_files import PRIVATE, FileModes

#: pyarrow filesystems whose uploads appear whole or not at all (object stores)
ATOMIC_UPLOAD = frozenset({"s3", "gcs", "abfs"})
LOCK_FILE = ".lock"


@dataclass(frozen=True)
class Pin:
    """Proof, later, that a file is still the one that was read (:meth:`Storage.read_pinned`):
    a hard link to it. Its inode cannot be reused while the link exists, and the project
    only ever replaces a file (rename), never changes one in place."""

    link: str


class FileStamp(NamedTuple):
    """A file found by :meth:`Storage.files_under`: its path below the folder listed, and
    what tells one version of it from the next: on disk its inode, on an object store its
    ETag and version (a replaced object of the same size in the same second differs)."""

    path: str
    size: int
    mtime_ns: int
    inode: int = 0
    version: str = ""


class Storage(Protocol):
    """What a warehouse needs of a filesystem. Paths are the storage's own (``join``)."""

    #: the root as the user named it: a local path, or a URI
    uri: str
    #: the root as this storage's paths name it (a local path, or ``bucket/prefix``)
    root: str
    modes: FileModes
    #: files on this machine's disk (a path or ``file://``): the modes apply
    local: bool
    #: a stat is a system call, not a request: files are checked one by one, never listed
    cheap_listing: bool

    @property
    def fs(self) -> pafs.FileSystem:
        """The pyarrow filesystem of the files."""
        ...

    @property
    def spool(self) -> str:
        """A local folder for what must not go to the warehouse's filesystem: staged days, locks."""
        ...

    def make_spool_dirs(self, folder: str) -> None: ...

    def join(self, *parts: str) -> str: ...

    def location(self, path: str) -> str:
        """``path`` as a user names it: a local path, or a URI (``s3://bucket/key``)."""
        ...

    def exists(self, path: str) -> bool: ...

    def folders_holding(self, base: str, name: str) -> list[str]:
        """The names of the folders under ``base`` that hold a file ``name``."""
        ...

    def files_under(self, base: str, depth: int) -> list[FileStamp]:
        """The files under ``base`` at most ``depth`` folders down: ``/``-joined paths relative
        to it, with their size and time (one listing on an object store; none when ``base``
        does not exist)."""
        ...

    def open_input(self, path: str) -> pa.NativeFile:
        """A file to read (ranged reads on an object store); FileNotFoundError if there is none."""
        ...

    def read_bytes(self, path: str) -> pa.Buffer | None:
        """A whole file's bytes (one read), or None when it does not exist."""
        ...

    def read_pinned(self, path: str, pin_as: str) -> tuple[pa.Buffer, Pin] | None:
        """A whole file's bytes and a :class:`Pin` of them (a hard link at the local path
        ``pin_as``); None when the file does not exist or cannot be pinned (an object store
        has no inode to hold: nothing would prove later that an object is unchanged)."""
        ...

    def still_current(self, path: str, pin: Pin) -> bool:
        """Whether ``path`` is still the file ``pin`` was made of."""
        ...

    def lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        """An exclusive lock named ``key`` (``<dataset>/day=<day>``), held for the block."""
        ...

    def put(self, path: str, data: pa.Buffer, *, durable: bool = True) -> None:
        """Replace ``path`` by ``data`` atomically (``durable``: on disk before it returns)."""
        ...

    def put_file(self, path: str, source: str) -> None:
        """Replace ``path`` by the finished local file ``source`` atomically (``source`` stays)."""
        ...

    def read_versioned(self, path: str) -> tuple[pa.Buffer, str] | None:
        """A whole file's bytes and its version (one read), or None when it does not exist."""
        ...

    def put_if(self, path: str, data: pa.Buffer, expected: str | None) -> bool:
        """Replace ``path`` by ``data`` only when it is still the version ``expected``
        (:meth:`read_versioned`; None: only when there is no file), so that no other writer's
        file is lost; False, nothing written, when it is not. The store's own conditional write
        on an object store; on disk, a create is a hard link (atomic), a replace checks the
        version under the lock of the file's day, which the caller holds."""
        ...

    def delete(self, path: str) -> None: ...

    def fix_modes(self, folder: str) -> None:
        """The modes for ``folder``, the folders above it up to the root's parent, and its files."""
        ...


class LocalStorage:
    """A local folder: POSIX locks beside the data, fsync and rename, modes on everything."""

    local = True
    cheap_listing = True

    def __init__(self, root: str, *, modes: FileModes = PRIVATE, owner: str = ""):
        self.root = self.uri = os.path.abspath(os.path.expanduser(root))
        self.modes = modes
        self.owner = owner
        self.fs = pafs.LocalFileSystem()

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

    def files_under(self, base: str, depth: int) -> list[FileStamp]:
        return local_files_under(base, depth)

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
        local_files.make_dirs(folder, self.modes, self.root)
        with local_files.locked(os.path.join(folder, LOCK_FILE), self.modes.file):
            yield

    def put(self, path: str, data: pa.Buffer, *, durable: bool = True) -> None:
        local_files.atomic_write(path, data, self.modes.file, fsync=durable, owner=self.owner)

    def put_file(self, path: str, source: str) -> None:
        local_files.link_into_place(source, path, self.modes.file, self.owner)

    def read_versioned(self, path: str) -> tuple[pa.Buffer, str] | None:
        return local_files.read_versioned(path)

    def put_if(self, path: str, data: pa.Buffer, expected: str | None) -> bool:
        return put_if_locally(path, data, expected, self.modes, self.root, self.owner)

    def delete(self, path: str) -> None:
        local_files.delete(path)

    def fix_modes(self, folder: str) -> None:
        fix_local_modes(folder, self.root, self.modes)


def local_files_under(base: str, depth: int) -> list[FileStamp]:
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
            elif entry.is_file(follow_symlinks=False):
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # replaced meanwhile
                    continue
                out.append(FileStamp(prefix + entry.name, info.st_size, info.st_mtime_ns, info.st_ino))

    walk(base, "", depth)
    return out


def fix_local_modes(folder: str, root: str, modes: FileModes) -> None:
    if not os.path.isdir(folder):
        return
    local_files.make_dirs(folder, modes, os.path.dirname(root))
    local_files.chmod_files(folder, modes)


def put_if_locally(path: str, data: pa.Buffer, expected: str | None, modes: FileModes, root: str, owner: str) -> bool:
    """:meth:`Storage.put_if` on this machine's disk (the caller holds the file's lock for a replace)."""
    local_files.make_dirs(os.path.dirname(path), modes, os.path.dirname(root))
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
