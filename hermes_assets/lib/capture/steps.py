"""From a classified plan to partition files: the last two steps of a capture run.

The Dagster shell runs each step as one op of the capture graph
(``defs/capture_assets.py``); the first two, the plan and the usage policy, are
:mod:`~hermes_assets.lib.plan.capture_plan`'s. Each step takes and returns small typed
values (never a store, never a whole table):

3. :func:`project_rows` reads each day of each store ONCE, redacts and projects it
   (:func:`~hermes_assets.lib.capture.day_rows.project_day`) and stages the day's
   three datasets (:mod:`~hermes_assets.lib.warehouse.staging`) -> :class:`ProjectedRun`;
4. :func:`write_partitions` puts each staged day in place, atomically, under
   the day's lock: the file the stage step merged already, or merged here
   (:mod:`~hermes_assets.lib.warehouse.day_merge`), each encoded once -> :class:`WrittenRun`.

A store that failed anywhere in the run keeps its rows in the warehouse
untouched on every day, the other stores' days are written, and the caller
fails the run naming it (:meth:`WrittenRun.raise_for_failures`).

Days are staged in parallel on worker processes (:mod:`~hermes_assets.lib.capture.pool`:
never a fork of the caller, which runs threads). Writes run on threads: they
are I/O and Arrow work, which release the GIL.
"""

from __future__ import annotations

import contextvars
import functools
import os
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from hermes_assets.lib.basics import errors, logs
from hermes_assets.lib.basics.errors import StoreFailure
from hermes_assets.lib.basics.ipc import IpcTable
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, MESSAGES, SESSIONS, SIGHTINGS
from hermes_assets.lib.capture import day_memory, pool, run_sightings
from hermes_assets.lib.capture.day_rows import project_day
from hermes_assets.lib.capture.progress import Progress
from hermes_assets.lib.capture.staged_run import DatasetDay, ProjectedRun, StagedDay
from hermes_assets.lib.plan.capture_plan import READ, CapturePlan
from hermes_assets.lib.plan.generations import MESSAGE_BIRTH_COLUMNS, SESSION_BIRTH_COLUMNS, Births
from hermes_assets.lib.projection.context import ProjectionContext
from hermes_assets.lib.redaction import stored_files, stored_markers
from hermes_assets.lib.redaction.redactor import RedactionConfig, redactor_for
from hermes_assets.lib.redaction.sightings import Sighting
from hermes_assets.lib.storage import local_files
from hermes_assets.lib.warehouse import staging
from hermes_assets.lib.warehouse.datasets import Warehouse, WriteResult
from hermes_assets.lib.warehouse.partition_file import DayFile
from hermes_assets.lib.warehouse.staging import ENCODED_SUFFIX, read_staged

log = get_logger()

#: below this many sessions a run projects its days in its own process: starting worker
#: processes costs more than the work they would share
PARALLEL_MIN_SESSIONS = 1500


@dataclass(frozen=True)
class DayJob:
    """What staging a day needs: the same for every day of the run, sent once to each worker."""

    plan: CapturePlan
    ctx: ProjectionContext
    warehouse: Warehouse
    #: the run's staging folder
    staging: str
    #: dataset -> the run's days that had a file when the run looked
    existing: dict[str, set[str]]
    #: how secrets are redacted before the rows are built (None: not at all)
    redaction: RedactionConfig | None = None
    #: what to make of a first capture's tables (:func:`project_rows`), and dataset -> the run's
    #: days with a file of any host's (those are not first captures)
    day_figures: Callable[[str, Mapping[str, pa.Table], Mapping[str, Any]], Any] | None = None
    any_host: dict[str, set[str]] = field(default_factory=dict)


