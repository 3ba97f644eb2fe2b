"""Partition files of the datasets (SPEC §2, §6).

``<root>/<dataset>/day=YYYY-MM-DD/part-0.parquet``, zstd, sorted, replaced
atomically (temp file in the same folder, fsync, rename) under a per-day lock
file, so two runs never interleave on one day. A rewrite keeps rows whose
source vanished from the store, flagged ``source_deleted`` (D13). Files are
private by default (D16): folders ``0700``, files ``0600``, whatever the umask.

One write of a day reads the old file once (its bytes), merges in Arrow,
encodes the result once and replaces the file only when the bytes differ.

The root may also be a URI (``s3://…``, ``file:///…``): every file operation
then goes through ``pyarrow.fs`` (see :class:`Warehouse`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlparse, urlunparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hermes_assets.lib import ids, schemas
from hermes_assets.lib.jsonutil import dumps, loads
from hermes_assets.lib.logs import get_logger

log = get_logger()

PART_FILE = "part-0.parquet"
LOCK_FILE = ".lock"
#: pyarrow filesystems whose uploads appear whole or not at all (object stores)
ATOMIC_UPLOAD = frozenset({"s3", "gcs", "abfs"})
#: staged days, under the spool (the root of a POSIX warehouse)
STAGING = ".staging"
#: per store, when it was read for the day's current file (no lost update, see write_day)
READ_AT_FILE = ".read_at"
GATEWAY = "ai_gateway_messages_hermes"
SESSIONS = "hermes_sessions"
MESSAGES = "hermes_messages"
#: the three capture datasets, in the order runs report them
CAPTURE_DATASETS = (SESSIONS, MESSAGES, GATEWAY)


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


@dataclass
class StoreFacts:
    """What one store holds now, for deciding the fate of previously written rows.

    ``sessions`` maps every sid in the store (any day) to its day. The others cover
    the sessions of the day being written: ``sessions_now`` the generation (D15) of
    each, ``messages_now`` the generation of each of their messages by (sid, mid),
    ``ignored`` those the usage policy ignores.
    """

    path: str
    path_hash: str
    sessions: dict[str, str | None]
    sessions_now: dict[str, int] = field(default_factory=dict)
    messages_now: dict[tuple[str, int], int] = field(default_factory=dict)
    ignored: set[str] = field(default_factory=set)


@dataclass
class WriteResult:
    dataset: str
    day: str
    path: str
    rows: int
    retained: int  # rows kept with source_deleted (this write and earlier ones)
    dropped: int  # previously written rows removed (fewer parts, policy ignore, moved)
    bytes: int
    changed: bool
    #: the file was already written from a newer read of every store: left alone
    superseded: bool = False
    #: rows this write found replaced by another generation of their id (a restored store, D15)
    replaced: int = 0

    def metadata(self) -> dict:
        return {
            "superseded_by_newer_read": self.superseded,
            "rows_written": self.rows,
            "rows_retained_source_deleted": self.retained,
            "rows_replaced": self.replaced,
            "rows_dropped": self.dropped,
            "bytes": self.bytes,
            "path": self.path,
            "file_changed": self.changed,
        }


class Warehouse:
    """The dataset root: a local folder, or any URI pyarrow's filesystem layer opens.

    A plain path (``/data/warehouse``, ``~/wh``) is the POSIX warehouse: the
    day's lock file sits beside the data, staged files in ``<root>/.staging``,
    every replace is fsynced, and every folder and file gets ``modes``.

    A URI (``s3://bucket/prefix``, ``gs://…``, ``abfs://…``, ``hdfs://…``, and
    ``file:///…``, which takes this same path on the local disk) goes through
    ``pyarrow.fs`` for every read, listing, write and delete. Object stores
    have no rename and no locks, so:

    * a file is replaced by one upload on an object store (S3, GCS, Azure),
      whose new object appears whole or not at all; on a filesystem with
      folders (``file://``, HDFS) by a temp file beside it
      (``.part-0.parquet.tmp``, never matched by ``day=*/part-0.parquet``)
      and ``FileSystem.move``, a rename;
    * staging and the day locks live in a local spool folder (``spool``,
      default a folder per user and warehouse under the system temp dir). The
      locks order the writers of one host; several hosts writing one bucket
      must not run the same day at once (deploy/).

    A ``file://`` warehouse is local: it gets ``modes`` too. Object stores keep
    their own access control.
    """

    def __init__(self, root: str, *, spool: str | None = None, modes: FileModes = PRIVATE):
        self.uri = root
        parsed = urlparse(root)
        self.scheme = parsed.scheme.lower() if len(parsed.scheme) > 1 else ""  # "C:\\x" is a path
        #: a plain local path: POSIX locks, fsync and rename (see the class docstring)
        self.posix = not self.scheme
        if self.posix:
            self.root = self.uri = os.path.abspath(os.path.expanduser(root))
        else:
            self.root = _fs_path(root)
        self.modes = modes
        self._spool = spool
        self._fs = pafs.LocalFileSystem() if self.posix else None

    @property
    def local(self) -> bool:
        """Files on this machine's disk (a path or ``file://``): modes apply."""
        return self.posix or self.scheme == "file"

    @property
    def fs(self) -> pafs.FileSystem:
        """The pyarrow filesystem, opened on first use (not at construction: a
        worker process that only projects never starts an object-store client)."""
        if self._fs is None:
            try:
                self._fs, self.root = pafs.FileSystem.from_uri(_with_defaults(self.uri))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                raise ValueError(
                    f"HERMES_ASSETS_WAREHOUSE={self.uri!r} is not a filesystem pyarrow can open: {exc}"
                ) from exc
            self.root = self.root.rstrip("/")
        return self._fs

    @property
    def spool_setting(self) -> str | None:
        """The spool this warehouse was given (None: the default), to open it again elsewhere."""
        return self._spool

    @property
    def spool(self) -> str:
        """A local folder for what must not go to the warehouse's filesystem: staged
        days and lock files (POSIX warehouse: the root itself)."""
        if self.posix:
            return self.root
        base = self._spool or default_spool()
        return os.path.join(base, hashlib.sha256(self.uri.encode()).hexdigest()[:16])

    @property
    def staging_root(self) -> str:
        return os.path.join(self.spool, STAGING)

    def make_spool_dirs(self, folder: str) -> None:
        """Create a folder of the spool (staging, locks) with the folder mode.

        On a POSIX warehouse the spool is the root. Otherwise the default spool,
        ``<tmp>/hermes_assets-spool-<uid>``, is this user's own: it gets the folder
        mode on every call, and one that is a symlink or belongs to someone else
        (pre-created in a shared temp dir) is refused. A spool the user named
        (``HERMES_ASSETS_SPOOL``) gets the mode when this creates it.
        """
        if self.posix:
            self.make_dirs(folder, self.root)
            return
        if self._spool:
            self.make_dirs(folder, self._spool)
            return
        base = default_spool()
        self.make_dirs(base)
        info = os.lstat(base)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(
                f"the spool {base} is not a folder of this user's (uid {os.getuid()}): remove it, or set "
                "HERMES_ASSETS_SPOOL to a folder of your own"
            )
        self.make_dirs(folder, os.path.dirname(base))

    # -- paths ------------------------------------------------------------------

    def day_dir(self, dataset: str, day: str) -> str:
        return f"{self.root}/{dataset}/day={day}" if not self.posix else os.path.join(self.root, dataset, f"day={day}")

    def path(self, dataset: str, day: str) -> str:
        """The day's file as this warehouse's filesystem names it (a local path, or ``bucket/key``)."""
        return f"{self.day_dir(dataset, day)}/{PART_FILE}"

    def location(self, dataset: str, day: str) -> str:
        """The day's file as a user names it: a local path, or a URI (``s3://bucket/key``)."""
        return self._uri(self.path(dataset, day))

    def _uri(self, path: str) -> str:
        return path if self.posix or self.scheme == "file" else f"{self.scheme}://{path}"

    def days(self, dataset: str) -> list[str]:
        if self.posix:
            base = os.path.join(self.root, dataset)
            if not os.path.isdir(base):
                return []
            return sorted(
                d[4:]
                for d in os.listdir(base)
                if d.startswith("day=") and os.path.exists(os.path.join(base, d, PART_FILE))
            )
        fs = self.fs
        base = f"{self.root}/{dataset}"
        found = set()
        for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True)):
            folder, _, name = info.path.rpartition("/")
            day = folder.rpartition("/")[2]
            if name == PART_FILE and info.type == pafs.FileType.File and day.startswith("day="):
                found.add(day[4:])
        return sorted(found)

    def existing(self, dataset: str, days: Iterable[str]) -> set[str]:
        """Which of ``days`` have a file (a stat each on disk; one listing on an object store)."""
        if self.posix:
            return {day for day in days if os.path.exists(self.path(dataset, day))}
        return set(self.days(dataset)) & set(days)

    def read(
        self, dataset: str, day: str, columns: list[str] | None = None, *, read_dictionary: list[str] | None = None
    ) -> pa.Table | None:
        """The day's rows (``None`` when it has no file). ``read_dictionary`` keeps
        those columns dictionary-encoded (checks over long repeated strings)."""
        path = self.path(dataset, day)
        schema = schemas.schema_of(dataset)
        if read_dictionary:  # the same schema (a column older files lack still reads as its default)
            schema = pa.schema(
                [f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in read_dictionary else f for f in schema]
            )
        if self.posix:
            return with_defaults(pq.read_table(path, columns=columns, schema=schema)) if os.path.exists(path) else None
        try:  # one open (a HEAD on S3), then ranged reads: no existence check, no dataset discovery
            with self.fs.open_input_file(path) as f:
                return with_defaults(pq.read_table(f, columns=columns, schema=schema))
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def day_lock(self, dataset: str, day: str) -> Iterator[None]:
        """An exclusive lock on one day of one dataset (a lock file beside the data,
        or in the spool for a URI warehouse)."""
        if self.posix:
            folder = self.day_dir(dataset, day)
            self.make_dirs(folder, self.root)
        else:
            folder = os.path.join(self.spool, "locks", dataset, f"day={day}")
            self.make_spool_dirs(folder)
        fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, self.modes.file)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.fchmod(fd, self.modes.file)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- modes (D16) -------------------------------------------------------------

    def make_dirs(self, folder: str, top: str | None = None) -> None:
        """Create ``folder`` (and parents); give the folder mode to every folder created
        and to every folder below ``top`` (exclusive) down to ``folder``, whatever the umask."""
        folder = os.path.abspath(folder)
        created, current = [], folder
        while not os.path.isdir(current) and current != os.path.dirname(current):
            created.append(current)
            current = os.path.dirname(current)
        os.makedirs(folder, exist_ok=True)
        below_top = []
        if top is not None:
            top, current = os.path.abspath(top), folder
            while current != top and current.startswith(top + os.sep):
                below_top.append(current)
                current = os.path.dirname(current)
        for path in dict.fromkeys(created + below_top):
            self._chmod_dir(path)

    def _chmod_dir(self, folder: str) -> None:
        mode = self.modes.folder
        try:
            if self.modes.folder & 0o070 and os.stat(folder).st_mode & stat.S_ISGID:
                mode |= stat.S_ISGID  # a team's group folder keeps its setgid bit
            os.chmod(folder, mode)
        except FileNotFoundError:
            pass

    def fix_modes(self, dataset: str, day: str) -> None:
        """Set the modes of the root, the dataset and day folders and of every file of the
        day (what an older version, or another umask, left open is closed again)."""
        if not self.local:
            return
        folder = self.day_dir(dataset, day)
        if not os.path.isdir(folder):
            return
        self.make_dirs(folder, os.path.dirname(self.root))
        self._chmod_files(folder)

    def fix_all_modes(self) -> None:
        """Set the modes of every folder and file of the datasets and of the staged days
        (the purge job: days it did not rewrite included)."""
        tops = [self.staging_root]
        if self.local:
            self._chmod_dir(self.root)
            tops += [os.path.join(self.root, dataset) for dataset in (*CAPTURE_DATASETS, *schemas.ANALYTICS)]
        for top in tops:
            for folder, _, _ in os.walk(top):
                self._chmod_dir(folder)
                self._chmod_files(folder)

    def _chmod_files(self, folder: str) -> None:
        for entry in os.scandir(folder):
            if entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(entry.path, self.modes.file)

    # -- writing ------------------------------------------------------------------

    def write_day(
        self,
        dataset: str,
        day: str,
        new: dict[str, pa.Table | str],
        facts: Iterable[StoreFacts],
        read_at: float | None = None,
    ) -> WriteResult:
        """Merge the day's new rows with what its file holds, and replace the file atomically.

        ``new`` maps each store path in ``facts`` to every current row of the day
        from that store (a store may be absent: no rows): a table, or the path of
        a partition file already encoded from them (:func:`encode`), which is put
        in place as it is when it is the day's only input and the day has no file
        yet (a first capture: encoded once, on a worker). Rows of stores not in
        ``facts`` are kept as they are (not ours to judge).

        ``read_at`` is when the stores were read for ``new``. A store already
        written into this file from a later read is left alone (its rows and
        facts are dropped from this write): a long backfill that read a day
        before Hermes's last write never undoes the sensor run that captured it
        (no lost update; the lock alone only orders the writes). When every
        store is newer in the file, nothing changes (``superseded``).
        """
        facts = list(facts)
        with self.day_lock(dataset, day):
            marks = self._read_marks(dataset, day)
            fresh = [f for f in facts if read_at is None or marks.get(f.path, marks.get("*", 0.0)) <= read_at]
            if not fresh:  # no store read (all missing or failed), or all read later already
                if facts:
                    log.warning(
                        "hermes.warehouse.superseded",
                        dataset=dataset,
                        day=day,
                        read_at=read_at,
                        newest=max(marks.values(), default=None),
                    )
                self.fix_modes(dataset, day)
                return self.current(dataset, day, superseded=bool(facts))
            schema = schemas.DATASETS[dataset][0]
            old = self._read_bytes(self.path(dataset, day))
            inputs = [new[f.path] for f in fresh if f.path in new]
            if old is None and len(inputs) == 1 and isinstance(inputs[0], str):
                result = self._put_encoded(dataset, day, inputs[0])
            else:
                tables = [_parse_file(dataset, t) if isinstance(t, str) else t for t in inputs]
                tables = [t for t in tables if t.num_rows]
                if len({t.schema for t in tables}) > 1:  # e.g. one store's staged day was scrubbed by a purge
                    tables = [t.cast(schema) for t in tables]
                table = pa.concat_tables(tables) if tables else schema.empty_table()
                dropped = replaced = 0
                if old is not None:
                    kept, dropped, replaced = _carry_over(dataset, old, table, fresh)
                    if kept is not None and kept.num_rows:
                        table = pa.concat_tables([table.cast(schema), kept.cast(schema)])
                result = self._replace(dataset, day, table, dropped, old)
                result.replaced = replaced
            if read_at is not None:
                marks.update({f.path: read_at for f in fresh})
                self._write_marks(dataset, day, marks)
            self.fix_modes(dataset, day)
            return result

    def replace_day(self, dataset: str, day: str, table: pa.Table) -> WriteResult:
        """Replace the day's file by ``table`` as it is (no retention merge), atomically,
        under the day's lock; no rows = no file. For datasets recomputed whole."""
        with self.day_lock(dataset, day):
            result = self._replace(dataset, day, table, 0, self._read_bytes(self.path(dataset, day)))
            self.fix_modes(dataset, day)
            return result

    def rewrite_day(self, dataset: str, day: str, keep_mask_fn) -> tuple[int, int]:
        """Drop rows for which ``keep_mask_fn(table)`` is false. -> (rows removed, rows left).
        (The purge, its one caller, sets the modes of every file after: :meth:`fix_all_modes`.)"""
        with self.day_lock(dataset, day):
            data = self._read_bytes(self.path(dataset, day))
            if data is None:
                return 0, 0
            old = _parse(dataset, data)
            table = old.filter(keep_mask_fn(old))
            removed = old.num_rows - table.num_rows
            if removed:
                self._replace(dataset, day, table, removed, data)
            return removed, table.num_rows

    def _replace(self, dataset: str, day: str, table: pa.Table, dropped: int, old: pa.Buffer | None) -> WriteResult:
        """Put ``table`` in place of the day's file (``old``: its current bytes, or None)."""
        path = self.path(dataset, day)
        location = self.location(dataset, day)
        if table.num_rows == 0:
            if old is not None:
                self._delete(path)
            return WriteResult(dataset, day, location, 0, 0, dropped, 0, old is not None)
        data = encode(dataset, table)
        changed = old is None or not _same(old, data)
        if changed:
            self._put(path, data)
        retained = _count_source_deleted(dataset, table)
        log.info(
            "hermes.warehouse.day_written",
            dataset=dataset,
            day=day,
            rows=table.num_rows,
            retained=retained,
            dropped=dropped,
            changed=changed,
        )
        return WriteResult(dataset, day, location, table.num_rows, retained, dropped, data.size, changed)

    def _put_encoded(self, dataset: str, day: str, encoded: str) -> WriteResult:
        """A day with no file yet takes an encoded file as it is: on disk a hard link into
        the day's folder and a rename (no copy; the staged file stays until the run's write
        step is done, so a re-execution from failure still finds it)."""
        path = self.path(dataset, day)
        rows = pq.ParquetFile(encoded).metadata.num_rows
        size = os.path.getsize(encoded)
        if self.posix:
            folder, name = os.path.split(path)
            with open(encoded, "rb+") as f:
                os.fsync(f.fileno())
                os.fchmod(f.fileno(), self.modes.file)
            _remove_stale_temps(folder, name)
            tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
            try:
                os.link(encoded, tmp)
            except OSError:  # a filesystem without hard links: copy
                with open(encoded, "rb") as f:
                    _atomic_write(path, pa.py_buffer(f.read()), self.modes.file)
            else:
                os.replace(tmp, path)
                _fsync_dir(folder)
        else:
            with open(encoded, "rb") as f:
                self._put(path, pa.py_buffer(f.read()))
        log.info(
            "hermes.warehouse.day_written", dataset=dataset, day=day, rows=rows, retained=0, dropped=0, changed=True
        )
        return WriteResult(dataset, day, self.location(dataset, day), rows, 0, 0, size, True)

    def current(self, dataset: str, day: str, *, superseded: bool = False) -> WriteResult:
        """The day's file as it stands, left unchanged (its row count from the footer)."""
        path = self.path(dataset, day)
        try:
            with self.fs.open_input_file(path) as f:
                rows, size = pq.ParquetFile(f).metadata.num_rows, f.size()
        except FileNotFoundError:
            rows = size = 0
        return WriteResult(dataset, day, self.location(dataset, day), rows, 0, 0, size, False, superseded=superseded)

    # -- read marks: per store, a small file beside the data (data files stay byte-identical) --

    def _marks_path(self, dataset: str, day: str) -> str:
        return f"{self.day_dir(dataset, day)}/{READ_AT_FILE}"

    def _read_marks(self, dataset: str, day: str) -> dict[str, float]:
        data = self._read_bytes(self._marks_path(dataset, day))
        if data is None:
            return {}
        text = data.to_pybytes().decode("utf-8", "replace").strip()
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            return {}
        if isinstance(value, (int, float)):  # written by an earlier version: one mark for every store
            return {"*": float(value)}
        return {k: float(v) for k, v in value.items() if isinstance(v, (int, float))} if isinstance(value, dict) else {}

    def _write_marks(self, dataset: str, day: str, marks: dict[str, float]) -> None:
        data = pa.py_buffer(json.dumps(marks, sort_keys=True).encode())
        target = self._marks_path(dataset, day)
        if self.posix:
            _atomic_write(target, data, self.modes.file, fsync=False)
        else:
            self._put(target, data)

    # -- the filesystem primitives: POSIX, or pyarrow.fs ------------------------------

    def _read_bytes(self, path: str) -> pa.Buffer | None:
        """A whole file's bytes (one read), or None when it does not exist."""
        if self.posix:
            try:
                with open(path, "rb") as f:
                    return pa.py_buffer(f.read())
            except FileNotFoundError:
                return None
        try:
            with self.fs.open_input_file(path) as f:
                return f.read_buffer()
        except FileNotFoundError:
            return None

    def _put(self, path: str, data: pa.Buffer) -> None:
        """Replace ``path`` by ``data`` atomically (called under the day's lock)."""
        if self.posix:
            _atomic_write(path, data, self.modes.file)
            return
        fs = self.fs
        folder, _, name = path.rpartition("/")
        # An object store publishes an upload whole when it completes: write in place.
        # Elsewhere write a temp file and rename it; its name is fixed per target (we
        # hold the day's lock), so a killed writer's leftover is simply overwritten.
        tmp = path if fs.type_name in ATOMIC_UPLOAD else f"{folder}/.{name}.tmp"
        if self.local:  # file://: private folders first, so the file is never readable by others
            self.make_dirs(folder, os.path.dirname(self.root))
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
                    exc.errno, f"{exc} (while writing {self._uri(path)}: the previous file is unchanged; re-run)"
                ) from exc
            raise

    def _delete(self, path: str) -> None:
        if self.posix:
            os.unlink(path)
            _fsync_dir(os.path.dirname(path))
        else:
            self.fs.delete_file(path)


