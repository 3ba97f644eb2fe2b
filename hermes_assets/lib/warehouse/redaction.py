"""Files written before redaction, or under older patterns, redacted in place.

Every capture file records the version of the redaction its cells went through
(:func:`~hermes_assets.lib.partition_file.redaction_version`). A run that
redacts first brings every file of the three captured datasets whose version
is older (or absent: a file written before redaction existed, or with it off)
to the current one: its text cells are redacted as a capture redacts them
(JSON cells inside, keys kept) and the file is replaced atomically, under the
day's lock. The rows kept after Hermes deleted their source, which exist
nowhere else, are redacted with the others. A file already current is not
touched; a host whose every file is current is stamped (:data:`STAMP_FILE`, in
its own staging folder), so its later runs do not read a footer per file.

Each host redacts its own files, and its stamp vouches for them only: hosts
sharing one warehouse may redact with other settings or versions (or not at
all), and one host's stamp never stops another from redacting its files.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.plan.redact import KEEP_COLUMNS, REDACTION_VERSION, Redactor
from hermes_assets.lib.schemas import CAPTURE_DATASETS
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

    def metadata(self) -> dict:
        return {
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


def _stamped(warehouse: Warehouse) -> bool:
    path = stamp_path(warehouse)
    try:
        with open(path, encoding="ascii") as f:
            current = f.read().strip() == str(REDACTION_VERSION)
        os.chmod(path, warehouse.modes.file)  # what an older umask left open is closed (D16)
        return current
    except (OSError, ValueError):
        return False


def _stamp(warehouse: Warehouse) -> None:
    path = stamp_path(warehouse)
    warehouse.make_spool_dirs(os.path.dirname(path))  # the folder mode, whatever the umask
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, warehouse.modes.file)
    os.fchmod(fd, warehouse.modes.file)  # whatever the umask (SPEC §2, D16)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(f"{REDACTION_VERSION}\n")
    os.replace(tmp, path)


def redact_files(warehouse: Warehouse, redactor: Redactor) -> FilesRedacted:
    """Redact every capture file whose redaction version is older than :data:`REDACTION_VERSION`."""
    result = FilesRedacted(secrets={ds: Counter() for ds in CAPTURE_DATASETS})
    if _stamped(warehouse):
        return result
    for dataset in CAPTURE_DATASETS:
        for day in warehouse.own_days(dataset):  # this host's files (each host redacts its own)
            result.files_checked[dataset] += 1
            _redact_day(warehouse, redactor, dataset, day, result)
    _stamp(warehouse)
    if sum(result.files_rewritten.values()):
        log.info(
            "hermes.capture.files_redacted",
            version=REDACTION_VERSION,
            files=dict(result.files_rewritten),
            cells=dict(result.cells_changed),
            kinds=sorted({k for c in result.secrets.values() for k in c}),
        )
    return result


def _redact_day(warehouse: Warehouse, redactor: Redactor, dataset: str, day: str, result: FilesRedacted) -> None:
    path = warehouse.path(dataset, day)
    try:
        with warehouse.storage.open_input(path) as f:
            version = partition_file.redaction_version(f)
    except FileNotFoundError:
        return
    if version is not None and version >= REDACTION_VERSION:
        return
    with warehouse.day_lock(dataset, day):
        data = warehouse.storage.read_bytes(path)
        if data is None:
            return
        table = partition_file.decode(dataset, data)
        redactor.take_counts()
        table, cells = redact_table(redactor, table)
        result.secrets[dataset].update(redactor.take_counts())
        result.cells_changed[dataset] += cells
        written = warehouse._replace(dataset, day, table, 0, data, REDACTION_VERSION)
        result.files_rewritten[dataset] += int(written.changed)
        warehouse.fix_modes(dataset, day)


def redact_table(redactor: Redactor, table: pa.Table) -> tuple[pa.Table, int]:
    """``table`` with the secrets of its text and JSON cells redacted; how many cells changed."""
    changed = 0
    for i, f in enumerate(table.schema):
        if _kept(f.name):
            continue
        storage_type = f.type.storage_type if isinstance(f.type, pa.ExtensionType) else f.type
        if not (pa.types.is_string(storage_type) or pa.types.is_large_string(storage_type)):
            continue
        column = table.column(i)
        if column.null_count == len(column):
            continue
        if storage_type != f.type:
            column = pa.chunked_array([chunk.storage for chunk in column.chunks], storage_type)
        values = column.to_pylist()
        hits = redactor.redact_column(values)
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