def project_rows(
    plan: CapturePlan,
    ctx: ProjectionContext,
    warehouse: Warehouse,
    *,
    staging: str,
    redaction: RedactionConfig | None = None,
    workers: int = 1,
    log_format: logs.LogFormat | None = None,
    parallel_min_sessions: int = PARALLEL_MIN_SESSIONS,
    start_method: str = pool.START_METHODS[0],
    progress: Progress | None = None,
    day_figures: Callable[[str, Mapping[str, pa.Table], Mapping[str, Any]], Any] | None = None,
) -> ProjectedRun:
    """Project and stage every day of ``plan`` (days in parallel). Nothing is in place
    until :func:`write_partitions`; on an error the staging folder is removed. Staged
    folders and files get the warehouse's modes (SPEC §2, D16), whatever the umask.

    A day that has no partition file yet, and whose rows come from one store, is
    staged as its final partition file; the others as Arrow IPC, and a day that
    has a file as its new file too, merged already (:func:`stage_day`). Days run on
    ``workers`` processes (started by ``start_method``, see :mod:`~hermes_assets.lib.capture.pool`)
    when the run has at least ``parallel_min_sessions`` sessions. ``redaction``: how secrets
    are redacted from the cells before any row is built (None: not at all). ``progress`` counts
    each day as it is staged, with its rows. ``day_figures``: called with a first capture's day,
    its three tables (no file of the day yet, any host's; one store's rows: the tables are
    the files to be) and its sessions' ``usage_by_model`` entries by their cell, on the worker;
    its result is the staged day's ``figures`` (a picklable module-level function: the run's
    analytics, for one).
    """
    local_files.make_dirs(staging, warehouse.modes, os.path.dirname(os.path.abspath(staging)))
    if plan.sessions_in_range() < parallel_min_sessions:
        workers = 1
    try:
        # the worker processes boot while this one sets the redaction up (the rule set, on a first run,
        # is printed by a command) and looks at the warehouse
        with pool.started(
            stage_day, plan.days, workers, log_format=log_format, start_method=start_method
        ) as day_workers:
            files_redacted, markers = _redaction_pass(warehouse, redaction)
            job = DayJob(
                plan,
                replace(ctx, now_s=plan.read_at),  # one clock for the sanity window of the whole run
                warehouse,
                staging,
                {ds: warehouse.existing(ds, plan.days) for ds in (*CAPTURE_DATASETS, SIGHTINGS)},
                redaction,
                day_figures,
                {ds: warehouse.existing(ds, plan.days, own=False) for ds in CAPTURE_DATASETS} if day_figures else {},
            )
            on_done = None if progress is None else (lambda staged: progress.advance(staged.rows))
            days = list(day_workers.map(job, on_done))
    except BaseException:  # once the workers have stopped: none writes to it any more
        shutil.rmtree(staging, ignore_errors=True)
        raise
    run = ProjectedRun(plan.for_write(), staging, days, warehouse.redaction_version, files_redacted, markers)
    for dataset in CAPTURE_DATASETS:
        rows, by_kind, _ = run.totals(dataset)
        log.info(
            "hermes.capture.project", dataset=dataset, days=len(days), rows=rows, errors=errors.error_count(by_kind)
        )
    # one event per run: how many secrets, of which kinds (never a value, never a marker)
    found = {ds: run.secrets_redacted(ds) for ds in CAPTURE_DATASETS}
    log.info(
        "hermes.capture.secrets_redacted",
        redaction="on" if redaction is not None else "off",
        secrets_redacted={ds: sum(c.values()) for ds, c in found.items()},
        kinds=sorted({kind for c in found.values() for kind in c}),
        by_kind={ds: dict(sorted(c.items())) for ds, c in found.items() if c},
    )
    return run


def _redaction_pass(
    warehouse: Warehouse, redaction: RedactionConfig | None
) -> tuple[stored_files.FilesRedacted | None, dict[str, list[Sighting]] | None]:
    """The warehouse set for ``redaction`` (None: none): the redaction version its files get, the
    markers its files hold already, its files written before redaction (or under other rules)
    redacted first, so the days merge with redacted rows."""
    if redaction is None:
        warehouse.redaction_version = None
        stored_files.forget_stamp(warehouse)
        return None, None
    redactor = redactor_for(redaction)
    warehouse.redaction_version = redactor.version
    # the markers stored files hold already, once per host (before the pass below adds its own)
    markers = None if stored_markers.stamped(warehouse) else stored_markers.scan(warehouse)
    return stored_files.redact_files(warehouse, redactor), markers


