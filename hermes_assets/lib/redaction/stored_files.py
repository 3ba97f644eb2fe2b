"""Files written before redaction, or under older patterns, redacted in place.

Every capture file records the version of the redaction its cells went through
(:func:`~hermes_assets.lib.warehouse.partition_file.redaction_version`). A run that
redacts first brings every file of the three captured datasets whose version
is older (or absent: a file written before redaction existed, or with it off)
to the current one: its text cells are redacted as a capture redacts them
(JSON cells inside, keys kept) and the file is replaced atomically, under the
day's lock (:meth:`~hermes_assets.lib.warehouse.datasets.Warehouse.rewrite_file`). The rows kept after Hermes deleted their source, which exist
nowhere else, are redacted with the others. A file already current is not
touched; a host whose every file is current is stamped (:data:`STAMP_FILE`, in
its own staging folder), so its later runs do not read a footer per file.

Each host redacts its own files, and its stamp vouches for them only: hosts
sharing one warehouse may redact with other settings or versions (or not at
all), and one host's stamp never stops another from redacting its files.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, GATEWAY, SESSIONS
from hermes_assets.lib.redaction.redactor import Redactor, what_changed
from hermes_assets.lib.redaction.session_cells import KEEP_COLUMNS
from hermes_assets.lib.redaction.sightings import Sighting, Where
from hermes_assets.lib.storage import local_files
from hermes_assets.lib.warehouse import partition_file
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.host_layout import REDACTION_STAMP

log = get_logger()

#: in a host's staging folder: the redaction version every capture file of the host has
STAMP_FILE = REDACTION_STAMP

#: columns of the datasets' files never redacted: ids, keys, provenance, paths, enumerations
_FILE_KEEP = KEEP_COLUMNS | {
    "store",
    "store_label",
    "profile",
    "day",
    "date",
    "scope_path",
    "policy_class",
    "copy_of",
    "gateway_id",
    "client_name",
    "conversation_source",
    "entrypoint",
    "provider",
}


def _kept(name: str) -> bool:
    return name in _FILE_KEEP or name.endswith(("_id", "_ids", "uuid", "_uid", "_uids", "_hash"))


@dataclass
class FilesRedacted:
    """What bringing the files to the current redaction did, per dataset."""

    files_checked: Counter = field(default_factory=Counter)
    files_rewritten: Counter = field(default_factory=Counter)
    cells_changed: Counter = field(default_factory=Counter)
    #: dataset -> secrets redacted by kind (never a value)
    secrets: dict[str, Counter] = field(default_factory=dict)
    #: where each secret redacted in the files was (never a value)
    sightings: list[Sighting] = field(default_factory=list)
    #: the same, by the day of the file each was in
    by_day: dict[str, list[Sighting]] = field(default_factory=dict)
    #: the version the files were brought to, and why each file checked was redacted again (reason -> files)
    version: str | None = None
    because: Counter = field(default_factory=Counter)

    def metadata(self) -> dict:
        return {
            "redaction_version": self.version,
            "redacted_again_because": dict(sorted(self.because.items())),
            "files_redacted_again": dict(sorted(self.files_rewritten.items())),
            "cells_redacted_again": dict(sorted(self.cells_changed.items())),
            "secrets_redacted_again": {ds: dict(sorted(c.items())) for ds, c in sorted(self.secrets.items()) if c},
        }


def stamp_path(warehouse: Warehouse) -> str:
    """This host's stamp (:attr:`Warehouse.redaction_stamp`)."""
    return warehouse.redaction_stamp


def forget_stamp(warehouse: Warehouse) -> None:
    """A run that does not redact writes files without a version: the next run that does checks them all."""
    try:
        os.unlink(stamp_path(warehouse))
    except FileNotFoundError:
        pass


def _stamped(warehouse: Warehouse, version: str) -> bool:
    return local_files.stamp_holds(stamp_path(warehouse), version, warehouse.modes.file)


def _stamp(warehouse: Warehouse, version: str) -> None:
    path = stamp_path(warehouse)
    warehouse.make_spool_dirs(os.path.dirname(path))  # the folder mode, whatever the umask
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, warehouse.modes.file)
    os.fchmod(fd, warehouse.modes.file)  # whatever the umask (SPEC §2, D16)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(f"{version}\n")
    os.replace(tmp, path)