def default_spool() -> str:
    """Where a URI warehouse's staging and locks go by default: per user, under the temp dir."""
    return os.path.join(tempfile.gettempdir(), f"hermes_assets-spool-{os.getuid()}")


def encode(dataset: str, table: pa.Table) -> pa.Buffer:
    """A day's table as the exact bytes of its partition file (sorted, zstd).

    Text columns may arrive dictionary-encoded (one system prompt per session);
    the file does not store the Arrow schema, so every reader sees the types of
    the Parquet schema itself: plain strings, UTC timestamps, JSON.
    """
    sort = schemas.sort_of(dataset)
    if not is_sorted(table, sort):
        table = table.sort_by([(c, "ascending") for c in sort])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", row_group_size=256 * 1024, store_schema=False)
    return sink.getvalue()


def _parse(dataset: str, data: pa.Buffer, columns: list[str] | None = None) -> pa.Table:
    return with_defaults(pq.read_table(pa.BufferReader(data), columns=columns, schema=schemas.schema_of(dataset)))


def _parse_file(dataset: str, path: str) -> pa.Table:
    return with_defaults(pq.read_table(path, schema=schemas.schema_of(dataset)))


def with_defaults(table: pa.Table) -> pa.Table:
    """Columns a file written by an earlier version lacks read as NULL: give them their default."""
    for name, default in schemas.ADDED_COLUMNS.items():
        idx = table.schema.get_field_index(name)
        if idx >= 0 and table.column(idx).null_count:
            field = table.schema.field(idx)
            table = table.set_column(idx, field, pc.fill_null(table.column(idx), pa.scalar(default, field.type)))
    return table