def stage_day(job: DayJob, day: str) -> StagedDay:
    """Project one day (:func:`project_day`) and stage its three tables.

    A day that has files has them read once, here: ``hermes_sessions`` and
    ``hermes_messages`` before the projection, for the births of the day's ids
    (D15); each file then serves the merge of its dataset, done here too, whose
    result the write step puts in place (:meth:`Warehouse.prepare_write`).
    """
    plan = job.plan
    old = {ds: _read_old(job, ds, day) for ds in (SESSIONS, MESSAGES)}
    existing = frozenset(ds for ds in CAPTURE_DATASETS if day in job.existing[ds])
    # a first capture (no file of the day, any host's): its tables may be the files to be, whose figures
    # read the sessions' usage entries as the projection holds them
    first = job.day_figures is not None and not any(day in job.any_host[ds] for ds in CAPTURE_DATASETS)
    # retention judges the rows of a file that exists: a new day's ids and their generations are
    # not needed (for a long first backfill they would be every message id, held until the write)
    rows = project_day(
        plan,
        day,
        job.ctx,
        births=_births(job, day, old),
        redaction=job.redaction,
        record_ids=bool(existing),
        usage_by_model=first,
    )
    order = {sp.store.path: i for i, sp in enumerate(plan.stores)}
    datasets = {}
    for dataset, by_store in rows.tables.items():
        staged = {}
        final = day not in job.existing[dataset] and len(by_store) == 1
        for path, table in by_store.items():
            if final and not table.num_rows:
                continue  # nothing to write, nothing to merge with
            staged[path] = os.path.join(job.staging, staging.staged_name(dataset, day, order[path], encoded=final))
            staging.stage(dataset, table, staged[path], job.warehouse.modes.file, job.warehouse.redaction_version)
        tally = rows.tallies[dataset]
        datasets[dataset] = DatasetDay(
            sum(t.num_rows for t in by_store.values()),
            tally.as_dict(),
            tuple(tally.sample_dicts()[:10]),
            staged,
            dict(sorted(rows.secrets.get(dataset, {}).items())),
        )
    facts = plan.facts(day, rows.generations, skip={f.path for f in rows.failures})
    prepared = {}
    for dataset in CAPTURE_DATASETS:
        old_file = old[dataset] if dataset in old else _read_old(job, dataset, day)
        if old_file is not None:
            # the tables just staged, as they are in memory (not read back from their files)
            new = {path: rows.tables[dataset][path] for path in datasets[dataset].staged}
            stage_as = os.path.join(job.staging, staging.prepared_name(dataset, day))
            ready = job.warehouse.prepare_write(dataset, day, new, facts, plan.read_at, old_file, stage_as)
            if ready is not None:
                prepared[dataset] = ready
    del old
    figures = None
    if first and job.day_figures is not None and all(len(by_store) <= 1 for by_store in rows.tables.values()):
        # a first capture of one store: its tables are the day's files to be
        figures = job.day_figures(day, {ds: rows.table(ds) for ds in CAPTURE_DATASETS}, rows.usage_by_model)
    sighting_rows = run_sightings.staged_rows(rows, job.warehouse.host, plan.labels())
    sightings_file = None
    if sighting_rows.num_rows and day not in job.existing[SIGHTINGS]:  # a first capture: its file, encoded here
        sightings_file = os.path.join(job.staging, staging.prepared_name(SIGHTINGS, day))
        staging.stage(
            SIGHTINGS, sighting_rows, sightings_file, job.warehouse.modes.file, job.warehouse.redaction_version
        )
    day_memory.day_staged()  # freed memory back to the system once it piles up: memory follows one day
    return StagedDay(
        day,
        datasets,
        rows.generations,
        tuple(rows.failures),
        dict(rows.statements),
        existing,
        prepared,
        tuple(rows.sightings),
        IpcTable.of(sighting_rows),
        sightings_file,
        figures,
    )


