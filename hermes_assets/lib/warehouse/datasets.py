"""Writing the datasets' partition files (SPEC §2, §6); where they are and reading them is
:mod:`~hermes_assets.lib.warehouse.day_files`'s.

A captured day's file is each host's own; a derived day's (the analytics) is one file
every host computes and writes (:meth:`Warehouse.replace_day`: a conditional write).
Files are zstd, sorted, replaced atomically under a per-day lock, so two runs of one
host never interleave on one day. A rewrite keeps rows whose source vanished from the
store, flagged ``source_deleted`` (D13, :mod:`~hermes_assets.lib.warehouse.retention`).
Files are private by default (D16): folders ``0700``, files ``0600``, whatever the umask.

A run reads a day's old file once (its bytes): the stage step reads it for the
births of the day's ids, merges the new rows with it there, and the write step
puts the result in place when the old file is still the one read
(:mod:`~hermes_assets.lib.warehouse.day_merge`). The new file is encoded once and
replaces the old one only when the bytes differ.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS
from hermes_assets.lib.hosts import unscoped_ids
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.storage import local_files
from hermes_assets.lib.warehouse import day_merge, host_layout, partition_file, read_marks
from hermes_assets.lib.warehouse.day_files import DayFiles
from hermes_assets.lib.warehouse.day_merge import PreparedWrite, WriteResult
from hermes_assets.lib.warehouse.host_layout import LayoutMove
from hermes_assets.lib.warehouse.partition_file import DayFile
from hermes_assets.lib.warehouse.retention import count_source_deleted

log = get_logger()


@dataclass(frozen=True)
class EncodedDay:
    """A day's rows encoded already as its file (on a worker): ``path``, the file of ``table``,
    whose rows are of the stores ``stores`` (their paths)."""

    path: str
    table: pa.Table
    stores: frozenset[str]


class Warehouse(DayFiles):
    """The dataset root: a local folder, or any URI pyarrow's filesystem layer opens
    (see :mod:`~hermes_assets.lib.storage.interface` for what differs between them); its
    files as :class:`DayFiles` finds and reads them, written here."""

    # -- the layout of several hosts (:mod:`.hosts`, :mod:`.host_layout`) -----------

    def adopt_legacy(self) -> LayoutMove:
        """Move the days of a warehouse from before hosts had their own files to this host's
        folders, once (:func:`~hermes_assets.lib.warehouse.host_layout.adopt_legacy`)."""
        return host_layout.adopt_legacy(self)

    def settle_ids(self, *, legacy: bool = False) -> bool:
        """Whether this host's ids are scoped by its label
        (:func:`~hermes_assets.lib.warehouse.host_layout.settle_ids`)."""
        return unscoped_ids.settle_ids(self, legacy=legacy)

    def claims(self) -> dict[str, str]:
        """Every host's claim on the unscoped ids: label -> what it says."""
        return unscoped_ids.claims(self)

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
        unscoped_ids.fix_claim_modes(self)
        stamp = self.redaction_stamp
        if os.path.isfile(stamp):
            os.chmod(stamp, self.modes.file)
        if self.storage.local:
            local_files.chmod_dir(self.root, self.modes)
            tops += [
                os.path.join(self.root, dataset)
                for dataset in (*CAPTURE_DATASETS, *schemas.ANALYTICS, *schemas.SECRETS, schemas.EXPOSURES)
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

    def replace_day(
        self, dataset: str, day: str, table: pa.Table, read: tuple[pa.Buffer, str] | None
    ) -> WriteResult | None:
        """Replace the day's file by ``table`` as it is (no retention merge; no rows = no file)
        when it is still the file ``read`` (:meth:`read_versioned`; None: there was none), in
        one conditional write (:meth:`Storage.put_if`) under the day's lock; None, nothing
        written, when another writer replaced it since. For a derived dataset, which every
        host computes over all hosts' files and several may write at once."""
        with self.day_lock(dataset, day):  # derived datasets: no redaction version of their own
            changed, size = self._put_if(dataset, self.path(dataset, day), table, read)
            if changed is None:
                return None
            self.fix_modes(dataset, day)
        log.info("hermes.warehouse.day_written", dataset=dataset, day=day, rows=table.num_rows, changed=changed)
        return WriteResult(dataset, day, self.location(dataset, day), table.num_rows, 0, 0, size, changed)

    def _put_if(
        self, dataset: str, path: str, table: pa.Table, read: tuple[pa.Buffer, str] | None
    ) -> tuple[bool | None, int]:
        """``table`` in place of ``path`` if it is still the file ``read`` (the caller holds its
        lock) -> (changed, or None when another writer replaced it; the new file's size)."""
        old, version = (None, None) if read is None else read
        data = partition_file.encode(dataset, table) if table.num_rows else None
        changed = (data is None) != (old is None) or (
            data is not None and old is not None and not partition_file.same_bytes(old, data)
        )
        if changed and data is not None and not self.storage.put_if(path, data, version):
            return None, 0
        if changed and data is None:
            with contextlib.suppress(FileNotFoundError):  # removed by another host's run too
                self.storage.delete(path)
        return changed, 0 if data is None else data.size

    def merge_day(
        self,
        dataset: str,
        day: str,
        facts: Iterable[StoreFacts],
        read_at: float | None,
        merge: Callable[[pa.Table | None, list[StoreFacts]], pa.Table],
        encoded: EncodedDay | None = None,
    ) -> WriteResult:
        """Replace this host's file of the day by ``merge(its rows or None, the stores of ``facts``
        read no earlier than the file's marks)``, atomically, under the day's lock, and mark those
        stores read at ``read_at`` (no lost update, :mod:`.read_marks`); no rows = no file; the file
        records the warehouse's redaction version. For a dataset that merges its own way (the
        sightings: :mod:`~hermes_assets.lib.redaction.sighting_files`).

        ``encoded``: the merge's result when the day had no file, encoded already (on a worker),
        put in place as it is (:meth:`_put_encoded`) when the day still has no file and every store
        of its rows is fresh (the merge would keep them all, and nothing else); otherwise, or when
        the staged file is gone, the day is merged."""
        with self.day_lock(dataset, day):
            marks = self._read_marks(dataset, day)
            fresh = read_marks.fresh(facts, marks, read_at)
            data = self.storage.read_bytes(self.path(dataset, day))
            result = None
            if encoded is not None and data is None and encoded.stores <= {f.path for f in fresh}:
                with contextlib.suppress(FileNotFoundError):  # no longer staged: merged
                    result = self._put_encoded(dataset, day, encoded.path, encoded.table)
            if result is None:
                old = None if data is None else partition_file.decode(dataset, data)
                result = self._replace(dataset, day, merge(old, fresh), 0, data)
            if read_at is not None and fresh:
                self._write_marks(dataset, day, read_marks.marked(marks, fresh, read_at))
            self.fix_modes(dataset, day)
            return result

    # -- a dataset that is one file, not partitioned -----------------------------------

    def whole_path(self, dataset: str) -> str:
        """The one file of a dataset that is not partitioned: ``<root>/<dataset>/part-0.parquet``."""
        return self.storage.join(self.root, dataset, host_layout.PART_FILE)

    def read_whole(self, dataset: str) -> pa.Table | None:
        """The rows of a dataset that is not partitioned (``None`` when it has no file)."""
        return self._read_file(dataset, self.whole_path(dataset), None, None)

    def read_whole_versioned(self, dataset: str) -> tuple[pa.Buffer, str] | None:
        """The one file of a dataset that is not partitioned and its version, or None: no file."""
        return self.storage.read_versioned(self.whole_path(dataset))

    def replace_whole(self, dataset: str, table: pa.Table, read: tuple[pa.Buffer, str] | None) -> WriteResult | None:
        """:meth:`replace_day` for the one file of a dataset that is not partitioned: ``table``
        in its place if it is still the file ``read`` (a conditional write under its lock, with
        the warehouse's modes; no rows = no file; the same bytes: untouched); None, nothing
        written, when another writer replaced it since."""
        path = self.whole_path(dataset)
        with self.storage.lock(dataset):
            changed, size = self._put_if(dataset, path, table, read)
            if changed is None:
                return None
            self.storage.fix_modes(self.storage.join(self.root, dataset))
        log.info("hermes.warehouse.file_written", dataset=dataset, rows=table.num_rows, changed=changed)
        return WriteResult(dataset, "", self.storage.location(path), table.num_rows, 0, 0, size, changed)

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
    ) -> WriteResult:
        """Put ``table`` in place of the day's file (``old``: its current bytes, or None).
        ``redaction_version``: what the file records (True: this warehouse's)."""
        if redaction_version is True:
            redaction_version = self.redaction_version
        path = self.path(dataset, day)
        location = self.location(dataset, day)
        if table.num_rows == 0:
            if old is not None:
                self.storage.delete(path)
            return WriteResult(dataset, day, location, 0, 0, dropped, 0, old is not None)
        data = partition_file.encode(dataset, table, redaction_version or None)
        changed = old is None or not partition_file.same_bytes(old, data)
        if changed:
            self.storage.put(path, data)
        retained = count_source_deleted(dataset, table)
        log.debug(  # one per day and dataset: printed at HERMES_ASSETS_LOG_LEVEL=debug
            "hermes.warehouse.day_written",
            dataset=dataset,
            day=day,
            rows=table.num_rows,
            retained=retained,
            dropped=dropped,
            changed=changed,
        )
        return WriteResult(dataset, day, location, table.num_rows, retained, dropped, data.size, changed)

    def _put_encoded(self, dataset: str, day: str, encoded: str, table: pa.Table | None = None) -> WriteResult:
        """A day with no file yet takes an encoded file as it is: on disk a hard link into
        the day's folder and a rename (no copy; the staged file stays until the run's write
        step is done, so a re-execution from failure still finds it). ``table``: its rows,
        when the caller has them (else their count is read from the file's footer)."""
        rows = pq.ParquetFile(encoded).metadata.num_rows if table is None else table.num_rows
        retained = 0 if table is None else count_source_deleted(dataset, table)  # a first capture keeps none
        size = os.path.getsize(encoded)
        self.storage.put_file(self.path(dataset, day), encoded)
        log.debug(
            "hermes.warehouse.day_written",
            dataset=dataset,
            day=day,
            rows=rows,
            retained=retained,
            dropped=0,
            changed=True,
        )
        return WriteResult(dataset, day, self.location(dataset, day), rows, retained, 0, size, True)

    # -- read marks: per store, a small file beside the data ----------------------------

    def marks_path(self, dataset: str, day: str) -> str:
        return self.storage.join(self.file_dir(dataset, day), read_marks.READ_AT_FILE)

    def _read_marks(self, dataset: str, day: str) -> dict[str, float]:
        return read_marks.parse(self.storage.read_bytes(self.marks_path(dataset, day)))

    def _write_marks(self, dataset: str, day: str, marks: dict[str, float]) -> None:
        self.storage.put(self.marks_path(dataset, day), read_marks.render(marks), durable=False)
