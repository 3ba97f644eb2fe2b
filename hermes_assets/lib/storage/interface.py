"""Where a warehouse's files live: one small interface over a local folder and pyarrow.fs.

The warehouse says what happens to a file (read it, replace it, list a
dataset's days, lock a day, replace a file several hosts write only if it is
still the one read); a :class:`Storage` says how, on its filesystem:

* :class:`~hermes_assets.lib.storage.local_storage.LocalStorage`, a plain path (``/data/warehouse``, ``~/wh``): the
  day's lock file sits beside the data, staged files in ``<root>/.staging``,
  every replace is a temp file, fsync and rename, and every folder and file
  gets the warehouse's modes;
* :class:`~hermes_assets.lib.storage.arrow_storage.ArrowStorage`, a URI (``s3://bucket/prefix``, ``gs://…``,
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
  (:mod:`~hermes_assets.lib.hosts.host_labels`), so they need none between them;
  the few files several hosts write are conditional writes, the object store's
  own (:mod:`~hermes_assets.lib.storage.object_store`). A ``file://`` warehouse is
  local: it gets the modes too; object stores keep their own access control.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from hermes_assets.lib.storage.local_files import FileModes

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

    def files_under(self, base: str, depth: int, name: str | None = None) -> list[FileStamp]:
        """The files under ``base`` at most ``depth`` folders down (``name``: only those so named):
        ``/``-joined paths relative to it, with their size and time (one listing on an object
        store; none when ``base`` does not exist)."""
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