def _read_old(job: DayJob, dataset: str, day: str) -> DayFile | None:
    """The day's file of ``dataset``, read once and pinned; None when the run saw no file (a
    file that appeared since is merged at the write, as is one whose first capture is staged
    already encoded), or when the warehouse cannot pin it (an object store: the write merges
    from its own read)."""
    if day not in job.existing[dataset]:
        return None
    return job.warehouse.read_pinned(dataset, day, os.path.join(job.staging, staging.pin_name(dataset, day)))


def _births(job: DayJob, day: str, old: dict[str, DayFile | None]) -> dict[str, Births]:
    """Per store, the births of what the day's ``hermes_sessions``/``hermes_messages`` files
    hold already (D15), from the files read (an unpinned one: its birth columns alone);
    nothing when the day has no file."""
    tables: dict[str, pa.Table | None] = {}
    for dataset, columns in ((SESSIONS, SESSION_BIRTH_COLUMNS), (MESSAGES, MESSAGE_BIRTH_COLUMNS)):
        read = old[dataset]
        if read is not None:
            tables[dataset] = read.table(columns)
        elif day in job.existing[dataset]:
            tables[dataset] = job.warehouse.read_own(dataset, day, columns=columns)
        else:
            tables[dataset] = None
    if tables[SESSIONS] is None and tables[MESSAGES] is None:
        return {}
    stores = [sp.store.path for sp in job.plan.readable()]
    return {path: Births.from_tables(tables[SESSIONS], tables[MESSAGES], path) for path in stores}


# --------------------------------------------------------------------------
# writing: merge each staged day into its files
# --------------------------------------------------------------------------


@dataclass
class WrittenRun:
    """What :func:`write_partitions` put in place: per dataset, one result per day."""

    results: dict[str, list[WriteResult]]
    failures: list[StoreFailure]
    #: stores read and written in this run (beside the failed ones)
    stores_written: int = 0
    #: the days' ``hermes_secret_sightings`` files written (:mod:`~hermes_assets.lib.redaction.sighting_files`)
    sightings: list[WriteResult] = field(default_factory=list)

    def totals(self, dataset: str) -> dict[str, int]:
        results = self.results[dataset]
        return {
            "rows_written": sum(r.rows for r in results),
            "rows_retained_source_deleted": sum(r.retained for r in results),
            "rows_dropped": sum(r.dropped for r in results),
            "files_changed": sum(r.changed for r in results),
            "bytes": sum(r.bytes for r in results),
            "days_superseded": sum(r.superseded for r in results),
            "rows_replaced": sum(r.replaced for r in results),
        }

    def raise_for_failures(self) -> None:
        """Fail naming every store that could not be read (its rows were left untouched)."""
        if not self.failures:
            return
        first = self.failures[0]
        # one line: each store's error_kind and message (which names its path)
        message = "; ".join(
            f"{f.error_kind}: {f.message if f.path in f.message else f'{f.path}: {f.message}'}" for f in self.failures
        )
        if self.stores_written:
            message += (
                f" (captured rows of the failed store(s) are untouched; the days of the "
                f"{self.stores_written} other store(s) were written)"
            )
        raise errors.by_kind(first.error_kind)(" ".join(message.split()), path=first.path)