def redact_files(warehouse: Warehouse, redactor: Redactor) -> FilesRedacted:
    """Redact every capture file of this host that records another redaction version than
    ``redactor``'s (:attr:`Redactor.version`): its rules, our rules or the ``.env`` values changed."""
    result = FilesRedacted(secrets={ds: Counter() for ds in CAPTURE_DATASETS}, version=redactor.version)
    if _stamped(warehouse, redactor.version):
        return result
    for dataset in CAPTURE_DATASETS:
        for day in warehouse.own_days(dataset):  # this host's files (each host redacts its own)
            result.files_checked[dataset] += 1
            _redact_day(warehouse, redactor, dataset, day, result)
    _stamp(warehouse, redactor.version)
    if sum(result.files_rewritten.values()):
        log.info(
            "hermes.capture.files_redacted",
            version=redactor.version,
            because=dict(result.because),
            files=dict(result.files_rewritten),
            cells=dict(result.cells_changed),
            kinds=sorted({k for c in result.secrets.values() for k in c}),
        )
    return result


def _redact_day(warehouse: Warehouse, redactor: Redactor, dataset: str, day: str, result: FilesRedacted) -> None:
    try:
        with warehouse.storage.open_input(warehouse.path(dataset, day)) as f:
            version = partition_file.redaction_version(f)
    except FileNotFoundError:
        return
    if version == redactor.version:
        return
    for reason in what_changed(version, redactor.version):
        result.because[reason] += 1
    cells = 0

    def redact(table: pa.Table) -> pa.Table:
        nonlocal cells
        redactor.take_counts()
        table, cells = redact_table(redactor, table, dataset)
        result.secrets[dataset].update(redactor.take_counts())
        return table

    written = warehouse.rewrite_file(dataset, day, redact, redactor.version)
    if written is None:
        return
    result.cells_changed[dataset] += cells
    result.files_rewritten[dataset] += int(written.changed)
    seen = redactor.take_sightings()
    result.sightings += seen
    result.by_day.setdefault(day, []).extend(seen)


#: per dataset, the columns of a row's session id and message id (None: a row per session)
_ROW_IDS = {SESSIONS: ("id", None), GATEWAY: ("session_id", "message_id")}


class _Rows:
    """What a stored file's sightings say of a row: its session, its message and its store
    (their columns read once, when a first cell held a secret)."""

    def __init__(self, table: pa.Table, dataset: str) -> None:
        self.table, self.dataset = table, dataset
        self.session_key, self.message_key = _ROW_IDS.get(dataset, ("session_id", "id"))
        self._ids: dict[str, list] | None = None

    def where(self, column: str, row: int) -> Where:
        if self._ids is None:
            wanted = (self.session_key, self.message_key, "store_label")
            self._ids = {k: self.table.column(k).to_pylist() for k in wanted if k and k in self.table.column_names}
        session, message, store = (self._id(k, row) for k in (self.session_key, self.message_key, "store_label"))
        return Where(f"{self.dataset}.{column}", session, message, store or "")

    def _id(self, key: str | None, row: int) -> str | None:
        column = (self._ids or {}).get(key) if key else None
        value = None if column is None else column[row]
        return None if value is None else str(value)


def redact_table(redactor: Redactor, table: pa.Table, dataset: str = "") -> tuple[pa.Table, int]:
    """``table`` with the secrets of its text and JSON cells redacted; how many cells changed.
    The sightings name the column as ``<dataset>.<column>``, the row's session, message and store."""
    changed = 0
    rows = _Rows(table, dataset)
    for i, f in enumerate(table.schema):
        if _kept(f.name):
            continue
        storage_type = f.type.storage_type if isinstance(f.type, pa.BaseExtensionType) else f.type
        if not (pa.types.is_string(storage_type) or pa.types.is_large_string(storage_type)):
            continue
        column = table.column(i)
        if column.null_count == len(column):
            continue
        if storage_type != f.type:
            column = schemas.storage_of(column)
        values = column.to_pylist()
        hits = redactor.redact_column(values, functools.partial(rows.where, f.name))
        if not hits:
            continue
        for row, new in hits:
            values[row] = new
        changed += len(hits)
        array = pa.array(values, storage_type)
        if storage_type != f.type:
            array = pa.ExtensionArray.from_storage(f.type, array)
        table = table.set_column(i, f, array)
    return table, changed
