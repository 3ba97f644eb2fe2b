"""A day staged between ``project_rows`` and ``write_partitions``: its files, and their cleanup.

A capture run stages its days under ``<staging root>/<run id>/``, one file per
dataset, day and store: ``<dataset>.<day>.<store #>.arrow`` (Arrow IPC, cheap
to write and to map back, merged at the write) or ``.parquet`` (the day's
partition file itself, encoded once, when the day has no file yet and one store
has rows). A day that has a file also stages a hard link to it as it was read
(``.pin``) and, when it changes, its new file merged already (``.prepared``),
which the write step puts in place (:mod:`~hermes_assets.lib.warehouse.day_merge`).
A first capture's sightings file is staged encoded as a prepared file too
(:meth:`~hermes_assets.lib.warehouse.datasets.Warehouse.merge_day`; it holds no
cell, and is not one of :func:`merge_files`: the sightings are no capture dataset).
The purge job scrubs staged tables too (:func:`staged_files`) and removes the
pins and prepared files (:func:`merge_files`: both hold rows as they were
before the purge; the write then merges those days again). Files
and folders get the warehouse's modes (SPEC §2, D16), whatever the umask.

The write removes the run's folder when
every day is in place. A failed write keeps it, so that a re-execution from
failure (by hand, or one of Dagster's run retries) writes the staged days
without reading the store again. Runs killed mid-way (kill -9) leave theirs.

:func:`sweep` removes the folders no run needs any more. Whether a run needs
its folder is the caller's to say (``needs(run_id)``: the Dagster instance
knows): True while it runs or a retry of it is coming, False once it ended
otherwise, None when the run is not known (deleted, or of another Dagster
instance writing to the same warehouse: such a folder is only removed once
it is :data:`STALE_STAGING_S` old). The capture runs a sweep when a run
starts to stage, and after a run wrote its days.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.storage.local_files import open_private
from hermes_assets.lib.warehouse import partition_file

log = get_logger()

#: a staged table to be merged (Arrow IPC), or the day's partition file itself (encoded once)
STAGED_SUFFIX = ".arrow"
ENCODED_SUFFIX = ".parquet"
STAGED_SUFFIXES = (STAGED_SUFFIX, ENCODED_SUFFIX)
PIN_SUFFIX = ".pin"
PREPARED_SUFFIX = ".prepared"
#: a staging folder of a run nobody knows is removed once this old (a run of another instance)
STALE_STAGING_S = 6 * 3600


def staged_name(dataset: str, day: str, store_number: int, *, encoded: bool) -> str:
    """The name of one store's staged rows of one dataset and day."""
    return f"{dataset}.{day}.{store_number}{ENCODED_SUFFIX if encoded else STAGED_SUFFIX}"


def pin_name(dataset: str, day: str) -> str:
    """A hard link to the day's partition file as the stage step read it (the proof, at the
    write, that the file is unchanged: :class:`~hermes_assets.lib.storage.interface.Pin`)."""
    return f"{dataset}.{day}{PIN_SUFFIX}"


def prepared_name(dataset: str, day: str) -> str:
    """The day's new partition file, merged by the stage step
    (:class:`~hermes_assets.lib.warehouse.day_merge.PreparedWrite`); never scrubbed: a purge removes it."""
    return f"{dataset}.{day}{PREPARED_SUFFIX}"


def stage(dataset: str, table: pa.Table, path: str, mode: int = 0o600, redaction_version: str | None = None) -> None:
    """Write ``table`` to the new staged file ``path`` (created with ``mode``), in the form its
    name says: Arrow IPC, or the encoded partition file (:func:`partition_file.encode`: a staged
    one, or a prepared one)."""
    with reporting_full_disk(path):
        if path.endswith((ENCODED_SUFFIX, PREPARED_SUFFIX)):
            data = partition_file.encode(dataset, table, redaction_version)
            with open_private(path, mode) as f:
                f.write(memoryview(data))
        else:
            with open_private(path, mode) as f, pa.ipc.new_file(f, table.schema) as writer:
                writer.write_table(table)


@contextlib.contextmanager
def reporting_full_disk(path: str) -> Iterator[None]:
    """A full disk while staging names the file, and says nothing was changed."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # a failed write() names no file: say which
            raise OSError(
                exc.errno,
                f"{exc.strerror} while staging {path}: no partition file was changed; free some space and re-run",
            ) from exc
        raise


def read_staged(dataset: str, path: str) -> pa.Table:
    """A staged table: Arrow IPC (memory-mapped) or an encoded partition file."""
    if path.endswith(ENCODED_SUFFIX):
        return pq.read_table(path, schema=schemas.schema_of(dataset))
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()


def restage(dataset: str, path: str, table: pa.Table) -> None:
    """Replace a staged table atomically, in its own form (the purge job scrubs staged days)."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, "." + name)  # the same form; hidden, so never taken for a staged file
    stage(dataset, table, tmp)
    os.replace(tmp, path)


def staged_files(root: str) -> list[tuple[str, str]]:
    """``(dataset, path)`` of every staged table under the staging root ``root``."""
    return _files(root, STAGED_SUFFIXES)


def merge_files(root: str) -> list[tuple[str, str]]:
    """``(dataset, path)`` of every pin and prepared file under the staging root ``root``:
    a day's file as the stage step read it, and the file it merged."""
    return _files(root, (PIN_SUFFIX, PREPARED_SUFFIX))


def _files(root: str, suffixes: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for folder, _, names in os.walk(root):
        for name in names:
            dataset = name.split(".", 1)[0]
            if name.endswith(suffixes) and dataset in schemas.DATASETS:
                out.append((dataset, os.path.join(folder, name)))
    return sorted(out)


def sweep(
    root: str, needs: Callable[[str], bool | None], *, keep: str | None = None, now_s: float | None = None
) -> list[str]:
    """Remove the staging folders under ``root`` that no run needs; the run ids removed.

    ``keep``: the caller's own run id (its folder is never removed here).
    """
    now = time.time() if now_s is None else now_s
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if entry.name == keep or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            needed = needs(entry.name)
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:  # removed meanwhile (its run's write finished)
            continue
        if needed or (needed is None and age < STALE_STAGING_S):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    if removed:
        log.info(
            "hermes.capture.staging_removed",
            runs=len(removed),
            run_ids=removed[:10],
            reason="runs no longer in progress, with no retry coming",
        )
    return removed