def write_partitions(
    run: ProjectedRun, warehouse: Warehouse, *, workers: int = 4, progress: Progress | None = None
) -> WrittenRun:
    """Put each staged day in its three partition files, atomically, under each
    day's lock, on ``workers`` threads. Stores that failed anywhere in the run keep
    their rows untouched on every day. The staging folder is removed once every day
    is in place; if a write fails it stays, so the step can be re-executed. Each file is in
    place whole as it is written; the folders' syncs of the run's files are made together,
    before this returns (:func:`~hermes_assets.lib.storage.local_files.folder_syncs_deferred`).
    ``progress`` counts each day as it is in place, with its rows (told from this thread)."""
    failures = run.failures()
    failed = {f.path for f in failures}
    results: dict[str, list[WriteResult]] = {ds: [] for ds in CAPTURE_DATASETS}
    warehouse.redaction_version = run.redaction_version  # merged here: the version the staged rows have
    if any(sp.status == READ and sp.store.path not in failed for sp in run.plan.stores):
        write = functools.partial(_write_day, run, warehouse, failed)
    else:  # no store read: nothing to merge, every day's files stay as they are
        write = functools.partial(_current_day, warehouse)
    _ = warehouse.storage.fs  # one client for every thread, opened here (a bad URI fails before any thread starts)
    sightings = run_sightings.Writer(run, warehouse, failed)
    day_task = functools.partial(_day_and_sightings, write, sightings)
    # the folders of the files written synced together, before this returns (what the step reports)
    with local_files.folder_syncs_deferred(), ThreadPoolExecutor(max(1, min(workers, len(run.days)))) as threads:
        # each day in a copy of the caller's context: its log fields (the run and step) follow it
        futures = [threads.submit(contextvars.copy_context().run, day_task, staged) for staged in run.days]
        if progress is not None:
            for future in as_completed(futures):
                progress.advance(sum(r.rows for r in future.result()[0].values()))
        for per_dataset, sighted in (f.result() for f in futures):
            for dataset, result in per_dataset.items():
                results[dataset].append(result)
            sightings.written_day(sighted)
        stored = sightings.finish()
    shutil.rmtree(run.staging, ignore_errors=True)
    written = WrittenRun(results, failures, sum(1 for sp in run.plan.readable() if sp.store.path not in failed), stored)
    for dataset in CAPTURE_DATASETS:
        totals = written.totals(dataset)
        log.info(  # the run's totals (each day's own figures are on its materialization)
            "hermes.capture.write",
            dataset=dataset,
            days=len(results[dataset]),
            rows=totals["rows_written"],
            retained=totals["rows_retained_source_deleted"],
            files_changed=totals["files_changed"],
            bytes=totals["bytes"],
            dropped=totals["rows_dropped"],
            replaced=totals["rows_replaced"],
            superseded=totals["days_superseded"],
        )
    replaced = {ds: written.totals(ds)["rows_replaced"] for ds in CAPTURE_DATASETS}
    if any(replaced.values()):  # SPEC D15: seen by every run, reported as a warning
        log.warning(
            "hermes.capture.store_replaced",
            error_kind=errors.StoreReplaced.error_kind,
            ids_reused=run.reborn(),
            **{f"{ds}_rows_replaced": n for ds, n in replaced.items()},
        )
    return written


def _day_and_sightings(
    write: Callable[[StagedDay], dict[str, WriteResult]], sightings: run_sightings.Writer, staged: StagedDay
) -> tuple[dict[str, WriteResult], WriteResult | None]:
    """One day's files, then its sightings (after the day's files: the stored sightings are read
    from them), on the day's thread."""
    written = write(staged)
    return written, sightings.day(staged)


def _current_day(warehouse: Warehouse, staged: StagedDay) -> dict[str, WriteResult]:
    return {dataset: warehouse.current(dataset, staged.day) for dataset in CAPTURE_DATASETS}


def _write_day(run: ProjectedRun, warehouse: Warehouse, failed: set[str], staged: StagedDay) -> dict[str, WriteResult]:
    facts = run.plan.facts(staged.day, staged.generations, skip=failed)
    out = {}
    for dataset in CAPTURE_DATASETS:
        files = staged.datasets[dataset].staged
        new = {
            path: file if file.endswith(ENCODED_SUFFIX) else read_staged(dataset, file)
            for path, file in files.items()
            if path not in failed
        }
        if not new and dataset not in staged.existing:  # no rows, no file: nothing to write or merge
            out[dataset] = WriteResult(dataset, staged.day, warehouse.location(dataset, staged.day), 0, 0, 0, 0, False)
            continue
        out[dataset] = warehouse.write_day(
            dataset, staged.day, new, facts, run.plan.read_at, prepared=staged.prepared.get(dataset)
        )
    return out