def encode_to(dataset: str, table: pa.Table, path: str, mode: int = 0o600) -> None:
    """:func:`encode` ``table`` into a new file of ``mode`` (a staged partition file)."""
    data = encode(dataset, table)
    with open_private(path, mode) as f:
        f.write(memoryview(data))


def open_private(path: str, mode: int = 0o600):
    """``open(path, "wb")``, the file created with ``mode`` and given it whatever the umask
    (default ``0600``: only its owner reads)."""
    f = open(path, "wb", opener=lambda p, flags: os.open(p, flags, mode))
    try:
        os.fchmod(f.fileno(), mode)
    except BaseException:
        f.close()
        raise
    return f


def _same(a: pa.Buffer, b: pa.Buffer) -> bool:
    return a.size == b.size and a.equals(b)


def _with_defaults(uri: str) -> str:
    """The URI with our defaults for options it does not set: on S3, a small upload
    is one PutObject instead of a three-request multipart upload
    (``allow_delayed_open``; open errors then surface when the file is written)."""
    parsed = urlparse(uri)
    query = parse_qs(parsed.query)
    if parsed.scheme.lower() == "s3" and "allow_delayed_open" not in query:
        extra = "allow_delayed_open=true"
        return urlunparse(parsed._replace(query=f"{parsed.query}&{extra}" if parsed.query else extra))
    return uri


