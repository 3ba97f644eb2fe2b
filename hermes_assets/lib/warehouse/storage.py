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
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol
from urllib.parse import parse_qs, urlparse, urlunparse

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
    what tells one version of it from the next (an object store has no inode: 0)."""

    path: str
    size: int
    mtime_ns: int
    inode: int = 0


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

    def delete(self, path: str) -> None: ...

    def fix_modes(self, folder: str) -> None:
        """The modes for ``folder``, the folders above it up to the root's parent, and its files."""
        ...


def open_storage(uri: str, *, spool: str | None = None, modes: FileModes = PRIVATE, owner: str = "") -> Storage:
    """A plain path is :class:`LocalStorage`; a URI :class:`ArrowStorage`. ``owner``: the host
    whose temp files this storage writes and may clean up (:func:`local_files.temp_name`)."""
    scheme = urlparse(uri).scheme
    if len(scheme) > 1:  # "C:\\x" is a path
        return ArrowStorage(uri, scheme.lower(), spool=spool, modes=modes, owner=owner)
    return LocalStorage(uri, modes=modes, owner=owner)


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
        return _local_files_under(base, depth)

    def open_input(self, path: str) -> pa.NativeFile:
        return pa.OSFile(path)

    def read_bytes(self, path: str) -> pa.Buffer | None:
        return local_files.read_bytes(path)

    def read_pinned(self, path: str, pin_as: str) -> tuple[pa.Buffer, Pin] | None:
        return _read_pinned_locally(path, pin_as)

    def still_current(self, path: str, pin: Pin) -> bool:
        return _still_current(path, pin)

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

    def delete(self, path: str) -> None:
        local_files.delete(path)

    def fix_modes(self, folder: str) -> None:
        _fix_local_modes(folder, self.root, self.modes)


