"""A warehouse behind a URI: every file operation through ``pyarrow.fs`` (see
:mod:`~hermes_assets.lib.storage.interface` for the interface and how it differs from a
local folder)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from urllib.parse import parse_qs, urlparse, urlunparse

import pyarrow as pa
import pyarrow.fs as pafs

from hermes_assets.lib.storage import local_files, object_store
from hermes_assets.lib.storage.interface import ATOMIC_UPLOAD, LOCK_FILE, FileStamp, Pin, Storage
from hermes_assets.lib.storage.local_files import PRIVATE, FileModes
from hermes_assets.lib.storage.local_storage import (
    LocalStorage,
    fix_local_modes,
    local_files_under,
    local_still_current,
    put_if_locally,
    read_pinned_locally,
)
from hermes_assets.lib.storage.object_store import ObjectStore


def open_storage(uri: str, *, spool: str | None = None, modes: FileModes = PRIVATE, owner: str = "") -> Storage:
    """A plain path is :class:`LocalStorage`; a URI :class:`ArrowStorage`. ``owner``: the host
    whose temp files this storage writes and may clean up (:func:`local_files.temp_name`)."""
    scheme = urlparse(uri).scheme
    if len(scheme) > 1:  # "C:\\x" is a path
        return ArrowStorage(uri, scheme.lower(), spool=spool, modes=modes, owner=owner)
    return LocalStorage(uri, modes=modes, owner=owner)


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
        self._objects: ObjectStore | None = None

    def __getstate__(self) -> dict:
        # a worker process opens its own client, on first use (one that only projects never does)
        return {**self.__dict__, "_fs": None, "_objects": None, "root": _fs_path(self.uri)}

    @property
    def objects(self) -> ObjectStore | None:
        """The bucket's conditional writes and versioned listings (:mod:`.object_store`);
        None on a filesystem that has none (``file://``, HDFS)."""
        if self._objects is None and self.scheme in object_store.CONDITIONAL:
            region = getattr(self.fs, "region", None)  # the region pyarrow resolved (S3)
            self._objects = ObjectStore(self.uri, self.root.partition("/")[0], region)
        return self._objects

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

    def files_under(self, base: str, depth: int, name: str | None = None) -> list[FileStamp]:
        if self.local:
            return local_files_under(base, depth, name)
        if self.objects is not None:  # one listing, each object with its version
            return [
                FileStamp(o.path, o.size, o.mtime_ns, 0, o.version)
                for o in self.objects.list_under(base)
                if o.path.count("/") < depth and (name is None or o.path.rpartition("/")[2] == name)
            ]
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=True)
        out = []
        for info in self.fs.get_file_info(selector):
            rel = info.path[len(base) :].lstrip("/")
            if info.type == pafs.FileType.File and rel.count("/") < depth and (name is None or info.base_name == name):
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
        return read_pinned_locally(path, pin_as) if self.local else None

    def still_current(self, path: str, pin: Pin) -> bool:
        return local_still_current(path, pin)

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
        # pid, random: hosts sharing a folder never write one temp file); this host's temp
        # files of the same target whose writers died before their rename are removed.
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

    def read_versioned(self, path: str) -> tuple[pa.Buffer, str] | None:
        if self.local:
            return local_files.read_versioned(path)
        if self.objects is not None:
            read = self.objects.read(path)
            return None if read is None else (pa.py_buffer(read[0]), read[1])
        data = self.read_bytes(path)  # HDFS: no version of its own, the bytes' digest
        return None if data is None else (data, hashlib.sha256(data.to_pybytes()).hexdigest())

    def put_if(self, path: str, data: pa.Buffer, expected: str | None) -> bool:
        if self.local:
            return put_if_locally(path, data, expected, self.modes, self.root, self.owner)
        if self.objects is not None:
            return self.objects.put_if(path, data.to_pybytes(), expected)
        # HDFS has no conditional write: checked, then written (the day's lock orders this host's writers)
        current = self.read_versioned(path)
        if (None if current is None else current[1]) != expected:
            return False
        self.put(path, data)
        return True

    def _remove_stale_temps(self, folder: str, name: str) -> None:
        selector = pafs.FileSelector(folder, allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            if local_files.is_stale_temp_of(info.base_name, name, self.owner):
                with contextlib.suppress(OSError):
                    self.fs.delete_file(info.path)

    def delete(self, path: str) -> None:
        self.fs.delete_file(path)

    def fix_modes(self, folder: str) -> None:
        if self.local:
            fix_local_modes(folder, self.root, self.modes)


def default_spool() -> str:
    """Where a URI warehouse's staging and locks go by default: per user, under the temp dir."""
    return os.path.join(tempfile.gettempdir(), f"hermes_assets-spool-{os.getuid()}")


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
