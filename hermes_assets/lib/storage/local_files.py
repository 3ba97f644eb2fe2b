"""Files on this machine's disk: private modes, atomic replacement, locks (SPEC §2, D16).

What the project creates locally (partition files of a local warehouse, staged
days, the spool of a URI warehouse) gets the modes of :class:`FileModes`
whatever the umask: folders ``0700``, files ``0600`` by default. A file is
replaced whole or not at all (temp file in the same folder, fsync, rename,
fsync the folder), so a reader or a crash never sees half a file. A step that
writes many files syncs their folders together, before it reports them
(:func:`folder_syncs_deferred`).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import hashlib
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

import pyarrow as pa

T = TypeVar("T")


@dataclass(frozen=True)
class FileModes:
    """Modes of what the project creates (SPEC §2, D16)."""

    folder: int = 0o700
    file: int = 0o600

    @classmethod
    def named(cls, name: str) -> FileModes:
        """``private`` (0700/0600) or ``group`` (0750/0640)."""
        if name not in FILE_MODES:
            raise ValueError(f"file mode {name!r} is not one of {', '.join(FILE_MODES)}")
        return FILE_MODES[name]


PRIVATE = FileModes()
#: the modes a user may choose (``HERMES_ASSETS_FILE_MODE``)
FILE_MODES = {"private": PRIVATE, "group": FileModes(0o750, 0o640)}


def make_dirs(folder: str, modes: FileModes, top: str | None = None, done: set[tuple] | None = None) -> None:
    """Create ``folder`` (and parents); give the folder mode to every folder created
    and to every folder below ``top`` (exclusive) down to ``folder``, whatever the umask.

    ``done``: the folders this process gave their modes already, kept by the caller (a storage,
    for the warehouse it writes: the day's lock, the write and the modes of each file ask for
    the same folders, the root and the dataset's folder for every file): a folder that was there
    already is not given them again; one created here always is."""
    folder = os.path.abspath(folder)
    created, current = [], folder
    while not os.path.isdir(current) and current != os.path.dirname(current):
        created.append(current)
        current = os.path.dirname(current)
    if created:
        os.makedirs(folder, exist_ok=True)
    below_top = []
    if top is not None:
        top, current = os.path.abspath(top), folder
        while current != top and current.startswith(top + os.sep):
            below_top.append(current)
            current = os.path.dirname(current)
    for path in dict.fromkeys(created + below_top):
        if done is not None:
            if (path, modes) in done and path not in created:
                continue
            done.add((path, modes))
        chmod_dir(path, modes)


def chmod_dir(folder: str, modes: FileModes) -> None:
    mode = modes.folder
    try:
        if modes.folder & 0o070 and os.stat(folder).st_mode & stat.S_ISGID:
            mode |= stat.S_ISGID  # a team's group folder keeps its setgid bit
        os.chmod(folder, mode)
    except FileNotFoundError:
        pass


def chmod_files(folder: str, modes: FileModes) -> None:
    """The file mode for every file directly in ``folder``."""
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(entry.path, modes.file)


def chmod_tree(top: str, modes: FileModes) -> None:
    """The modes for every folder and file under ``top`` (``top`` included)."""
    for folder, _, _ in os.walk(top):
        chmod_dir(folder, modes)
        chmod_files(folder, modes)


def open_private(path: str, mode: int = 0o600) -> BinaryIO:
    """``open(path, "wb")``, the file created with ``mode`` and given it whatever the umask
    (default ``0600``: only its owner reads)."""
    f = open(path, "wb", opener=lambda p, flags: os.open(p, flags, mode))
    try:
        os.fchmod(f.fileno(), mode)
    except BaseException:
        f.close()
        raise
    return f


def read_bytes(path: str) -> pa.Buffer | None:
    """A whole file's bytes (one read), or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return pa.py_buffer(f.read())
    except FileNotFoundError:
        return None


def stamp_holds(path: str, text: str, mode: int) -> bool:
    """Whether the small stamp file at ``path`` says ``text`` (False: missing or unreadable); a
    stamp an older umask left open is closed to ``mode`` on the way (D16)."""
    try:
        with open(path, encoding="ascii") as f:
            holds = f.read().strip() == text
        os.chmod(path, mode)
        return holds
    except (OSError, ValueError):
        return False


def read_versioned(path: str) -> tuple[pa.Buffer, str] | None:
    """A whole file's bytes and its version (inode, size, time and a digest of the bytes:
    a file replaced by another, even of the same size within one tick of the clock, differs);
    None when it does not exist."""
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            data = f.read()
    except FileNotFoundError:
        return None
    digest = hashlib.sha256(data).hexdigest()[:32]
    return pa.py_buffer(data), f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{digest}"


def create_exclusive(path: str, data: pa.Buffer, mode: int = 0o600, *, owner: str = "") -> bool:
    """Put ``data`` at ``path`` only when there is no file there (a whole file, or none: a temp
    file linked into place, which is atomic on every POSIX filesystem, NFS included); False,
    nothing written, when there is one."""
    folder = os.path.dirname(path)
    tmp = temp_name(path, owner)
    with open_private(tmp, mode) as f:
        f.write(memoryview(data))
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError:  # a filesystem without hard links: an exclusive create, then the bytes
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(memoryview(data))
            os.fsync(f.fileno())
    finally:
        os.unlink(tmp)
    fsync_dir(folder)
    return True


def atomic_write(path: str, data: pa.Buffer, mode: int = 0o600, *, fsync: bool = True, owner: str = "") -> None:
    """Replace ``path`` by ``data``: temp file in the same folder (created with ``mode``),
    fsync, rename, fsync the folder.

    A temp file of ``owner`` (this host) left for ``path`` by a writer that died (kill -9)
    before its rename is removed here; a live writer's, and another host's, are never
    touched (:func:`remove_stale_temps`).
    """
    folder, name = os.path.split(path)
    tmp = temp_name(path, owner)
    remove_stale_temps(folder, name, owner)
    try:
        with open_private(tmp, mode) as f:
            f.write(memoryview(data))
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # a failed write() names no file: say which partition, and that it is intact
            raise OSError(
                exc.errno,
                f"{exc.strerror} while writing {path}: the previous file is unchanged; free some space and re-run",
            ) from exc
        raise
    if fsync:
        fsync_dir(folder)


def link_into_place(source: str, path: str, mode: int, owner: str = "") -> None:
    """Put the finished file ``source`` at ``path`` atomically without copying it: fsync it,
    give it ``mode``, hard-link it beside ``path`` and rename the link over ``path``
    (``source`` stays). A filesystem without hard links gets a copy (:func:`atomic_write`)."""
    folder, name = os.path.split(path)
    with open(source, "rb+") as f:
        os.fsync(f.fileno())
        os.fchmod(f.fileno(), mode)
    remove_stale_temps(folder, name, owner)
    tmp = temp_name(path, owner)
    try:
        os.link(source, tmp)
    except OSError:  # a filesystem without hard links: copy
        with open(source, "rb") as f:
            atomic_write(path, pa.py_buffer(f.read()), mode, owner=owner)
        return
    os.replace(tmp, path)
    fsync_dir(folder)


def delete(path: str) -> None:
    os.unlink(path)
    fsync_dir(os.path.dirname(path))


def temp_name(path: str, owner: str = "") -> str:
    """The temp file a replace of ``path`` by this process writes first: hidden (never a
    ``part-0.parquet``, never a dataset file to pyarrow or DuckDB), and unique to its writer,
    ``.<name>.<owner>.<pid>.<random>.tmp``: hosts sharing a folder (``owner``: the host's
    label), and processes whose pids collide across machines, never write one temp file."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{owner}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def temp_writer(entry: str, name: str, owner: str = "") -> int | None:
    """The pid of the writer of ``entry`` when it is a temp file of ``owner``'s for a file ``name``
    (:func:`temp_name`; the pid and random fields after the owner make the match exact: ``a``
    never matches ``a.b``'s); None when it is not one."""
    found = re.fullmatch(rf"\.{re.escape(name)}\.{re.escape(owner)}\.([0-9]+)\.[0-9a-f]+\.tmp", entry)
    return None if found is None else int(found[1])


def is_temp_of(entry: str, name: str, owner: str = "") -> bool:
    """Whether ``entry`` is a temp file of ``owner``'s for a file ``name`` (:func:`temp_writer`)."""
    return temp_writer(entry, name, owner) is not None


def is_stale_temp_of(entry: str, name: str, owner: str = "") -> bool:
    """Whether ``entry`` is a temp file of ``owner``'s for ``name`` whose writer is dead: its
    pid (in the name, :func:`temp_name`) is no process of this host, or a zombie. ``owner`` is
    this host's label, so the pid is one of this host's; a writer still running (another
    process, or another thread of this one) keeps its temp file, whether or not the caller
    holds a lock. A pid reused by an unrelated process keeps a dead writer's temp file until
    that process ends: a hidden file left a while, never a file removed under a live writer."""
    pid = temp_writer(entry, name, owner)
    return pid is not None and pid != os.getpid() and not process_alive(pid)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process of this host (a zombie, killed but not yet reaped,
    is not; a process of another user is)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_state(pid) not in ("Z", "X")  # None (no /proc, or it ended meanwhile): os.kill found it


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in ``/proc/<pid>/stat`` (``Z``: a zombie); None without one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    end = stat.rfind(b")")  # the command's name, in parentheses, may hold anything
    return stat[end + 2 : end + 3].decode("ascii", "replace") or None


def remove_stale_temps(folder: str, name: str, owner: str = "") -> None:
    """Remove the temp files ``owner`` (this host) left in ``folder`` for ``name`` whose writers
    died before their rename (:func:`is_stale_temp_of`); live writers' and other hosts' stay."""
    for entry in os.listdir(folder):
        if is_stale_temp_of(entry, name, owner):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, entry))


