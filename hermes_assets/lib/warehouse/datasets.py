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
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from hermes_assets.lib import schemas
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.schemas import CAPTURE_DATASETS
from hermes_assets.lib.warehouse import day_merge, hosts, local_files, partition_file, read_marks
from hermes_assets.lib.warehouse.day_merge import PreparedWrite
from hermes_assets.lib.warehouse.local_files import PRIVATE, FileModes
from hermes_assets.lib.warehouse.partition_file import DayFile
from hermes_assets.lib.warehouse.retention import count_source_deleted
from hermes_assets.lib.warehouse.storage import open_storage

log = get_logger()


PART_FILE = "part-0.parquet"
#: staged days, under the spool (the root of a local warehouse), one folder per host
STAGING = ".staging"
#: in a host's staging: its files were moved to the hosts' layout, and whether its ids are
#: scoped (:meth:`Warehouse.adopt_legacy`)
LAYOUT_MARK = ".layout-hosts"
#: in the warehouse root: each host's claim on the unscoped ids, ``host=<label>`` (:meth:`Warehouse.settle_ids`)
CLAIMS = ".hosts"
#: what a claim says: tried (the host is settling), held (its ids are unscoped), given up (scoped)
CLAIM_TRIED, CLAIM_HELD, CLAIM_GIVEN_UP = "trying", "unscoped", "scoped"
#: the mark's line that records the host's ids (``ids: scoped`` or ``ids: unscoped``)
_IDS_LINE = "ids: "
#: in a host's staging: the redaction version every capture file of that host has
#: (:mod:`~hermes_assets.lib.warehouse.redaction`); a warehouse from before hosts kept it in the spool
REDACTION_STAMP = ".redaction-version"


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


@dataclass
class LayoutMove:
    """What :meth:`Warehouse.adopt_legacy` moved to this host's folders."""

    files: int = 0
    rows: int = 0
    days: set[str] = field(default_factory=set)
    #: this host's ids are scoped by its label (:meth:`Warehouse.settle_ids`)
    ids_scoped: bool = False

    def metadata(self) -> dict:
        return {
            "layout_files_moved": self.files,
            "layout_rows_moved": self.rows,
            "layout_days_moved": len(self.days),
            "ids_scoped_by_host": self.ids_scoped,
        }