def _fs_path(uri: str) -> str:
    """The filesystem path of a URI without opening it (``s3://b/p?x=1`` -> ``b/p``);
    :attr:`Warehouse.fs` replaces it with pyarrow's own reading on first use."""
    parsed = urlparse(uri)
    if parsed.scheme.lower() == "file":
        return parsed.path.rstrip("/") or "/"
    return f"{parsed.netloc}{parsed.path}".rstrip("/")


def is_sorted(table: pa.Table, keys) -> bool:
    """Whether ``table`` is already in ``keys`` order (vectorized; nulls count as unsorted).

    One store's rows come out of the projection in order, so the common case
    skips a sort (a full copy of the table).
    """
    if table.num_rows < 2:
        return True
    ahead = pa.repeat(pa.scalar(False), table.num_rows - 1)
    tie = pa.repeat(pa.scalar(True), table.num_rows - 1)
    for key in keys:
        column = table.column(key)
        if isinstance(column.type, pa.ExtensionType):
            column = pa.chunked_array([c.storage for c in column.chunks], column.type.storage_type)
        a, b = column.slice(0, table.num_rows - 1), column.slice(1)
        ahead = pc.or_(ahead, pc.and_(tie, pc.less(a, b)))
        tie = pc.and_(tie, pc.equal(a, b))
    ordered = pc.or_(ahead, tie)
    return ordered.null_count == 0 and pc.all(ordered).as_py()


