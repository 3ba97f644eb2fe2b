"""Several hosts on one warehouse: moving a warehouse from before to this host's folders,
and which host keeps the unscoped ids (SPEC §2; the layout itself: :mod:`.hosts`).

Functions of a :class:`~hermes_assets.lib.warehouse.datasets.Warehouse` (which calls them
from its methods of the same names): they read and write only the spool, the claims folder
and the legacy files through the warehouse's storage.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS
from hermes_assets.lib.hosts import host_labels, unscoped_ids
from hermes_assets.lib.hosts.unscoped_ids import Host
from hermes_assets.lib.storage import local_files
from hermes_assets.lib.warehouse import partition_file, read_marks

log = get_logger()

PART_FILE = "part-0.parquet"
#: staged days, under the spool (the root of a local warehouse), one folder per host
STAGING = ".staging"
#: in a host's staging: its files were moved to the hosts' layout, and whether its ids are
#: scoped (:meth:`Warehouse.adopt_legacy`)
LAYOUT_MARK = ".layout-hosts"
#: in a host's staging: the lock under which one run of the host moves and settles it
LAYOUT_LOCK = LAYOUT_MARK + ".lock"
#: the mark's line that records the host's ids (``ids: scoped`` or ``ids: unscoped``)
_IDS_LINE = "ids: "
#: in a host's staging: the redaction version every capture file of that host has
#: (:mod:`~hermes_assets.lib.redaction.stored_files`); a warehouse from before hosts kept it in the spool
REDACTION_STAMP = ".redaction-version"
#: in a host's staging: the markers its stored files held are in its sightings
#: (:mod:`~hermes_assets.lib.redaction.stored_markers`)
SIGHTINGS_STAMP = ".sightings-version"


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


class Warehouse(Host, Protocol):
    """What these functions use of a :class:`~hermes_assets.lib.warehouse.datasets.Warehouse`
    (which calls them: this module never imports it)."""

    @property
    def staging_root(self) -> str: ...
    @property
    def redaction_stamp(self) -> str: ...
    def files(self, dataset: str) -> list[tuple[str, str | None]]: ...
    def path(self, dataset: str, day: str, host: str | None = None) -> str: ...
    def legacy_path(self, dataset: str, day: str) -> str: ...
    def day_dir(self, dataset: str, day: str) -> str: ...
    def marks_path(self, dataset: str, day: str) -> str: ...
    def day_lock(self, dataset: str, day: str) -> contextlib.AbstractContextManager[None]: ...
    def fix_modes(self, dataset: str, day: str) -> None: ...


def _layout_mark(wh: Warehouse) -> str:
    return os.path.join(wh.staging_root, LAYOUT_MARK)


def adopt_legacy(wh: Warehouse) -> LayoutMove:
    """Move every captured day still in the layout from before hosts had their own files
    (``day=<day>/part-0.parquet``) to this host's folder, its rows unchanged but for
    their ``host`` (this one), its read marks with it. Idempotent, and safe to kill: the
    host's file is written before the old one goes (a reader's glob of the hosts' files
    never sees both), and a host file already there wins. Checked once per host: a mark
    in the spool says the move is done."""
    mark = _layout_mark(wh)
    lock = os.path.join(os.path.dirname(mark), LAYOUT_LOCK)
    recorded = _recorded_ids(mark)
    if recorded is None:
        wh.storage.make_spool_dirs(os.path.dirname(mark))
        # two runs of this host starting at once (the sensor's first runs on a new warehouse)
        # must not both move and settle: one does, under this host's lock; the other then
        # finds its mark (their writes of one claim would race: each removes the temp files
        # it takes for a dead writer's of this host)
        with local_files.locked(lock, wh.modes.file):
            recorded = _recorded_ids(mark)
            if recorded is None:
                return _adopt(wh, mark)
    for private in (mark, lock):  # private again, whatever an older umask left
        with contextlib.suppress(FileNotFoundError):  # no lock beside a mark from before it
            os.chmod(private, wh.modes.file)
    unscoped_ids.fix_claim_modes(wh)
    return LayoutMove(ids_scoped=recorded)


def _adopt(wh: Warehouse, mark: str) -> LayoutMove:
    """:func:`adopt_legacy`'s move and settling, once per host (its caller holds the lock)."""
    moved = LayoutMove()
    _adopt_legacy_spool(wh)
    legacy = {dataset: sorted({d for d, h in wh.files(dataset) if h is None}) for dataset in CAPTURE_DATASETS}
    moved.ids_scoped = unscoped_ids.settle_ids(wh, legacy=any(legacy.values()))
    for dataset in CAPTURE_DATASETS:
        for day in legacy[dataset]:
            moved.files += 1
            moved.rows += _adopt_day(wh, dataset, day)
            moved.days.add(day)
    if moved.files:
        log.warning(
            "hermes.warehouse.layout_moved",
            host=wh.host,
            files=moved.files,
            rows=moved.rows,
            days=len(moved.days),
            layout=f"<dataset>/day=<day>/{host_labels.folder(wh.host)}/{PART_FILE}",
        )
    wh.storage.make_spool_dirs(os.path.dirname(mark))
    ids_line = _IDS_LINE + (unscoped_ids.CLAIM_GIVEN_UP if moved.ids_scoped else unscoped_ids.CLAIM_HELD)
    with local_files.open_private(mark, wh.modes.file) as f:
        f.write(f"day=<day>/host=<label>/part-0.parquet\n{ids_line}\n".encode())
    return moved


