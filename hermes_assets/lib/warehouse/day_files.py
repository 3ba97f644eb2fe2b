"""Where a warehouse's day files are, which there are, and what they hold (SPEC §2).

``<root>/<dataset>/day=YYYY-MM-DD/host=<label>/part-0.parquet`` for a captured
dataset (each host its own file, :mod:`~hermes_assets.lib.hosts.host_labels`),
``<root>/<dataset>/day=YYYY-MM-DD/part-0.parquet`` for a derived one (the sightings of
secrets are each host's too; the exposures are one file, ``<root>/<dataset>/part-0.parquet``). The root is a
local folder or any URI ``pyarrow.fs`` opens: how each file operation is done there
is the :mod:`~hermes_assets.lib.storage.interface`'s. Writing them is
:class:`~hermes_assets.lib.warehouse.datasets.Warehouse`'s.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import PER_HOST
from hermes_assets.lib.hosts import host_labels
from hermes_assets.lib.storage.arrow_storage import open_storage
from hermes_assets.lib.storage.local_files import PRIVATE, FileModes
from hermes_assets.lib.warehouse import partition_file
from hermes_assets.lib.warehouse.day_merge import WriteResult
from hermes_assets.lib.warehouse.host_layout import PART_FILE, REDACTION_STAMP, STAGING
from hermes_assets.lib.warehouse.partition_file import DayFile


class DayFiles:
    """A warehouse's files as one host sees them: where each day's file is, which there are,
    their rows, and the day's lock (:class:`~hermes_assets.lib.warehouse.datasets.Warehouse`
    writes them)."""

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
        self.host = host_labels.check_label(host) if host is not None else host_labels.default_label()
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
        return os.path.join(self.storage.spool, STAGING, host_labels.folder(self.host))

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
        return self.storage.join(self.day_dir(dataset, day), host_labels.folder(host or self.host))

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
        for found in self.storage.files_under(self.storage.join(self.root, dataset), depth=3, name=PART_FILE):
            parts = found.path.split("/")
            if parts[-1] != PART_FILE or not parts[0].startswith("day="):
                continue
            if len(parts) == 2:
                out.append((parts[0][4:], None))
            elif len(parts) == 3 and (host := host_labels.label_of(parts[1])) is not None:
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
        found = self.storage.files_under(self.day_dir(dataset, day), depth=2, name=PART_FILE)
        return sorted(
            h
            for f in found
            if f.path.endswith("/" + PART_FILE) and (h := host_labels.label_of(f.path.partition("/")[0])) is not None
        )

    def day_stamp(self, dataset: str, day: str) -> tuple:
        """What tells one state of a day's files (every host's) from the next: their names,
        sizes, times, and inodes on disk or versions (ETags, generations) on an object store,
        so a file replaced within the same second by one of the same size differs. A derived
        day computed from a stamp that still holds after it was written was computed from the
        files as they are."""
        found = self.storage.files_under(self.day_dir(dataset, day), depth=2, name=PART_FILE)
        return tuple(sorted(f for f in found if f.path.rpartition("/")[2] == PART_FILE))

    def dataset_stamp(self, dataset: str) -> tuple:
        """:meth:`day_stamp` of every day of ``dataset`` at once (a table computed over all of them)."""
        found = self.storage.files_under(self.storage.join(self.root, dataset), depth=3, name=PART_FILE)
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
        with self.storage.lock(key if dataset not in PER_HOST else f"{key}/{host_labels.folder(self.host)}"):
            yield

    def read_versioned(self, dataset: str, day: str) -> tuple[pa.Buffer, str] | None:
        """The day's file and its version (:meth:`Storage.read_versioned`), or None: no file."""
        return self.storage.read_versioned(self.path(dataset, day))

    def current(self, dataset: str, day: str, *, superseded: bool = False) -> WriteResult:
        """The day's file as it stands, left unchanged (its row count from the footer)."""
        try:
            with self.storage.open_input(self.path(dataset, day)) as f:
                rows, size = pq.ParquetFile(f).metadata.num_rows, f.size()
        except FileNotFoundError:
            rows = size = 0
        return WriteResult(dataset, day, self.location(dataset, day), rows, 0, 0, size, False, superseded=superseded)
