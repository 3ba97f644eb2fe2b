"""Partition files of the three datasets (SPEC §2, §6).

``<root>/<dataset>/day=YYYY-MM-DD/part-0.parquet``, zstd, sorted, replaced
atomically (temp file in the same folder, fsync, rename) under a per-day lock
file, so two runs never interleave on one day. A rewrite keeps rows whose
source vanished from the store, flagged ``source_deleted`` (D13).

The root may also be a URI (``s3://…``, ``file:///…``): every file operation
then goes through ``pyarrow.fs`` (see :class:`Warehouse`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import Iterable, Iterator
from urllib.parse import parse_qs, urlparse, urlunparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hermes_assets.lib import schemas
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.projection import dumps, loads

log = get_logger()

PART_FILE = "part-0.parquet"
LOCK_FILE = ".lock"
#: pyarrow filesystems whose uploads appear whole or not at all (object stores)
ATOMIC_UPLOAD = frozenset({"s3", "gcs", "abfs"})
#: staged days, under the spool (the root of a POSIX warehouse)
STAGING = ".staging"
#: when the store was read for the day's current file (SPEC §2 lock + no lost update)
READ_AT_FILE = ".read_at"
GATEWAY = "ai_gateway_messages_hermes"
SESSIONS = "hermes_sessions"
MESSAGES = "hermes_messages"


@dataclass
class StoreFacts:
    """What one store holds now, for deciding the fate of previously written rows.

    ``sessions`` maps every sid in the store (any day) to its day; ``mids`` and
    ``ignored`` cover the sessions of the day being written.
    """

    path: str
    path_hash: str
    sessions: dict[str, str | None]
    mids: set[int] = field(default_factory=set)
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
    #: the file was already written from a newer read of the store: left alone
    superseded: bool = False

    def metadata(self) -> dict:
        return {
            "superseded_by_newer_read": self.superseded,
            "rows_written": self.rows,
            "rows_retained_source_deleted": self.retained,
            "rows_dropped": self.dropped,
            "bytes": self.bytes,
            "path": self.path,
            "file_changed": self.changed,
        }


class Warehouse:
    """The dataset root: a local folder, or any URI pyarrow's filesystem layer opens.

    A plain path (``/data/warehouse``, ``~/wh``) is the POSIX warehouse: the
    day's lock file sits beside the data, staged files in ``<root>/.staging``
    (same filesystem, so putting one in place is a rename), and every replace
    is fsynced.

    A URI (``s3://bucket/prefix``, ``gs://…``, ``abfs://…``, ``hdfs://…``, and
    ``file:///…``, which takes this same path on the local disk) goes through
    ``pyarrow.fs`` for every read, listing, write and delete. Object stores
    have no rename and no locks, so:

    * a file is replaced by one upload on an object store (S3, GCS, Azure),
      whose new object appears whole or not at all; on a filesystem with
      folders (``file://``, HDFS) by a temp file beside it
      (``.part-0.parquet.tmp``, never matched by ``day=*/part-0.parquet``)
      and ``FileSystem.move``, a rename;
    * staging and the day locks live in a local spool folder
      (``HERMES_ASSETS_SPOOL``, default a folder per warehouse under the
      system temp dir). The locks order the writers of one host; several
      hosts writing one bucket must not run the same day at once (deploy/).
    """

    def __init__(self, root: str):
        self.uri = root
        parsed = urlparse(root)
        self.scheme = parsed.scheme.lower() if len(parsed.scheme) > 1 else ""  # "C:\\x" is a path
        #: a plain local path: POSIX locks, fsync and rename (see the class docstring)
        self.posix = not self.scheme
        if self.posix:
            self.root = self.uri = os.path.abspath(os.path.expanduser(root))
        else:
            self.root = _fs_path(root)
        self._fs = pafs.LocalFileSystem() if self.posix else None

    @property
    def fs(self) -> pafs.FileSystem:
        """The pyarrow filesystem, opened on first use (not at construction: a
        worker process that only encodes never starts an object-store client)."""
        if self._fs is None:
            try:
                self._fs, self.root = pafs.FileSystem.from_uri(_with_defaults(self.uri))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                raise ValueError(f"HERMES_ASSETS_WAREHOUSE={self.uri!r} is not a filesystem pyarrow can open: "
                                 f"{exc}") from exc
            self.root = self.root.rstrip("/")
        return self._fs

    @property
    def spool(self) -> str:
        """A local folder for what must not go to the warehouse's filesystem: staged
        days and lock files (POSIX warehouse: the root itself)."""
        if self.posix:
            return self.root
        configured = os.environ.get("HERMES_ASSETS_SPOOL", "").strip()
        base = configured or os.path.join(tempfile.gettempdir(), "hermes_assets-spool")
        return os.path.join(base, hashlib.sha256(self.uri.encode()).hexdigest()[:16])

    @property
    def staging_root(self) -> str:
        return os.path.join(self.spool, STAGING)

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
                d[4:] for d in os.listdir(base)
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

    def read(self, dataset: str, day: str, columns: list[str] | None = None, *,
             read_dictionary: list[str] | None = None) -> pa.Table | None:
        """The day's rows (``None`` when it has no file). ``read_dictionary`` keeps
        those columns dictionary-encoded (checks over long repeated strings)."""
        path = self.path(dataset, day)
        options = {"read_dictionary": read_dictionary} if read_dictionary else {"schema": schemas.schema_of(dataset)}
        if self.posix:
            return pq.read_table(path, columns=columns, **options) if os.path.exists(path) else None
        try:  # one open (a HEAD on S3), then ranged reads: no existence check, no dataset discovery
            with self.fs.open_input_file(path) as f:
                return pq.read_table(f, columns=columns, **options)
        except FileNotFoundError:
            return None

    def _num_rows(self, path: str) -> int:
        with self.fs.open_input_file(path) as f:
            return pq.ParquetFile(f).metadata.num_rows

    def _size(self, path: str) -> int | None:
        if self.posix:
            try:
                return os.path.getsize(path)
            except FileNotFoundError:
                return None
        info = self.fs.get_file_info(path)
        return info.size if info.type == pafs.FileType.File else None

    @contextlib.contextmanager
    def day_lock(self, dataset: str, day: str) -> Iterator[None]:
        """An exclusive lock on one day of one dataset (a lock file beside the data,
        or in the spool for a URI warehouse)."""
        if self.posix:
            folder = self.day_dir(dataset, day)
        else:
            folder = os.path.join(self.spool, "locks", dataset, f"day={day}")
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- writing ------------------------------------------------------------------

    def write_day(
        self, dataset: str, day: str, new: pa.Table, facts: Iterable[StoreFacts], read_at: float | None = None
    ) -> WriteResult:
        """Merge ``new`` (every current row of the day from the stores in ``facts``)
        with what the day's file holds, and replace the file atomically.

        ``read_at`` is when the store was read for ``new``. A file already written
        from a later read is left alone (``superseded``): a long backfill that read
        a day before Hermes's last write never undoes the sensor run that
        captured it (no lost update; the lock alone only orders the writes).
        """
        with self.day_lock(dataset, day):
            return self._write_locked(dataset, day, new, list(facts), read_at)

    def _write_locked(self, dataset, day, new: pa.Table, facts: list[StoreFacts], read_at: float | None) -> WriteResult:
        superseded = self._superseded(dataset, day, read_at)
        if superseded is not None:
            return superseded
        sort = schemas.DATASETS[dataset][2]
        kept, dropped = self._carry_over(dataset, day, new, facts)
        table = pa.concat_tables([new, kept.cast(new.schema)]) if kept is not None and kept.num_rows else new
        if not is_sorted(table, sort):
            table = table.sort_by([(c, "ascending") for c in sort])
        retained = _count_source_deleted(dataset, table)
        result = self._replace(dataset, day, table, retained, dropped)
        self._mark_read(dataset, day, read_at)
        return result

    def write_staged_day(
        self, dataset: str, day: str, staged: str, facts: Iterable[StoreFacts], read_at: float | None = None
    ) -> WriteResult:
        """Merge a staged file (the bytes :func:`encode` made of the day's new rows).

        Two common cases cost no merge: a day with no file yet takes the staged
        file as it is (a rename, or one upload), and a day whose file already
        holds exactly these bytes (a re-run) is left alone. Anything else
        merges as :meth:`write_day`, all under one hold of the day's lock.
        """
        path = self.path(dataset, day)
        with self.day_lock(dataset, day):
            superseded = self._superseded(dataset, day, read_at)
            if superseded is not None:
                return superseded
            rows = pq.ParquetFile(staged).metadata.num_rows
            size = os.path.getsize(staged)
            current = self._size(path)
            if current is None:
                if rows:
                    self._put_staged(staged, path)
                    log.info("hermes.warehouse.day_written", dataset=dataset, day=day, rows=rows, retained=0,
                             dropped=0, changed=True)
                self._mark_read(dataset, day, read_at)
                return WriteResult(dataset, day, self.location(dataset, day), rows, 0, 0, size if rows else 0,
                                   bool(rows))
            if current == size:
                with open(staged, "rb") as f:
                    if self._same_bytes(path, pa.py_buffer(f.read())):
                        self._mark_read(dataset, day, read_at)
                        return WriteResult(dataset, day, self.location(dataset, day), rows, 0, 0, size, False)
            table = pq.read_table(staged, schema=schemas.DATASETS[dataset][0])
            return self._write_locked(dataset, day, table, list(facts), read_at)

    def replace_day(self, dataset: str, day: str, table: pa.Table) -> WriteResult:
        """Replace the day's file by ``table`` exactly (no retention merge, no sort):
        for derived datasets, recomputed whole from the captured ones (SPEC §11).

        Same file rules as the captured datasets: zstd, atomic replace under the
        day's lock, a day with no rows has no file, and a file that already holds
        these bytes is left alone.
        """
        path, location = self.path(dataset, day), self.location(dataset, day)
        with self.day_lock(dataset, day):
            if table.num_rows == 0:
                changed = self._size(path) is not None
                if changed:
                    self._delete(path)
                data_size = 0
            else:
                sink = pa.BufferOutputStream()
                pq.write_table(table, sink, compression="zstd", row_group_size=256 * 1024)
                data = sink.getvalue()
                data_size = data.size
                changed = not self._same_bytes(path, data)
                if changed:
                    self._put(path, data)
        log.info("hermes.warehouse.day_replaced", dataset=dataset, day=day, rows=table.num_rows, changed=changed)
        return WriteResult(dataset, day, location, table.num_rows, 0, 0, data_size, changed)

    # -- read watermarks (a file beside the data, so data files stay byte-identical) ----

    def _watermark_path(self, dataset: str, day: str) -> str:
        return f"{self.day_dir(dataset, day)}/{READ_AT_FILE}"

    def _superseded(self, dataset: str, day: str, read_at: float | None) -> WriteResult | None:
        if read_at is None:
            return None
        try:
            newest = float(self._read_small(self._watermark_path(dataset, day)).strip() or 0)
        except (FileNotFoundError, ValueError):
            return None
        if newest <= read_at:
            return None
        path = self.path(dataset, day)
        size = self._size(path)
        rows = self._num_rows(path) if size is not None else 0
        log.warning("hermes.warehouse.superseded", dataset=dataset, day=day, read_at=read_at, newest=newest)
        return WriteResult(dataset, day, self.location(dataset, day), rows, 0, 0, size or 0, False, superseded=True)

    def _mark_read(self, dataset: str, day: str, read_at: float | None) -> None:
        if read_at is None:
            return
        target = self._watermark_path(dataset, day)
        if not self.posix:
            self._put(target, pa.py_buffer(repr(read_at).encode()))
            return
        folder = os.path.dirname(target)
        for entry in os.listdir(folder):  # left by a writer killed mid-way (we hold the lock)
            if entry.startswith(READ_AT_FILE + ".") and entry.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, entry))
        tmp = target + f".{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(repr(read_at))
        os.replace(tmp, target)

    def rewrite_day(self, dataset: str, day: str, keep_mask_fn) -> tuple[int, int]:
        """Drop rows for which ``keep_mask_fn(table)`` is false. -> (rows removed, rows left)."""
        with self.day_lock(dataset, day):
            old = self.read(dataset, day)
            if old is None:
                return 0, 0
            table = old.filter(keep_mask_fn(old))
            removed = old.num_rows - table.num_rows
            if removed:
                self._replace(dataset, day, table, _count_source_deleted(dataset, table), removed)
            return removed, table.num_rows

    def _carry_over(self, dataset: str, day: str, new: pa.Table, facts: list[StoreFacts]):
        """Rows of the day's file not in ``new``: kept (flagged) when their source is gone.

        Reads only the key columns unless some old row is missing from ``new``.
        """
        key_columns = list(schemas.DATASETS[dataset][1])
        old_keys = self.read(dataset, day, columns=key_columns)
        if old_keys is None or old_keys.num_rows == 0:
            return None, 0
        missing = pc.invert(pc.is_in(_key_strings(dataset, old_keys), value_set=_key_strings(dataset, new)))
        if not pc.any(missing).as_py():
            return None, 0
        leftovers = self.read(dataset, day).filter(missing)
        by_path = {f.path: f for f in facts}
        by_hash = {f.path_hash: f for f in facts}
        present = _message_parts(new) if dataset == GATEWAY else frozenset()
        keep, flag = [], []
        for row in leftovers.to_pylist():
            fate = _fate(dataset, row, by_path, by_hash, present)
            keep.append(fate is not None)
            flag.append(bool(fate))
        kept = leftovers.filter(pa.array(keep, pa.bool_()))
        kept = _flag(dataset, kept, [f for f, k in zip(flag, keep) if k])
        return kept, len(keep) - sum(keep)

    def _replace(self, dataset: str, day: str, table: pa.Table, retained: int, dropped: int) -> WriteResult:
        path = self.path(dataset, day)
        location = self.location(dataset, day)
        if table.num_rows == 0:
            changed = self._size(path) is not None
            if changed:
                self._delete(path)
            return WriteResult(dataset, day, location, 0, 0, dropped, 0, changed)
        data = encode(dataset, table)
        changed = not self._same_bytes(path, data)
        if changed:
            self._put(path, data)
        log.info("hermes.warehouse.day_written", dataset=dataset, day=day, rows=table.num_rows,
                 retained=retained, dropped=dropped, changed=changed)
        return WriteResult(dataset, day, location, table.num_rows, retained, dropped, data.size, changed)

    # -- the filesystem primitives: POSIX, or pyarrow.fs ------------------------------

    def _same_bytes(self, path: str, data: pa.Buffer) -> bool:
        if self.posix:
            return _same_bytes(path, data)
        try:
            with self.fs.open_input_file(path) as f:
                return f.size() == data.size and f.read() == data.to_pybytes()
        except FileNotFoundError:
            return False

    def _read_small(self, path: str) -> str:
        if self.posix:
            with open(path) as f:
                return f.read()
        with self.fs.open_input_stream(path) as f:  # a missing file raises FileNotFoundError
            return f.read().decode()

    def _put(self, path: str, data: pa.Buffer) -> None:
        """Replace ``path`` by ``data`` atomically (called under the day's lock)."""
        if self.posix:
            _atomic_write(path, data)
            return
        fs = self.fs
        folder, _, name = path.rpartition("/")
        # An object store publishes an upload whole when it completes: write in place.
        # Elsewhere write a temp file and rename it; its name is fixed per target (we
        # hold the day's lock), so a killed writer's leftover is simply overwritten.
        tmp = path if fs.type_name in ATOMIC_UPLOAD else f"{folder}/.{name}.tmp"
        try:
            try:
                out = fs.open_output_stream(tmp)
            except FileNotFoundError:  # a filesystem with real folders (file://, hdfs://)
                fs.create_dir(folder, recursive=True)
                out = fs.open_output_stream(tmp)
            with out:
                out.write(data)
            if tmp != path:
                fs.move(tmp, path)
        except BaseException as exc:
            if tmp != path:
                with contextlib.suppress(OSError):
                    fs.delete_file(tmp)
            if isinstance(exc, OSError):
                raise OSError(exc.errno, f"{exc} (while writing {self._uri(path)}: the previous file is "
                              "unchanged; re-run)") from exc
            raise

    def _put_staged(self, staged: str, path: str) -> None:
        if self.posix:
            with open(staged, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(staged, path)
            _fsync_dir(os.path.dirname(path))
            return
        with open(staged, "rb") as f:
            self._put(path, pa.py_buffer(f.read()))

    def _delete(self, path: str) -> None:
        if self.posix:
            os.unlink(path)
            _fsync_dir(os.path.dirname(path))
        else:
            self.fs.delete_file(path)


def encode(dataset: str, table: pa.Table) -> pa.Buffer:
    """A day's table as the exact bytes of its partition file (sorted, zstd)."""
    sort = schemas.DATASETS[dataset][2]
    if not is_sorted(table, sort):
        table = table.sort_by([(c, "ascending") for c in sort])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", row_group_size=256 * 1024)
    return sink.getvalue()


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


def _same_bytes(path: str, data: pa.Buffer) -> bool:
    try:
        if os.path.getsize(path) != data.size:
            return False
        with open(path, "rb") as f:
            return f.read() == data.to_pybytes()
    except FileNotFoundError:
        return False


def _atomic_write(path: str, data: pa.Buffer) -> None:
    """Replace ``path`` by ``data``: temp file in the same folder, fsync, rename, fsync the folder.

    Called under the day's lock, so any other temp file in the folder belongs to a
    writer that died (kill -9, power loss) before its rename: removed here.
    """
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".{PART_FILE}.{os.getpid()}.tmp")
    _remove_stale_temps(folder)
    try:
        with open(tmp, "wb") as f:
            f.write(memoryview(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # a failed write() names no file: say which partition, and that it is intact
            raise OSError(exc.errno, f"{exc.strerror} while writing {path}: the previous file is "
                          "unchanged; free some space and re-run") from exc
        raise
    _fsync_dir(folder)


def _remove_stale_temps(folder: str) -> None:
    for name in os.listdir(folder):
        if name.startswith(f".{PART_FILE}.") and name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, name))


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# retention (SPEC §6, D13)
# --------------------------------------------------------------------------


def _key_strings(dataset: str, table: pa.Table) -> pa.Array:
    if dataset == GATEWAY:
        return table.column("part_id")
    return pc.binary_join_element_wise(
        table.column("store"), pc.cast(table.column("id"), pa.string()), "\x1f"
    )


def _message_parts(table: pa.Table) -> frozenset:
    """``(session_id, provider_uuid)`` of every canonical row: which messages of which session have parts."""
    return frozenset(zip(table.column("session_id").to_pylist(), table.column("provider_uuid").to_pylist()))


def _fate(dataset: str, row: dict, by_path: dict, by_hash: dict, present: frozenset = frozenset()) -> bool | None:
    """None: drop the row; False: keep as is; True: keep, flagged source_deleted.

    ``present`` (canonical rows only): the ``(session_id, provider_uuid)`` pairs of the new rows.
    """
    if dataset == GATEWAY:
        attrs = loads(row["attributes"]) if row["attributes"] else {}
        gateway = attrs.get("gateway", {})
        facts = by_hash.get(gateway.get("source_path_hash"))
        sid = gateway.get("native_id")
        mid = row["provider_uuid"]
        mid = int(mid) if mid is not None and mid.isdigit() else None
        end_row = row["message_id"].endswith("-session_end")
    else:
        facts = by_path.get(row["store"])
        sid = row["id"] if dataset == SESSIONS else row["session_id"]
        mid = row["id"] if dataset == MESSAGES else None
        end_row = False
    if facts is None:  # a store not read in this run: not ours to judge
        return False
    if sid in facts.ignored:
        return None
    if sid not in facts.sessions:  # the whole session is gone from the store
        return True
    if dataset == SESSIONS or end_row:  # the session exists (maybe now not ended, or moved)
        return None
    if mid is not None and mid not in facts.mids:
        return True  # the message is gone (deleted, pruned, or /retry renumbered it)
    if dataset == GATEWAY and mid is not None and (row["session_id"], row["provider_uuid"]) not in present:
        # The mid exists on this day, but not as a message of this session: a store
        # restored from a backup (or a fresh one) hands old ids to new messages of
        # other sessions. ``facts.mids`` is per day, so only the new rows can tell.
        return True
    return None  # the message exists but yields fewer parts now, or moved to another day


def _flag(dataset: str, table: pa.Table, flags: list[bool]) -> pa.Table:
    if not any(flags):
        return table
    if dataset != GATEWAY:
        current = table.column("source_deleted").to_pylist()
        values = pa.array([c or f for c, f in zip(current, flags)], pa.bool_())
        idx = table.schema.get_field_index("source_deleted")
        return table.set_column(idx, table.schema.field(idx), values)
    idx = table.schema.get_field_index("attributes")
    attrs = table.column("attributes").to_pylist()
    out = []
    for text, flag in zip(attrs, flags):
        if flag:
            value = loads(text) if text else {}
            value.setdefault("hermes", {})["source_deleted"] = True
            text = dumps(value, normalized=True)
        out.append(text)
    typ = schemas.AI_GATEWAY_MESSAGES.field("attributes").type
    return table.set_column(idx, table.schema.field(idx), pa.ExtensionArray.from_storage(typ, pa.array(out, pa.string())))


def _count_source_deleted(dataset: str, table: pa.Table) -> int:
    if dataset != GATEWAY:
        return pc.sum(table.column("source_deleted")).as_py() or 0
    column = table.column("attributes")
    strings = pa.chunked_array([c.storage for c in column.chunks], pa.string())
    return pc.sum(pc.match_substring(strings, '"source_deleted":true')).as_py() or 0