def _atomic_write(path: str, data: pa.Buffer, mode: int = 0o600, *, fsync: bool = True) -> None:
    """Replace ``path`` by ``data``: temp file in the same folder (created with ``mode``),
    fsync, rename, fsync the folder.

    Called under the day's lock, so any other temp file in the folder belongs to a
    writer that died (kill -9, power loss) before its rename: removed here.
    """
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    _remove_stale_temps(folder, name)
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
        _fsync_dir(folder)


def _remove_stale_temps(folder: str, name: str) -> None:
    for entry in os.listdir(folder):
        if entry.startswith(f".{name}.") and entry.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, entry))


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# retention (SPEC §6, D13)
# --------------------------------------------------------------------------


def _carry_over(dataset: str, old: pa.Buffer, new: pa.Table, facts: list[StoreFacts]):
    """Rows of the old file (its bytes) not in ``new``: kept (flagged) when their source is gone
    or was replaced by another generation (SPEC §6, D13, D15).

    Parses only the key columns unless some old row is missing from ``new``.
    -> (rows to keep, number of rows dropped, number of rows newly found replaced).
    """
    key_columns = list(schemas.DATASETS[dataset][1])
    old_keys = _parse(dataset, old, key_columns)
    if old_keys.num_rows == 0:
        return None, 0, 0
    missing = pc.invert(pc.is_in(_key_strings(dataset, old_keys), value_set=_key_strings(dataset, new)))
    if not pc.any(missing).as_py():
        return None, 0, 0
    leftovers = _parse(dataset, old).filter(missing)
    by_path = {f.path: f for f in facts}
    by_hash = {f.path_hash: f for f in facts}
    keep, fates, kept_attrs, newly_replaced = [], [], [], 0
    for row in leftovers.to_pylist():
        # a canonical row's ids and flags live in its attributes: decoded once per row
        attrs = (loads(row["attributes"]) if row["attributes"] else {}) if dataset == GATEWAY else None
        fate = _fate(dataset, row, attrs, by_path, by_hash)
        keep.append(fate is not None)
        if fate is not None:
            fates.append(fate)
            kept_attrs.append(attrs)
            newly_replaced += fate == REPLACED and not _was_replaced(row, attrs)
    kept = leftovers.filter(pa.array(keep, pa.bool_()))
    return _flag(dataset, kept, fates, kept_attrs), len(keep) - sum(keep), newly_replaced