class ArrowStorage:
    """Any URI ``pyarrow.fs`` opens; staging and locks in a local spool (see the module docstring)."""

    cheap_listing = False

    def __init__(self, uri: str, scheme: str, *, spool: str | None = None, modes: FileModes = PRIVATE, owner: str = ""):
        self.uri = uri
        self.owner = owner
        self.scheme = scheme
        self.root = _fs_path(uri)
        self.modes = modes
        self.spool_setting = spool
        #: files on this machine's disk: the modes apply
        self.local = scheme == "file"
        self._fs: pafs.FileSystem | None = None

    def __getstate__(self) -> dict:
        # a worker process opens its own client, on first use (one that only projects never does)
        return {**self.__dict__, "_fs": None, "root": _fs_path(self.uri)}

    @property
    def fs(self) -> pafs.FileSystem:
        """The pyarrow filesystem, opened on first use (not at construction: a worker
        process that only projects never starts an object-store client)."""
        if self._fs is None:
            try:
                self._fs, root = pafs.FileSystem.from_uri(_with_one_request_uploads(self.uri))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                raise ValueError(
                    f"HERMES_ASSETS_WAREHOUSE={self.uri!r} is not a filesystem pyarrow can open: {exc}"
                ) from exc
            self.root = root.rstrip("/")
        return self._fs

    @property
    def spool(self) -> str:
        base = self.spool_setting or default_spool()
        return os.path.join(base, hashlib.sha256(self.uri.encode()).hexdigest()[:16])

    def make_spool_dirs(self, folder: str) -> None:
        """Create a folder of the spool with the folder mode.

        The default spool, ``<tmp>/hermes_assets-spool-<uid>``, is this user's own: it
        gets the folder mode on every call, and one that is a symlink or belongs to
        someone else (pre-created in a shared temp dir) is refused. A spool the user
        named (``HERMES_ASSETS_SPOOL``) gets the mode when this creates it.
        """
        if self.spool_setting:
            local_files.make_dirs(folder, self.modes, self.spool_setting)
            return
        base = default_spool()
        local_files.make_dirs(base, self.modes)
        info = os.lstat(base)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(
                f"the spool {base} is not a folder of this user's (uid {os.getuid()}): remove it, or set "
                "HERMES_ASSETS_SPOOL to a folder of your own"
            )
        local_files.make_dirs(folder, self.modes, os.path.dirname(base))

    def join(self, *parts: str) -> str:
        return "/".join(parts)

    def location(self, path: str) -> str:
        return path if self.scheme == "file" else f"{self.scheme}://{path}"

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def folders_holding(self, base: str, name: str) -> list[str]:
        found = set()
        for info in self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True)):
            folder, _, file_name = info.path.rpartition("/")
            if file_name == name and info.type == pafs.FileType.File:
                found.add(folder.rpartition("/")[2])
        return sorted(found)

    def files_under(self, base: str, depth: int) -> list[FileStamp]:
        if self.local:
            return _local_files_under(base, depth)
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=True)
        out = []
        for info in self.fs.get_file_info(selector):
            rel = info.path[len(base) :].lstrip("/")
            if info.type == pafs.FileType.File and rel.count("/") < depth:
                out.append(FileStamp(rel, info.size or 0, info.mtime_ns or 0))
        return out

    def open_input(self, path: str) -> pa.NativeFile:
        # one open (a HEAD on S3), then ranged reads: no existence check, no dataset discovery
        return self.fs.open_input_file(path)

    def read_bytes(self, path: str) -> pa.Buffer | None:
        try:
            with self.fs.open_input_file(path) as f:
                return f.read_buffer()
        except FileNotFoundError:
            return None

    def read_pinned(self, path: str, pin_as: str) -> tuple[pa.Buffer, Pin] | None:
        return _read_pinned_locally(path, pin_as) if self.local else None

    def still_current(self, path: str, pin: Pin) -> bool:
        return _still_current(path, pin)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        folder = os.path.join(self.spool, "locks", key)
        self.make_spool_dirs(folder)
        with local_files.locked(os.path.join(folder, LOCK_FILE), self.modes.file):
            yield

    def put(self, path: str, data: pa.Buffer, *, durable: bool = True) -> None:
        fs = self.fs
        folder, _, name = path.rpartition("/")
        # An object store publishes an upload whole when it completes: write in place.
        # Elsewhere write a temp file and rename it. Its name is this writer's own (host,
        # pid, random: hosts sharing a folder never write one temp file); this host's older
        # temp files of the same target are dead writers' (we hold the day's lock): removed.
        atomic = fs.type_name in ATOMIC_UPLOAD
        tmp = path if atomic else local_files.temp_name(path, self.owner).replace(os.sep, "/")
        if self.local:  # file://: private folders first, so the file is never readable by others
            local_files.make_dirs(folder, self.modes, os.path.dirname(self.root))
        if not atomic:
            self._remove_stale_temps(folder, name)
        try:
            try:
                out = fs.open_output_stream(tmp)
            except FileNotFoundError:  # a filesystem with real folders (hdfs://)
                fs.create_dir(folder, recursive=True)
                out = fs.open_output_stream(tmp)
            with out:
                out.write(data)
            if self.local:
                os.chmod(tmp, self.modes.file)
            if tmp != path:
                fs.move(tmp, path)
        except BaseException as exc:
            if tmp != path:
                with contextlib.suppress(OSError):
                    fs.delete_file(tmp)
            if isinstance(exc, OSError):
                raise OSError(
                    exc.errno,
                    f"{exc} (while writing {self.location(path)}: the previous file is unchanged; re-run)",
                ) from exc
            raise

    def put_file(self, path: str, source: str) -> None:
        with open(source, "rb") as f:
            self.put(path, pa.py_buffer(f.read()))

    def _remove_stale_temps(self, folder: str, name: str) -> None:
        selector = pafs.FileSelector(folder, allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            if local_files.is_temp_of(info.base_name, name, self.owner):
                with contextlib.suppress(OSError):
                    self.fs.delete_file(info.path)

    def delete(self, path: str) -> None:
        self.fs.delete_file(path)

    def fix_modes(self, folder: str) -> None:
        if self.local:
            _fix_local_modes(folder, self.root, self.modes)


def default_spool() -> str:
    """Where a URI warehouse's staging and locks go by default: per user, under the temp dir."""
    return os.path.join(tempfile.gettempdir(), f"hermes_assets-spool-{os.getuid()}")


def _local_files_under(base: str, depth: int) -> list[FileStamp]:
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


def _fix_local_modes(folder: str, root: str, modes: FileModes) -> None:
    if not os.path.isdir(folder):
        return
    local_files.make_dirs(folder, modes, os.path.dirname(root))
    local_files.chmod_files(folder, modes)


def _read_pinned_locally(path: str, pin_as: str) -> tuple[pa.Buffer, Pin] | None:
    """Link the file to ``pin_as`` first, then read the linked file: the bytes are those of
    the pinned inode, whatever replaces ``path`` meanwhile."""
    try:
        os.link(path, pin_as)
    except OSError:  # no file, or no hard links here (or across these folders, file:// and its spool)
        return None
    data = local_files.read_bytes(pin_as)
    return (data, Pin(pin_as)) if data is not None else None


def _still_current(path: str, pin: Pin) -> bool:
    try:
        return os.path.samefile(pin.link, path)
    except FileNotFoundError:
        return False


def _with_one_request_uploads(uri: str) -> str:
    """The URI with ``allow_delayed_open=true`` on S3 unless it says otherwise: a small upload
    is one PutObject instead of a three-request multipart upload (open errors then surface
    when the file is written)."""
    parsed = urlparse(uri)
    query = parse_qs(parsed.query)
    if parsed.scheme.lower() == "s3" and "allow_delayed_open" not in query:
        extra = "allow_delayed_open=true"
        return urlunparse(parsed._replace(query=f"{parsed.query}&{extra}" if parsed.query else extra))
    return uri


def _fs_path(uri: str) -> str:
    """The filesystem path of a URI without opening it (``s3://b/p?x=1`` -> ``b/p``);
    :attr:`ArrowStorage.fs` replaces it with pyarrow's own reading on first use."""
    parsed = urlparse(uri)
    if parsed.scheme.lower() == "file":
        return parsed.path.rstrip("/") or "/"
    return f"{parsed.netloc}{parsed.path}".rstrip("/")