class Warehouse:
    """The dataset root: a local folder, or any URI pyarrow's filesystem layer opens
    (see :mod:`~hermes_assets.lib.warehouse.storage` for what differs between them)."""

    def __init__(
        self,
        root: str,
        *,
        spool: str | None = None,
        modes: FileModes = PRIVATE,
        redaction_version: int | None = None,
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
        """The folder of a day's file: the host's own folder for a captured dataset (``host``,
        default this one), the day's folder for a derived one (computed over every host)."""
        if dataset not in CAPTURE_DATASETS:
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

    def _files(self, dataset: str) -> list[tuple[str, str | None]]:
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
        return sorted({day for day, _ in self._files(dataset)})

    def own_days(self, dataset: str) -> list[str]:
        """The days with a file of this host's (every day of a derived dataset)."""
        if dataset not in CAPTURE_DATASETS:
            return self.days(dataset)
        return sorted({day for day, host in self._files(dataset) if host == self.host})

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
        if dataset not in CAPTURE_DATASETS:
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
        with self.storage.lock(key if dataset not in CAPTURE_DATASETS else f"{key}/{hosts.folder(self.host)}"):
            yield

    # -- the layout of several hosts (:mod:`.hosts`) ------------------------------

    def _layout_mark(self) -> str:
        return os.path.join(self.staging_root, LAYOUT_MARK)

    def adopt_legacy(self) -> LayoutMove:
        """Move every captured day still in the layout from before hosts had their own files
        (``day=<day>/part-0.parquet``) to this host's folder, its rows unchanged but for
        their ``host`` (this one), its read marks with it. Idempotent, and safe to kill: the
        host's file is written before the old one goes (a reader's glob of the hosts' files
        never sees both), and a host file already there wins. Checked once per host: a mark
        in the spool says the move is done."""
        moved = LayoutMove()
        mark = self._layout_mark()
        recorded = self._recorded_ids(mark)
        if recorded is not None:
            os.chmod(mark, self.modes.file)  # private again, whatever an older umask left
            self._fix_claim_modes()
            moved.ids_scoped = recorded
            return moved
        self._adopt_legacy_spool()
        legacy = {dataset: sorted({d for d, h in self._files(dataset) if h is None}) for dataset in CAPTURE_DATASETS}
        moved.ids_scoped = self.settle_ids(legacy=any(legacy.values()))
        for dataset in CAPTURE_DATASETS:
            for day in legacy[dataset]:
                moved.files += 1
                moved.rows += self._adopt_day(dataset, day)
                moved.days.add(day)
        if moved.files:
            log.warning(
                "hermes.warehouse.layout_moved",
                host=self.host,
                files=moved.files,
                rows=moved.rows,
                days=len(moved.days),
                layout=f"<dataset>/day=<day>/{hosts.folder(self.host)}/{PART_FILE}",
            )
        self.storage.make_spool_dirs(os.path.dirname(mark))
        ids_line = _IDS_LINE + (CLAIM_GIVEN_UP if moved.ids_scoped else CLAIM_HELD)
        with local_files.open_private(mark, self.modes.file) as f:
            f.write(f"day=<day>/host=<label>/part-0.parquet\n{ids_line}\n".encode())
        return moved

    @staticmethod
    def _recorded_ids(mark: str) -> bool | None:
        """Whether the mark says this host's ids are scoped (None: no mark, or none that says)."""
        try:
            with open(mark, encoding="ascii") as f:
                lines = f.read().splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        said = [line[len(_IDS_LINE) :] for line in lines if line.startswith(_IDS_LINE)]
        return None if not said or said[-1] not in (CLAIM_HELD, CLAIM_GIVEN_UP) else said[-1] == CLAIM_GIVEN_UP

    # -- ids across hosts -----------------------------------------------------------

    def _claim_path(self, host: str | None = None) -> str:
        return self.storage.join(self.root, CLAIMS, hosts.folder(host or self.host))

    def _fix_claim_modes(self) -> None:
        """The claims' folder and this host's claim get the modes again (a local warehouse)."""
        if not self.storage.local:
            return
        own = self.storage.location(self._claim_path())
        folder = os.path.dirname(own)
        if os.path.isdir(folder):
            local_files.chmod_dir(folder, self.modes)
        if os.path.isfile(own):
            os.chmod(own, self.modes.file)

    def _put_claim(self, state: str) -> None:
        path = self._claim_path()
        if self.storage.local:
            local_files.make_dirs(os.path.dirname(self.storage.location(path)), self.modes, self.root)
        self.storage.put(path, pa.py_buffer(f"{state}\n".encode()))

    def claims(self) -> dict[str, str]:
        """Every host's claim on the unscoped ids: label -> what it says."""
        out = {}
        for found in self.storage.files_under(self.storage.join(self.root, CLAIMS), depth=1):
            label = hosts.label_of(found.path)
            data = None if label is None else self.storage.read_bytes(self._claim_path(label))
            if label is not None and data is not None:
                out[label] = data.to_pybytes().decode("ascii", "replace").strip()
        return out

    def settle_ids(self, *, legacy: bool = False) -> bool:
        """Whether this host's ids are scoped by its label (``<host>:<sid>``), settled once per
        host and kept: a row's id never changes with a later run.

        At most one host of a warehouse keeps the unscoped ids (``<sid>``, as a single host
        always had them), so every id stays unique across hosts whose Hermes session ids
        collide, whether their labels were set or not:

        * the host that moves a warehouse from before (``legacy``: its files, its rows
          byte-identical) holds them, whatever its label;
        * a host whose label was set (``HERMES_ASSETS_HOST``) scopes its ids;
        * a host whose label is its hostname holds them when it is first: it writes its claim
          (``.hosts/host=<label>``), then lists the claims, and holds them only when it finds
          no other host's claim that tried or holds, and no file from before. Of two hosts
          settling at once, at most one finds none (the second to list sees the first's
          claim): at worst both scope their ids, never neither.

        A host's own settled claim, found again (its spool lost: a reboot), says the same.
        """
        own = self.claims().get(self.host)
        if own in (CLAIM_HELD, CLAIM_GIVEN_UP):
            return own == CLAIM_GIVEN_UP
        if legacy:
            self._put_claim(CLAIM_HELD)
            return False
        if self.host_named:
            self._put_claim(CLAIM_GIVEN_UP)
            return True
        self._put_claim(CLAIM_TRIED)
        others = {h: c for h, c in self.claims().items() if h != self.host and c != CLAIM_GIVEN_UP}
        scoped = bool(others)
        self._put_claim(CLAIM_GIVEN_UP if scoped else CLAIM_HELD)
        log.info("hermes.warehouse.ids_settled", host=self.host, scoped=scoped, other_claims=sorted(others))
        return scoped

    def _adopt_legacy_spool(self) -> None:
        """What a warehouse from before kept in its spool becomes this host's, with its files:
        the redaction stamp (it vouched for the files this host now owns) and the staging
        folders of its runs (``.staging/<run id>``: swept, purged and re-executed from here)."""
        spool = self.storage.spool
        self.storage.make_spool_dirs(self.staging_root)
        legacy_stamp = os.path.join(spool, REDACTION_STAMP)
        if os.path.isfile(legacy_stamp) and not os.path.exists(self.redaction_stamp):
            with contextlib.suppress(FileNotFoundError):  # another host took it meanwhile
                os.replace(legacy_stamp, self.redaction_stamp)
        staging = os.path.join(spool, STAGING)
        try:
            entries = list(os.scandir(staging))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(hosts.PREFIX):
                target = os.path.join(self.staging_root, entry.name)
                if not os.path.exists(target):
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(entry.path, target)

    def _adopt_day(self, dataset: str, day: str) -> int:
        """Move one legacy day file to this host's folder (see :meth:`adopt_legacy`); its rows."""
        legacy = self.legacy_path(dataset, day)
        with self.day_lock(dataset, day):
            data = self.storage.read_bytes(legacy)
            if data is None:
                return 0
            rows = 0
            if not self.storage.exists(self.path(dataset, day)):
                table = partition_file.decode(dataset, data)
                idx = table.schema.get_field_index("host")
                column = pa.repeat(pa.scalar(self.host, pa.string()), table.num_rows)
                table = table.set_column(idx, table.schema.field(idx), column)
                # the same redaction version as the old file: its cells are what they were
                version = partition_file.redaction_version(data)
                self.storage.put(self.path(dataset, day), partition_file.encode(dataset, table, version))
                rows = table.num_rows
            old_marks = self.storage.join(self.day_dir(dataset, day), read_marks.READ_AT_FILE)
            marks = self.storage.read_bytes(old_marks)
            if marks is not None:
                if not self.storage.exists(self._marks_path(dataset, day)):
                    self.storage.put(self._marks_path(dataset, day), marks)
                self.storage.delete(old_marks)
            self.storage.delete(legacy)
            self.fix_modes(dataset, day)
        return rows

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
        self._fix_claim_modes()
        stamp = self.redaction_stamp
        if os.path.isfile(stamp):
            os.chmod(stamp, self.modes.file)
        if self.storage.local:
            local_files.chmod_dir(self.root, self.modes)
            tops += [os.path.join(self.root, dataset) for dataset in (*CAPTURE_DATASETS, *schemas.ANALYTICS)]
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
        location = self.location(dataset, day)
        if prepared.rows == 0:
            self.storage.delete(path)
            return WriteResult(dataset, day, location, 0, 0, prepared.dropped, 0, True, replaced=prepared.replaced)
        if prepared.file is not None:
            try:
                self.storage.put_file(path, prepared.file)
            except FileNotFoundError:  # removed by a purge meanwhile: merge again
                return None
        log.info(
            "hermes.warehouse.day_written",
            dataset=dataset,
            day=day,
            rows=prepared.rows,
            retained=prepared.retained,
            dropped=prepared.dropped,
            changed=prepared.changed,
        )
        return WriteResult(
            dataset,
            day,
            location,
            prepared.rows,
            prepared.retained,
            prepared.dropped,
            prepared.bytes,
            prepared.changed,
            replaced=prepared.replaced,
        )

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
        redaction_version: int | bool | None = True,
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

    def _marks_path(self, dataset: str, day: str) -> str:
        return self.storage.join(self.file_dir(dataset, day), read_marks.READ_AT_FILE)

    def _read_marks(self, dataset: str, day: str) -> dict[str, float]:
        return read_marks.parse(self.storage.read_bytes(self._marks_path(dataset, day)))

    def _write_marks(self, dataset: str, day: str, marks: dict[str, float]) -> None:
        self.storage.put(self._marks_path(dataset, day), read_marks.render(marks), durable=False)