def _was_replaced(row: dict, attrs: dict | None) -> bool:
    """Already flagged ``replaced`` (a raw row's column, a canonical row's attributes)."""
    if attrs is None:
        return bool(row["replaced"])
    return bool(attrs.get("hermes", {}).get("replaced"))


def _key_strings(dataset: str, table: pa.Table) -> pa.Array:
    if dataset == GATEWAY:
        return table.column("part_id")
    parts = [pc.cast(table.column(c), pa.string()) for c in schemas.DATASETS[dataset][1]]
    if "generation" in table.column_names:
        parts[-1] = pc.cast(pc.fill_null(table.column("generation"), 1), pa.string())
    return pc.binary_join_element_wise(*parts, "\x1f")


#: fates of a previously written row that is not among the new rows
KEEP, DELETED, REPLACED = "keep", "source_deleted", "replaced"


def _fate(dataset: str, row: dict, attrs: dict | None, by_path: dict, by_hash: dict) -> str | None:
    """None: drop the row; KEEP: keep it as is; DELETED: keep it, flagged source_deleted;
    REPLACED: keep it, flagged source_deleted and replaced (another generation of its id).
    ``attrs``: a canonical row's decoded attributes."""
    if dataset == GATEWAY:
        facts = by_hash.get(attrs.get("gateway", {}).get("source_path_hash"))
        sid = attrs.get("gateway", {}).get("native_id")
        if facts is None or sid is None:
            return KEEP
        session_gen, mid, gen = _gateway_generations(row, attrs)
        end_row = ids.is_end_row(row["message_id"])
    else:
        facts = by_path.get(row["store"])
        sid = row["id"] if dataset == SESSIONS else row["session_id"]
        mid = row["id"] if dataset == MESSAGES else None
        gen = row["generation"] or 1
        session_gen = gen if dataset == SESSIONS else None
        end_row = False
    if facts is None:  # a store not read in this run: not ours to judge
        return KEEP
    if sid in facts.ignored:
        return None
    if sid not in facts.sessions:  # the whole session is gone from the store
        return DELETED
    now = facts.sessions_now.get(sid)
    if session_gen is not None and now is not None and now != session_gen:
        return REPLACED  # the session id was reused by another session (a restored store)
    if dataset == SESSIONS or end_row:  # the session exists (maybe now not ended, or moved)
        return None
    if mid is None:
        return None
    current = facts.messages_now.get((sid, mid))
    if current is None:
        return DELETED  # the message is gone (deleted, pruned, /retry renumbered it, or its id moved)
    if current != gen:
        return REPLACED  # the message id was reused by another message (a restored store)
    return None  # the message exists but yields fewer parts now