def fsync_dir(folder: str) -> None:
    """Make the names in ``folder`` durable (a file just renamed or linked there, or removed): at
    once, or, inside :func:`folder_syncs_deferred`, when that block flushes them."""
    syncs = _deferred.get()
    if syncs is not None:
        syncs.add(folder)
        return
    _fsync_dir_now(folder)


def _fsync_dir_now(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_error(folder: str) -> OSError | None:
    """Sync ``folder`` (removed since, an emptied day: nothing to keep); the error it raised, if any."""
    try:
        _fsync_dir_now(folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        return exc
    return None


#: how many folders a flush syncs at once: each sync waits on the disk, and syncs made together
#: share their waits (330 day folders on ext4: ~0.35 s one after the other, ~0.03 s four at a time)
SYNC_THREADS = 4


class FolderSyncs:
    """The folders whose new names are not durable yet, synced together (:meth:`flush`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[str] = set()

    def add(self, folder: str) -> None:
        with self._lock:
            self._pending.add(folder)

    def flush(self, threads: int = SYNC_THREADS) -> int:
        """Sync every folder added since the last flush, once each, ``threads`` at a time (fewer
        folders, or one thread: one after the other, on the caller's thread); how many. An error is
        raised once every folder was tried (the first, in the folders' order)."""
        with self._lock:
            folders, self._pending = self._pending, set()
        ordered = sorted(folders)
        errors: list[BaseException | None]
        if threads < 2 or len(ordered) < threads:
            errors = [_sync_error(folder) for folder in ordered]
        else:
            with ThreadPoolExecutor(threads, thread_name_prefix="folder-sync") as pool:
                errors = list(pool.map(_sync_error, ordered))
        first = next((error for error in errors if error is not None), None)
        if first is not None:
            raise first
        return len(folders)


#: the folder syncs deferred by the block this context runs in (:func:`folder_syncs_deferred`)
_deferred: contextvars.ContextVar[FolderSyncs | None] = contextvars.ContextVar(
    "hermes_assets_folder_syncs", default=None
)


def deferring_to(syncs: FolderSyncs, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with its folders' syncs deferred to ``syncs`` (for a task run on a thread of
    a generator's, which cannot hold :func:`folder_syncs_deferred` open across its yields)."""
    token = _deferred.set(syncs)
    try:
        return fn(*args)
    finally:
        _deferred.reset(token)


@contextlib.contextmanager
def folder_syncs_deferred() -> Iterator[FolderSyncs]:
    """A block that writes many files (a step's days), each in place whole (its bytes synced
    before its rename or link, as always), whose folders are synced together: once each, when the
    block calls :meth:`FolderSyncs.flush` and when it ends (an error too), instead of once per
    file. A file is durable when the block has flushed it: a step flushes before it reports
    what it wrote (its materializations), so what the instance records as written is on disk, as
    before; a crash before the flush loses at most the new names of the files not reported yet
    (the old file, or none, stays: never half a file). On a journaling filesystem the first
    sync commits every name the block made, and the others find nothing left to commit: one
    wait for many files. Threads started with a copy of the block's context
    (``contextvars.copy_context``) defer theirs too; others sync at once."""
    syncs = FolderSyncs()
    token = _deferred.set(syncs)
    try:
        yield syncs
    finally:
        _deferred.reset(token)
        syncs.flush()


@contextlib.contextmanager
def locked(path: str, mode: int) -> Iterator[None]:
    """An exclusive ``flock`` on the lock file ``path`` (created with ``mode``), held for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.fchmod(fd, mode)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