def _recorded_ids(mark: str) -> bool | None:
    """Whether the mark says this host's ids are scoped (None: no mark, or none that says)."""
    try:
        with open(mark, encoding="ascii") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    said = [line[len(_IDS_LINE) :] for line in lines if line.startswith(_IDS_LINE)]
    return (
        None
        if not said or said[-1] not in (unscoped_ids.CLAIM_HELD, unscoped_ids.CLAIM_GIVEN_UP)
        else said[-1] == unscoped_ids.CLAIM_GIVEN_UP
    )


def _adopt_legacy_spool(wh: Warehouse) -> None:
    """What a warehouse from before kept in its spool becomes this host's, with its files:
    the redaction stamp (it vouched for the files this host now owns) and the staging
    folders of its runs (``.staging/<run id>``: swept, purged and re-executed from here)."""
    spool = wh.storage.spool
    wh.storage.make_spool_dirs(wh.staging_root)
    legacy_stamp = os.path.join(spool, REDACTION_STAMP)
    if os.path.isfile(legacy_stamp) and not os.path.exists(wh.redaction_stamp):
        with contextlib.suppress(FileNotFoundError):  # another host took it meanwhile
            os.replace(legacy_stamp, wh.redaction_stamp)
    staging = os.path.join(spool, STAGING)
    try:
        entries = list(os.scandir(staging))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(host_labels.PREFIX):
            target = os.path.join(wh.staging_root, entry.name)
            if not os.path.exists(target):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(entry.path, target)


def _adopt_day(wh: Warehouse, dataset: str, day: str) -> int:
    """Move one legacy day file to this host's folder (see :func:`adopt_legacy`); its rows."""
    legacy = wh.legacy_path(dataset, day)
    with wh.day_lock(dataset, day):
        data = wh.storage.read_bytes(legacy)
        if data is None:
            return 0
        rows = 0
        if not wh.storage.exists(wh.path(dataset, day)):
            table = partition_file.decode(dataset, data)
            idx = table.schema.get_field_index("host")
            column = pa.repeat(pa.scalar(wh.host, pa.string()), table.num_rows)
            table = table.set_column(idx, table.schema.field(idx), column)
            # the same redaction version as the old file: its cells are what they were
            version = partition_file.redaction_version(data)
            wh.storage.put(wh.path(dataset, day), partition_file.encode(dataset, table, version))
            rows = table.num_rows
        old_marks = wh.storage.join(wh.day_dir(dataset, day), read_marks.READ_AT_FILE)
        marks = wh.storage.read_bytes(old_marks)
        if marks is not None:
            if not wh.storage.exists(wh.marks_path(dataset, day)):
                wh.storage.put(wh.marks_path(dataset, day), marks)
            wh.storage.delete(old_marks)
        wh.storage.delete(legacy)
        wh.fix_modes(dataset, day)
    return rows