def _gateway_generations(row: dict, attrs: dict) -> tuple[int, int | None, int]:
    """``(session generation, mid, message generation)`` of a canonical row, from its ids:
    ``hermes-<scoped sid>[.g<n>]-<mid>[.g<n>]-<k>`` (SPEC D15)."""
    session_gen = ids.session_generation(
        row["session_id"], attrs.get("hermes", {}).get("store"), attrs["gateway"]["native_id"]
    )
    mid = row["provider_uuid"]
    mid = int(mid) if mid is not None and mid.isdigit() else None
    if mid is None:
        return session_gen, None, 1
    return session_gen, mid, ids.message_generation(row["message_id"], row["session_id"], mid)


def _flag(dataset: str, table: pa.Table, fates: list[str], attrs: list[dict | None]) -> pa.Table:
    """Flag the kept rows by their fate (``fates`` holds one per row of ``table``; ``attrs``
    their decoded attributes, canonical rows)."""
    if not any(f != KEEP for f in fates):
        return table
    if dataset != GATEWAY:
        for column, on in (("source_deleted", (DELETED, REPLACED)), ("replaced", (REPLACED,))):
            current = pc.fill_null(table.column(column), False).to_pylist()
            values = pa.array([c or f in on for c, f in zip(current, fates)], pa.bool_())
            idx = table.schema.get_field_index(column)
            table = table.set_column(idx, table.schema.field(idx), values)
        return table
    idx = table.schema.get_field_index("attributes")
    out = []
    for text, fate, value in zip(table.column("attributes").to_pylist(), fates, attrs):
        if fate != KEEP:
            hermes = value.setdefault("hermes", {})
            hermes["source_deleted"] = True
            if fate == REPLACED:
                hermes["replaced"] = True
            text = dumps(value, normalized=True)
        out.append(text)
    typ = schemas.AI_GATEWAY_MESSAGES.field("attributes").type
    return table.set_column(
        idx, table.schema.field(idx), pa.ExtensionArray.from_storage(typ, pa.array(out, pa.string()))
    )


def source_deleted_mask(dataset: str, table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Which rows are flagged ``source_deleted`` (D13): a raw dataset's column, or a canonical
    row's ``attributes.hermes.source_deleted``; all false for a dataset that keeps no such rows."""
    if dataset != GATEWAY:
        if "source_deleted" not in table.column_names:  # a derived dataset keeps no retained rows
            return pa.repeat(pa.scalar(False), table.num_rows)
        return pc.fill_null(table.column("source_deleted"), False)
    column = table.column("attributes")
    text = pa.chunked_array([c.storage for c in column.chunks], pa.string())
    # the flag is written compact (SPEC §5.5); a candidate is confirmed by parsing it
    maybe = pc.fill_null(pc.match_substring(text, '"source_deleted":true'), False)
    if not pc.any(maybe).as_py():
        return maybe
    return pa.array(
        [
            bool(m) and bool((loads(t).get("hermes") or {}).get("source_deleted"))
            for m, t in zip(maybe.to_pylist(), text.to_pylist())
        ],
        pa.bool_(),
    )


def _count_source_deleted(dataset: str, table: pa.Table) -> int:
    return pc.sum(source_deleted_mask(dataset, table)).as_py() or 0
