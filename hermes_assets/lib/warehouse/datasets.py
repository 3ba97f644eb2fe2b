"""Partition files of the datasets (SPEC §2, §6).

``<root>/<dataset>/day=YYYY-MM-DD/host=<label>/part-0.parquet`` for a captured
dataset (each host its own file, :mod:`~hermes_assets.lib.warehouse.hosts`),
``<root>/<dataset>/day=YYYY-MM-DD/part-0.parquet`` for a derived one; zstd,
sorted, replaced atomically under a per-day lock, so two runs of one host never
interleave on one day. A
rewrite keeps rows whose source vanished from the store, flagged
``source_deleted`` (D13, :mod:`~hermes_assets.lib.warehouse.retention`). Files are
private by default (D16): folders ``0700``, files ``0600``, whatever the umask.

A run reads a day's old file once (its bytes): the stage step reads it for the
births of the day's ids, merges the new rows with it there, and the write step
puts the result in place when the old file is still the one read
(:mod:`~hermes_assets.lib.warehouse.day_merge`). The new file is encoded once and
replaces the old one only when the bytes differ.

The root is a local folder or any URI ``pyarrow.fs`` opens (``s3://…``,
``file:///…``): how each file operation is done there is the
:mod:`~hermes_assets.lib.warehouse.storage`'s.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from hermes_assets.lib import schemas
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.schemas import CAPTURE_DATASETS, PER_HOST
from hermes_assets.lib.warehouse import day_merge, host_layout, hosts, local_files, partition_file, read_marks
from hermes_assets.lib.warehouse.arrow_storage import ArrowStorage
from hermes_assets.lib.warehouse.day_merge import PreparedWrite, WriteResult
from hermes_assets.lib.warehouse.host_layout import PART_FILE, REDACTION_STAMP, STAGING, LayoutMove
from hermes_assets.lib.warehouse.local_files import PRIVATE, FileModes
from hermes_assets.lib.warehouse.partition_file import DayFile
from hermes_assets.lib.warehouse.retention import count_source_deleted
from hermes_assets.lib.warehouse.storage import LocalStorage, Storage

log = get_logger()


def open_storage(uri: str, *, spool: str | None = None, modes: FileModes = PRIVATE, owner: str = "") -> Storage:
    """A plain path is :class:`LocalStorage`; a URI :class:`ArrowStorage`. ``owner``: the host
    whose temp files this storage writes and may clean up (:func:`local_files.temp_name`)."""
    scheme = urlparse(uri).scheme
    if len(scheme) > 1:  # "C:\\x" is a path
        return ArrowStorage(uri, scheme.lower(), spool=spool, modes=modes, owner=owner)
    return LocalStorage(uri, modes=modes, owner=owner)


class Warehouse:
    """The dataset root: a local folder, or any URI pyarrow's filesystem layer opens
    (see :mod:`~hermes_assets.lib.warehouse.storage` for what differs between them)."""

    def __init__(
        self,
        root: str,
        *,
        spool: str | None = None,
        modes: FileModes = PRIVATE,
        redaction_version: str | None = None,
        host: str | None = None,
        host_named: bool = False,
    ):
        #: this host's label: its own files are ``day=<day>/host=<label>/`` (:mod:`.hosts`)
        self.host = hosts.check_label(host) if host is not None else hosts.default_label()
        #: the label was set (``HERMES_ASSETS_HOST``): its ids are scoped unless it moved a warehouse from before
        self.host_named = host_named
        # the temp files of a replace name their host: hosts sharing a folder never clash
        self.storage = open_storage(root, spool=spool, modes=modes, owner=self.host)
        #: what a capture file written here records (None: the run does not redact)
        self.redaction_version = redaction_version

    @property
    def uri(self) -> str:
        return self.storage.uri

    @property
    def root(self) -> str:
        return self.storage.root

    @property
    def modes(self) -> FileModes:
        return self.storage.modes

    @property
    def staging_root(self) -> str:
        """This host's staged days (a local warehouse's spool is the folder itself, which
        several hosts may share: each host sweeps and purges only its own staging)."""
        return os.path.join(self.storage.spool, STAGING, hosts.folder(self.host))

    @property
    def redaction_stamp(self) -> str:
        """This host's redaction stamp: each host redacts, and vouches for, its own files only
        (several hosts on one folder may redact differently, or not at all)."""
        return os.path.join(self.staging_root, REDACTION_STAMP)

    def make_spool_dirs(self, folder: str) -> None:
        """Create a folder of the spool (staging, locks) with the folder mode."""
        self.storage.make_spool_dirs(folder)

    # -- paths ------------------------------------------------------------------

    def day_dir(self, dataset: str, day: str) -> str:
        """The day's folder, shared by every host (a captured dataset's files are in its hosts' folders)."""
        return self.storage.join(self.root, dataset, f"day={day}")

    def file_dir(self, dataset: str, day: str, host: str | None = None) -> str:
        """The folder of a day's file: the host's own folder for a dataset each host writes (the
        captured ones and the sightings: ``host``, default this one), the day's folder for a
        derived one (computed over every host)."""
        if dataset not in PER_HOST:
            return self.day_dir(dataset, day)
        return self.storage.join(self.day_dir(dataset, day), hosts.folder(host or self.host))

    def path(self, dataset: str, day: str, host: str | None = None) -> str:
        """The day's file of this host (or ``host``) as this warehouse's filesystem names it
        (a local path, or ``bucket/key``)."""
        return self.storage.join(self.file_dir(dataset, day, host), PART_FILE)

    def legacy_path(self, dataset: str, day: str) -> str:
        """Where a warehouse written before hosts had their own files keeps a day (:mod:`.hosts`)."""
        return self.storage.join(self.day_dir(dataset, day), PART_FILE)

    def location(self, dataset: str, day: str) -> str:
        """The day's file as a user names it: a local path, or a URI (``s3://bucket/key``)."""
        return self.storage.location(self.path(dataset, day))

    def files(self, dataset: str) -> list[tuple[str, str | None]]:
        """``(day, host)`` of every partition file of ``dataset`` (host None: a derived
        dataset's file, or a captured day not yet moved to its host's folder)."""
        out: list[tuple[str, str | None]] = []
        for found in self.storage.files_under(self.storage.join(self.root, dataset), depth=3):
            parts = found.path.split("/")
            if parts[-1] != PART_FILE or not parts[0].startswith("day="):
                continue
            if len(parts) == 2:
                out.append((parts[0][4:], None))
            elif len(parts) == 3 and (host := hosts.label_of(parts[1])) is not None:
                out.append((parts[0][4:], host))
        return out

    def days(self, dataset: str) -> list[str]:
        """The days with a file of ``dataset``, any host's."""
        return sorted({day for day, _ in self.files(dataset)})

    def own_days(self, dataset: str) -> list[str]:
        """The days with a file of this host's (every day of a derived dataset)."""
        if dataset not in PER_HOST:
            return self.days(dataset)
        return sorted({day for day, host in self.files(dataset) if host == self.host})

    def hosts(self, dataset: str, day: str) -> list[str]:
        """The hosts with a file of a captured dataset's day."""
        found = self.storage.files_under(self.day_dir(dataset, day), depth=2)
        return sorted(
            h
            for f in found
            if f.path.endswith("/" + PART_FILE) and (h := hosts.label_of(f.path.partition("/")[0])) is not None
        )

    def day_stamp(self, dataset: str, day: str) -> tuple:
        """What tells one state of a day's files (every host's) from the next: their names,
        sizes, times and inodes. A derived day computed from a stamp that still holds after
        it was written was computed from the files as they are."""
        found = self.storage.files_under(self.day_dir(dataset, day), depth=2)
        return tuple(sorted(f for f in found if f.path.rpartition("/")[2] == PART_FILE))

    def dataset_stamp(self, dataset: str) -> tuple:
        """:meth:`day_stamp` of every day of ``dataset`` at once (a table computed over all of them)."""
        found = self.storage.files_under(self.storage.join(self.root, dataset), depth=3)
        return tuple(sorted(f for f in found if f.path.rpartition("/")[2] == PART_FILE))

    def existing(self, dataset: str, days: Iterable[str], *, own: bool = True) -> set[str]:
        """Which of ``days`` have a file of this host's (``own=False``: of any host's); a stat
        each on disk, one listing on an object store."""
        days = set(days)
        if own and self.storage.cheap_listing:
            return {day for day in days if self.storage.exists(self.path(dataset, day))}
        return set(self.own_days(dataset) if own else self.days(dataset)) & days

    def read(
        self, dataset: str, day: str, columns: list[str] | None = None, *, read_dictionary: list[str] | None = None
    ) -> pa.Table | None:
        """The day's rows, every host's (``None`` when it has no file). ``read_dictionary``
        keeps those columns dictionary-encoded (checks over long repeated strings).

        A captured day not yet moved to its hosts' folders (a warehouse from before them)
        reads from its one file."""
        if dataset not in PER_HOST:
            return self._read_file(dataset, self.path(dataset, day), columns, read_dictionary)
        paths = [self.path(dataset, day, host) for host in self.hosts(dataset, day)] or [self.legacy_path(dataset, day)]
        tables = [t for p in paths if (t := self._read_file(dataset, p, columns, read_dictionary)) is not None]
        if not tables:
            return None
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")

    def read_own(
        self, dataset: str, day: str, columns: list[str] | None = None, *, read_dictionary: list[str] | None = None
    ) -> pa.Table | None:
        """This host's rows of the day (``None`` when it has no file): what its runs wrote."""
        return self._read_file(dataset, self.path(dataset, day), columns, read_dictionary)

    def _read_file(
        self, dataset: str, path: str, columns: list[str] | None, read_dictionary: list[str] | None
    ) -> pa.Table | None:
        schema = schemas.schema_of(dataset)
        if read_dictionary:  # the same schema (a column older files lack still reads as its default)
            schema = pa.schema(
                [f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in read_dictionary else f for f in schema]
            )
        try:
            with self.storage.open_input(path) as f:
                return partition_file.read(dataset, f, columns, schema)
        except FileNotFoundError:
            return None

    def read_pinned(self, dataset: str, day: str, pin_as: str) -> DayFile | None:
        """The day's file, read whole once, with a pin of it (a hard link at the local path
        ``pin_as``); None when the day has no file, or its storage cannot pin one (an
        object store: :meth:`read` its columns instead)."""
        read = self.storage.read_pinned(self.path(dataset, day), pin_as)
        return None if read is None else DayFile(dataset, *read)

    @contextlib.contextmanager
    def day_lock(self, dataset: str, day: str) -> Iterator[None]:
        """An exclusive lock on one day of one dataset (a lock file beside the data,
        or in the spool for a URI warehouse)."""
        key = f"{dataset}/day={day}"
        with self.storage.lock(key if dataset not in PER_HOST else f"{key}/{hosts.folder(self.host)}"):
            yield

    # -- the layout of several hosts (:mod:`.hosts`, :mod:`.host_layout`) -----------

    def adopt_legacy(self) -> LayoutMove:
        """Move the days of a warehouse from before hosts had their own files to this host's
        folders, once (:func:`~hermes_assets.lib.warehouse.host_layout.adopt_legacy`)."""
        return host_layout.adopt_legacy(self)

    def settle_ids(self, *, legacy: bool = False) -> bool:
        """Whether this host's ids are scoped by its label
        (:func:`~hermes_assets.lib.warehouse.host_layout.settle_ids`)."""
        return host_layout.settle_ids(self, legacy=legacy)

    def claims(self) -> dict[str, str]:
        """Every host's claim on the unscoped ids: label -> what it says."""
        return host_layout.claims(self)

    # -- modes (D16) -------------------------------------------------------------

    def fix_modes(self, dataset: str, day: str) -> None:
        """Set the modes of the root, the dataset and day folders and of every file of the
        day (what an older version, or another umask, left open is closed again)."""
        self.storage.fix_modes(self.file_dir(dataset, day))

    def fix_all_modes(self) -> None:
        """Set the modes of every folder and file of the datasets and of the staged days
        (the purge job: days it did not rewrite included)."""
        tops = [self.staging_root]
        local_files.chmod_dir(os.path.dirname(self.staging_root), self.modes)  # the hosts' staging folder
        host_layout.fix_claim_modes(self)
        stamp = self.redaction_stamp
        if os.path.isfile(stamp):
            os.chmod(stamp, self.modes.file)
        if self.storage.local:
            local_files.chmod_dir(self.root, self.modes)
            tops += [
                os.path.join(self.root, dataset)
                for dataset in (*CAPTURE_DATASETS, *schemas.ANALYTICS, *schemas.SECRETS)
            ]
        for top in tops:
            local_files.chmod_tree(top, self.modes)

    # -- writing ------------------------------------------------------------------

    def write_day(
        self,
        dataset: str,
        day: str,
        new: dict[str, pa.Table | str],
        facts: Iterable[StoreFacts],
        read_at: float | None = None,
        prepared: PreparedWrite | None = None,
    ) -> WriteResult:
        """Merge the day's new rows with what its file holds, and replace the file atomically.

        ``new`` maps each store path in ``facts`` to every current row of the day
        from that store (a store may be absent: no rows): a table, or the path of
        a partition file already encoded from them (:func:`partition_file.encode`),
        which is put in place as it is when it is the day's only input and the day
        has no file yet (a first capture: encoded once, on a worker). Rows of stores
        not in ``facts`` are kept as they are (not ours to judge).

        ``read_at`` is when the stores were read for ``new``. A store already
        written into this file from a later read is left alone (its rows and
        facts are dropped from this write, :mod:`~hermes_assets.lib.warehouse.read_marks`).
        When every store is newer in the file, nothing changes (``superseded``).

        ``prepared``: the same merge, done by the stage step (:meth:`prepare_write`),
        put in place as it is when the file is still the one it read and the same
        stores are written; otherwise the day is merged here.
        """
        facts = list(facts)
        with self.day_lock(dataset, day):
            marks = self._read_marks(dataset, day)
            fresh = read_marks.fresh(facts, marks, read_at)
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
            result = None if prepared is None else self._commit(dataset, day, prepared, fresh)
            if result is None:
                result = self._merge_and_replace(dataset, day, new, fresh)
            if read_at is not None:
                self._write_marks(dataset, day, read_marks.marked(marks, fresh, read_at))
            self.fix_modes(dataset, day)
            return result

    def prepare_write(
        self,
        dataset: str,
        day: str,
        new: dict[str, pa.Table],
        facts: Iterable[StoreFacts],
        read_at: float,
        old: DayFile,
        stage_as: str,
    ) -> PreparedWrite | None:
        """:meth:`write_day`'s merge, done before the write (no lock held) from the ``old`` file
        already read: the stores its marks say are fresh now; the new file staged at ``stage_as``."""
        fresh = read_marks.fresh(facts, self._read_marks(dataset, day), read_at)
        if not fresh:  # the write leaves the day alone
            return None
        return day_merge.prepare(dataset, new, old, fresh, stage_as, self.modes.file, self.redaction_version)

    def _commit(self, dataset: str, day: str, prepared: PreparedWrite, fresh: list[StoreFacts]) -> WriteResult | None:
        """Put a prepared file in place (under the day's lock); None when it no longer holds."""
        path = self.path(dataset, day)
        if prepared.stores != {f.path for f in fresh} or not self.storage.still_current(path, prepared.pin):
            return None
        return day_merge.commit(self.storage, dataset, day, path, self.location(dataset, day), prepared)

    def _merge_and_replace(
        self, dataset: str, day: str, new: dict[str, pa.Table | str], fresh: list[StoreFacts]
    ) -> WriteResult:
        old = self.storage.read_bytes(self.path(dataset, day))
        inputs = [new[f.path] for f in fresh if f.path in new]
        if old is None and len(inputs) == 1 and isinstance(inputs[0], str):
            return self._put_encoded(dataset, day, inputs[0])
        table, carried = day_merge.merge(dataset, inputs, None if old is None else DayFile(dataset, old), fresh)
        result = self._replace(dataset, day, table, carried.dropped, old)
        result.replaced = carried.replaced
        return result

    def replace_day(self, dataset: str, day: str, table: pa.Table) -> WriteResult:
        """Replace the day's file by ``table`` as it is (no retention merge), atomically,
        under the day's lock; no rows = no file. For datasets recomputed whole."""
        with self.day_lock(dataset, day):  # derived datasets: no redaction version of their own
            result = self._replace(dataset, day, table, 0, self.storage.read_bytes(self.path(dataset, day)), None)
            self.fix_modes(dataset, day)
            return result

    def rewrite_file(
        self,
        dataset: str,
        day: str,
        change: Callable[[pa.Table], pa.Table],
        redaction_version: str | None,
    ) -> WriteResult | None:
        """Replace the day's file by ``change(its table)``, atomically, under the day's lock, with
        the warehouse's modes; the file records ``redaction_version``. None: the day has no file.
        The file is rewritten only when its bytes differ (same rows, same version: untouched)."""
        with self.day_lock(dataset, day):
            data = self.storage.read_bytes(self.path(dataset, day))
            if data is None:
                return None
            table = change(partition_file.decode(dataset, data))
            result = self._replace(dataset, day, table, 0, data, redaction_version)
            self.fix_modes(dataset, day)
            return result

    def merge_day(
        self,
        dataset: str,
        day: str,
        facts: Iterable[StoreFacts],
        read_at: float | None,
        merge: Callable[[pa.Table | None, list[StoreFacts]], pa.Table],
    ) -> WriteResult:
        """Replace this host's file of the day by ``merge(its rows or None, the stores of ``facts``
        read no earlier than the file's marks)``, atomically, under the day's lock, and mark those
        stores read at ``read_at`` (no lost update, :mod:`.read_marks`); no rows = no file; the file
        records the warehouse's redaction version. For a dataset that merges its own way (the
        sightings: :mod:`~hermes_assets.lib.redaction.sighting_files`)."""
        with self.day_lock(dataset, day):
            marks = self._read_marks(dataset, day)
            fresh = read_marks.fresh(facts, marks, read_at)
            data = self.storage.read_bytes(self.path(dataset, day))
            old = None if data is None else partition_file.decode(dataset, data)
            result = self._replace(dataset, day, merge(old, fresh), 0, data)
            if read_at is not None and fresh:
                self._write_marks(dataset, day, read_marks.marked(marks, fresh, read_at))
            self.fix_modes(dataset, day)
            return result

    # -- a dataset that is one file, not partitioned -----------------------------------

    def whole_path(self, dataset: str) -> str:
        """The one file of a dataset that is not partitioned: ``<root>/<dataset>/part-0.parquet``."""
        return self.storage.join(self.root, dataset, PART_FILE)

    def read_whole(self, dataset: str) -> pa.Table | None:
        """The rows of a dataset that is not partitioned (``None`` when it has no file)."""
        return self._read_file(dataset, self.whole_path(dataset), None, None)

    def replace_whole(self, dataset: str, table: pa.Table) -> WriteResult:
        """Replace the one file of a dataset that is not partitioned by ``table``, atomically,
        under its lock, with the warehouse's modes; no rows = no file; the same bytes: untouched."""
        path = self.whole_path(dataset)
        with self.storage.lock(dataset):
            result = self._replace(dataset, "", table, 0, self.storage.read_bytes(path), None, path=path)
            self.storage.fix_modes(self.storage.join(self.root, dataset))
            return result

    def rewrite_day(self, dataset: str, day: str, keep_mask_fn: Callable[[pa.Table], pa.Array]) -> tuple[int, int]:
        """Drop rows for which ``keep_mask_fn(table)`` is false. -> (rows removed, rows left).
        (The purge, its one caller, sets the modes of every file after: :meth:`fix_all_modes`.)"""
        with self.day_lock(dataset, day):
            data = self.storage.read_bytes(self.path(dataset, day))
            if data is None:
                return 0, 0
            old = partition_file.decode(dataset, data)
            table = old.filter(keep_mask_fn(old))
            removed = old.num_rows - table.num_rows
            if removed:  # rows removed, none changed: the file's redaction is what it was
                self._replace(dataset, day, table, removed, data, partition_file.redaction_version(data))
            return removed, table.num_rows

    def _replace(
        self,
        dataset: str,
        day: str,
        table: pa.Table,
        dropped: int,
        old: pa.Buffer | None,
        redaction_version: str | bool | None = True,
        *,
        path: str | None = None,
    ) -> WriteResult:
        """Put ``table`` in place of the day's file (``old``: its current bytes, or None), or of
        the file at ``path``. ``redaction_version``: what the file records (True: this warehouse's)."""
        if redaction_version is True:
            redaction_version = self.redaction_version
        path = path or self.path(dataset, day)
        location = self.storage.location(path)
        if table.num_rows == 0:
            if old is not None:
                self.storage.delete(path)
            return WriteResult(dataset, day, location, 0, 0, dropped, 0, old is not None)
        data = partition_file.encode(dataset, table, redaction_version or None)
        changed = old is None or not partition_file.same_bytes(old, data)
        if changed:
            self.storage.put(path, data)
        retained = count_source_deleted(dataset, table)
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
        rows = pq.ParquetFile(encoded).metadata.num_rows
        size = os.path.getsize(encoded)
        self.storage.put_file(self.path(dataset, day), encoded)
        log.info(
            "hermes.warehouse.day_written", dataset=dataset, day=day, rows=rows, retained=0, dropped=0, changed=True
        )
        return WriteResult(dataset, day, self.location(dataset, day), rows, 0, 0, size, True)

    def current(self, dataset: str, day: str, *, superseded: bool = False) -> WriteResult:
        """The day's file as it stands, left unchanged (its row count from the footer)."""
        try:
            with self.storage.open_input(self.path(dataset, day)) as f:
                rows, size = pq.ParquetFile(f).metadata.num_rows, f.size()
        except FileNotFoundError:
            rows = size = 0
        return WriteResult(dataset, day, self.location(dataset, day), rows, 0, 0, size, False, superseded=superseded)

    # -- read marks: per store, a small file beside the data ----------------------------

    def marks_path(self, dataset: str, day: str) -> str:
        return self.storage.join(self.file_dir(dataset, day), read_marks.READ_AT_FILE)

    def _read_marks(self, dataset: str, day: str) -> dict[str, float]:
        return read_marks.parse(self.storage.read_bytes(self.marks_path(dataset, day)))

    def _write_marks(self, dataset: str, day: str, marks: dict[str, float]) -> None:
        self.storage.put(self.marks_path(dataset, day), read_marks.render(marks), durable=False)
