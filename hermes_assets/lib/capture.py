"""From stores to partition files: the four steps of a capture run.

The Dagster shell runs each step as one op of the capture graph
(``defs/capture.py``); each is one function here, taking and returning small
typed values (never a store, never a whole table):

1. :func:`plan_capture` scans each store's ``sessions`` table once and places
   every session on its day (SPEC §2) -> :class:`CapturePlan`;
2. :func:`apply_usage_policy` classifies the sessions of the run's days, with
   their ancestors, before any row is built (SPEC §7, D9) -> a classified plan
   and :class:`PolicyCounts`;
3. :func:`project_rows` reads each day of each store ONCE, in one short read
   transaction, and builds all three datasets of the day from that read, so
   they always agree; each day is staged as Arrow IPC -> :class:`ProjectedRun`;
4. :func:`write_partitions` merges each staged day into its partition files
   and replaces them atomically, encoding each file once -> :class:`WrittenRun`.

Stores fail alone (SPEC §8, D18): a store that cannot be read is recorded as a
:class:`StoreFailure`, its rows in the warehouse stay untouched, the other
stores' days are written, and the caller fails the run naming it
(:meth:`WrittenRun.raise_for_failures`).

Days run in parallel on spawned worker processes (never ``fork``: the caller
runs threads, and a child forked from a threaded process can deadlock or
crash). Writes run on threads: they are I/O and Arrow work, which release the
GIL.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import errno
import functools
import gc
import importlib.machinery
import multiprocessing
import os
import shutil
import sys
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.parquet as pq

from hermes_assets.lib import errors, logs, policy, schemas
from hermes_assets.lib.errors import ErrorTally, StoreFailure
from hermes_assets.lib.generations import MESSAGE_BIRTH_COLUMNS, SESSION_BIRTH_COLUMNS, Births, Generations
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.projection import copies, gateway, raw
from hermes_assets.lib.projection.context import ProjectionContext
from hermes_assets.lib.projection.header import SessionInput
from hermes_assets.lib.state_db import ReaderFactory
from hermes_assets.lib.stores import Store
from hermes_assets.lib.warehouse import (
    CAPTURE_DATASETS,
    GATEWAY,
    MESSAGES,
    SESSIONS,
    StoreFacts,
    Warehouse,
    WriteResult,
    encode_to,
    open_private,
)

log = get_logger()

#: staged tables: ``<staging>/<run>/<dataset>.<day>.<store #>.arrow`` (Arrow IPC, to be merged),
#: or ``.parquet`` (the day's partition file itself, encoded once)
STAGED_SUFFIX = ".arrow"
ENCODED_SUFFIX = ".parquet"
STAGED_SUFFIXES = (STAGED_SUFFIX, ENCODED_SUFFIX)
#: below this many sessions a run projects its days in its own process: starting worker
#: processes (fresh interpreters, ~0.5 s) costs more than the work they would share
PARALLEL_MIN_SESSIONS = 1500

# statuses of a store in a run
READ = "read"
MISSING = "missing"  # not installed (discovery): nothing to read, its rows untouched
FAILED = "failed"  # a store-level error: its rows untouched, the run fails naming it


@dataclass
class StorePlan:
    """One store's sessions, placed on days and (after policy) classified."""

    store: Store
    status: str = READ
    failure: StoreFailure | None = None
    #: sid -> day (None when the session has no sane time at all), every session of the store
    days: dict[str, str | None] = field(default_factory=dict)
    #: sid -> the id as SQLite stores it, where that is not the same string (old integer ids)
    raw_ids: dict[str, object] = field(default_factory=dict)
    #: sid -> (scope path, parent sid), for the sessions of the run's days and their ancestors
    scopes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    #: sid -> policy class, for the sessions of the run's days (after apply_usage_policy)
    classes: dict[str, str] = field(default_factory=dict)

    def sessions_on(self, day: str) -> list[str]:
        by_day = self.__dict__.get("_by_day")
        if by_day is None:  # built once per process, on first use
            by_day = {}
            for sid, d in self.days.items():
                by_day.setdefault(d, []).append(sid)
            for sids in by_day.values():
                sids.sort()
            self.__dict__["_by_day"] = by_day
        return by_day.get(day, [])

    def kept_on(self, day: str) -> list[str]:
        return [sid for sid in self.sessions_on(day) if self.classes.get(sid, policy.FULL) != policy.IGNORE]

    def ignored_on(self, day: str) -> set[str]:
        return {sid for sid in self.sessions_on(day) if self.classes.get(sid) == policy.IGNORE}

    def parents(self) -> dict[str, str | None]:
        """sid -> parent sid, for the sessions of the run's days and their ancestors."""
        parents = self.__dict__.get("_parents")
        if parents is None:  # built once per process, on first use
            parents = self.__dict__["_parents"] = {sid: parent for sid, (_, parent) in self.scopes.items()}
        return parents

    def ancestors_off(self, sids: list[str]) -> list[str]:
        """The ancestors of ``sids`` that are not among them (sessions of other days, D20),
        each once; a parent id the store does not hold is left out (and a cycle ends the walk)."""
        within, seen, out = set(sids), set(), []
        for sid in sids:
            parent = self.scopes.get(sid, (None, None))[1]
            while parent and parent in self.days and parent not in seen:
                seen.add(parent)
                if parent not in within:
                    out.append(parent)
                parent = self.scopes.get(parent, (None, None))[1]
        return out


@dataclass(frozen=True)
class PolicyCounts:
    """What :func:`apply_usage_policy` decided, for the op's metadata."""

    sessions: int = 0
    full: int = 0
    local_only: int = 0
    ignored: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    warnings_by_kind: dict[str, int] = field(default_factory=dict)
    samples: tuple[dict, ...] = ()

    @property
    def kept(self) -> int:
        return self.full + self.local_only

    @property
    def errors(self) -> int:
        return sum(self.errors_by_kind.values())


@dataclass
class CapturePlan:
    """The run's days and every store's sessions, placed on days (and classified)."""

    days: list[str]
    stores: list[StorePlan]
    #: when the stores were read for this plan, and the clock of the sanity window (SPEC §5.1)
    read_at: float = 0.0
    #: (store label, sid, day or None) of sessions outside the partition range
    out_of_range: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: SQL statements the plan ran, by what they read
    statements: dict[str, int] = field(default_factory=dict)
    policy: PolicyCounts | None = None
    #: store path -> table -> the columns this contract does not name (D22), stores with some only
    unknown_columns: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    #: how the stores are opened again to read the days (the busy budget, SPEC §1)
    readers: ReaderFactory = field(default_factory=ReaderFactory)

    def sessions_in_range(self) -> int:
        wanted = set(self.days)
        return sum(1 for sp in self.stores for d in sp.days.values() if d in wanted)

    def readable(self) -> list[StorePlan]:
        return [sp for sp in self.stores if sp.status == READ]

    def nothing_to_capture(self) -> str | None:
        """Why this run captures nothing where a user would expect rows, else None.

        A range that holds no partition (a start after its end), or stores that
        were read but hold no session on the days asked. Not when no store exists
        (Hermes not installed: the idle case, SPEC R9) nor when a store failed
        (the run fails naming it)."""
        if not self.days:
            return "the run's partition range holds no partition (is its start after its end?)"
        if self.readable() and not self.failures() and not self.sessions_in_range():
            span = self.days[0] if len(self.days) == 1 else f"{self.days[0]}...{self.days[-1]}"
            return f"the Hermes store(s) hold no session on the {len(self.days)} day(s) asked ({span})"
        return None

    def failures(self) -> list[StoreFailure]:
        return [sp.failure for sp in self.stores if sp.failure is not None]

    def facts(self, day: str, generations: dict[str, Generations], skip: set[str] = frozenset()) -> list[StoreFacts]:
        """What retention needs to judge the day's previously written rows (SPEC §6), for
        every store read (and not in ``skip``)."""
        empty = Generations()
        return [
            StoreFacts(
                sp.store.path,
                sp.store.path_hash,
                sp.days,
                sessions_now=generations.get(sp.store.path, empty).sessions,
                messages_now=generations.get(sp.store.path, empty).messages,
                ignored=sp.ignored_on(day),
            )
            for sp in self.readable()
            if sp.store.path not in skip
        ]


def plan_capture(
    stores: list[Store],
    days: list[str],
    *,
    user_home: str,
    first_day: str | None = None,
    last_day: str | None = None,
    now_s: float | None = None,
    readers: ReaderFactory | None = None,
) -> CapturePlan:
    """Place every session of every store on its day (one statement over ``sessions``
    per store). A missing store is a state; a store that cannot be read is a failure
    recorded in its :class:`StorePlan`, never raised here."""
    read_at = time.time() if now_s is None else now_s
    wanted = set(days)
    readers = readers or ReaderFactory()
    plan = CapturePlan(days=sorted(wanted), stores=[], read_at=read_at, readers=readers)
    statements: Counter = Counter()
    for store in stores:
        sp = StorePlan(store)
        plan.stores.append(sp)
        try:
            with readers.open(store, read_at) as reader:
                index = reader.session_index()
                unknown = reader.unknown_columns()
                statements.update(reader.statements)
        except (FileNotFoundError, errors.StoreAbsent) as exc:  # not installed, vanished, or not created yet
            if store.explicit and not store.exists():
                _fail(sp, store.missing_error())
            else:
                sp.status = MISSING
                log.info(
                    "hermes.store.missing",
                    path=store.path,
                    store=store.label,
                    reason=str(exc) if isinstance(exc, errors.StoreAbsent) else "no file",
                )
            continue
        except errors.STORE_ERRORS as exc:
            _fail(sp, exc)
            continue
        if unknown:  # D22: once per store and run; the cells are kept in extra_columns
            plan.unknown_columns[store.path] = unknown
            log.warning(
                "hermes.store.unknown_columns",
                path=store.path,
                store=store.label,
                error_kind=errors.UNKNOWN_COLUMNS,
                **{f"{table}_columns": names for table, names in unknown.items()},
            )
        for sid, entry in index.items():
            sp.days[sid] = entry.day
            if entry.raw_id != sid:
                sp.raw_ids[sid] = entry.raw_id
            if entry.day is None or (first_day and entry.day < first_day) or (last_day and entry.day > last_day):
                plan.out_of_range.append((store.label, sid, entry.day))
        # scopes of the run's sessions and of all their ancestors
        todo = [sid for sid, entry in index.items() if entry.day in wanted]
        while todo:
            sid = todo.pop()
            if sid in sp.scopes or sid not in index:
                continue
            entry = index[sid]
            sp.scopes[sid] = (policy.scope_path(entry.source, entry.cwd, user_home), entry.parent)
            if entry.parent:
                todo.append(entry.parent)
    plan.statements = dict(statements)
    for label, sid, day in plan.out_of_range:
        log.warning(
            "hermes.capture.out_of_range_session",
            store=label,
            session_id=sid,
            day=day,
            error_kind=errors.OUT_OF_RANGE_SESSION,
        )
    log.info(
        "hermes.capture.plan",
        days=len(plan.days),
        stores=len(plan.stores),
        stores_failed=len(plan.failures()),
        sessions=plan.sessions_in_range(),
        out_of_range=len(plan.out_of_range),
    )
    reason = plan.nothing_to_capture()
    if reason:
        log.warning("hermes.capture.nothing_to_capture", days=len(plan.days), reason=reason)
    return plan


def _fail(sp: StorePlan, exc: Exception) -> None:
    sp.status = FAILED
    sp.failure = StoreFailure.of(sp.store.path, sp.store.label, exc)
    log.error("hermes.store.unreadable", path=sp.store.path, store=sp.store.label, error_kind=sp.failure.error_kind)


def apply_usage_policy(plan: CapturePlan, resolver: policy.PolicyResolver) -> CapturePlan:
    """Classify the run's sessions (SPEC §7); a new plan with ``classes`` and ``policy`` counts.

    The machine-local list was read when ``resolver`` was made: a broken one has
    already raised :class:`errors.PolicyListUnreadable` (the run fails).
    """
    wanted = set(plan.days)
    stores = []
    counts: Counter = Counter()
    for sp in plan.stores:
        classes = resolver.classify_sessions(sp.scopes)
        classes = {sid: cls for sid, cls in classes.items() if sp.days.get(sid) in wanted}
        counts.update(classes.values())
        stores.append(replace(sp, classes=classes))
    problems = Counter(w["event"] for w in resolver.warnings)
    result = PolicyCounts(
        sessions=sum(counts.values()),
        full=counts[policy.FULL],
        local_only=counts[policy.LOCAL_ONLY],
        ignored=counts[policy.IGNORE],
        errors_by_kind={k: n for k, n in sorted(problems.items()) if k not in errors.WARNING_KINDS},
        warnings_by_kind={k: n for k, n in sorted(problems.items()) if k in errors.WARNING_KINDS},
        samples=tuple(resolver.warnings[:10]),
    )
    log.info(
        "hermes.capture.policy",
        sessions=result.sessions,
        kept=result.kept,
        local_only=result.local_only,
        ignored=result.ignored,
        errors=result.errors,
    )
    return replace(plan, stores=stores, policy=result)


# --------------------------------------------------------------------------
# projection: one read per day and store, three datasets from it
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetDay:
    """One dataset's rows of one day, as projected: counts, and per store its staged file:
    Arrow IPC (to be merged with the day's file), or, when the day has no file yet and one
    store has rows, the partition file itself, encoded once (``.parquet``)."""

    rows: int
    errors_by_kind: dict[str, int]
    samples: tuple[dict, ...]
    #: store path -> the staged file of that store's rows of the day
    staged: dict[str, str]

    @property
    def errors(self) -> int:
        return errors.error_count(self.errors_by_kind)


@dataclass(frozen=True)
class StagedDay:
    """One day of the three datasets, staged (Arrow IPC files, not yet in place)."""

    day: str
    datasets: dict[str, DatasetDay]
    #: store path -> the generations of the day's kept sessions and their messages (retention, SPEC §6)
    generations: dict[str, Generations]
    #: stores that failed while this day was read
    failures: tuple[StoreFailure, ...] = ()
    statements: dict[str, int] = field(default_factory=dict)
    #: the datasets whose file for this day existed when the run looked
    existing: frozenset[str] = frozenset()


@dataclass
class DayRows:
    """One day's rows of the three datasets, built from one read of each store."""

    day: str
    #: dataset -> store path -> that store's rows of the day
    tables: dict[str, dict[str, pa.Table]]
    tallies: dict[str, ErrorTally]
    generations: dict[str, Generations]
    failures: list[StoreFailure]
    statements: Counter
    #: every bad cell of the day once, as ``(error_kind, session id, mid, column)``
    cells: set

    def table(self, dataset: str) -> pa.Table:
        """All stores' rows of one dataset (the schema's empty table when none)."""
        tables = list(self.tables[dataset].values())
        return pa.concat_tables(tables) if tables else schemas.DATASETS[dataset][0].empty_table()


def project_day(
    plan: CapturePlan,
    day: str,
    ctx: ProjectionContext,
    *,
    births: dict[str, Births] | None = None,
) -> DayRows:
    """Read the day's kept sessions of every store (one read transaction per store) and
    build the rows of all three datasets from that read.

    ``births``: per store, what the day's files already captured (:func:`read_births`):
    a reused id with another birth gets the next generation (D15).
    """
    with _gc_paused():
        return _project_day(plan, day, ctx, births or {})


@contextlib.contextmanager
def _gc_paused():
    """No cyclic GC while a day is built: its rows are hundreds of thousands of live
    tuples and dicts that every full collection would scan, for nothing (they hold
    no cycles); they are freed by reference counting when the day is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _project_day(plan: CapturePlan, day: str, ctx: ProjectionContext, births: dict[str, Births]) -> DayRows:
    logged: set = set()
    tallies = {ds: ErrorTally(logged=logged) for ds in CAPTURE_DATASETS}
    tables: dict[str, dict[str, pa.Table]] = {ds: {} for ds in CAPTURE_DATASETS}
    generations: dict[str, Generations] = {}
    failures: list[StoreFailure] = []
    statements: Counter = Counter()
    for sp in plan.readable():
        kept = sp.kept_on(day)
        if not kept:
            continue
        ancestors = sp.ancestors_off(kept)
        try:
            with plan.readers.open(sp.store, plan.read_at) as reader:
                read = reader.read_day_lineage(
                    day,
                    [(sid, sp.raw_ids.get(sid, sid)) for sid in kept],
                    [(sid, sp.raw_ids.get(sid, sid)) for sid in ancestors],
                )
                unknown, selected = reader.unknown_columns(), reader.selected["messages"]
                statements.update(reader.statements)
        except (FileNotFoundError, errors.StoreAbsent, *errors.STORE_ERRORS) as exc:
            if isinstance(exc, errors.StoreAbsent):  # read at the plan, being created again now
                exc = errors.StoreMissing(str(exc), path=exc.path)
            elif isinstance(exc, FileNotFoundError):
                exc = (
                    sp.store.missing_error()
                    if sp.store.explicit
                    else errors.StoreMissing(
                        f"{sp.store.path} vanished during the run; its rows are kept as they are.", path=sp.store.path
                    )
                )
            failures.append(StoreFailure.of(sp.store.path, sp.store.label, exc))
            log.error(
                "hermes.store.unreadable",
                path=sp.store.path,
                store=sp.store.label,
                day=day,
                error_kind=failures[-1].error_kind,
            )
            continue
        bundles = read.bundles
        marks = (
            copies.mark(((b.sid, b.messages) for b in bundles), read.ancestors, sp.parents(), sp.store.scoped)
            if read.grouped
            else {}
        )
        canonical = gateway.GatewayColumns()
        sessions = raw.sessions_columns(plan.read_at, tallies[SESSIONS], unknown.get("sessions", ()))
        messages = raw.messages_columns(
            plan.read_at, tallies[MESSAGES], unknown.get("messages", ()), grouped=read.grouped, names=selected
        )
        gens, store_births = Generations(), births.get(sp.store.path) or Births()
        for bundle in bundles:
            session_gen, message_gens = gens.assign(store_births, bundle)
            item = SessionInput(
                bundle,
                policy_class=sp.classes.get(bundle.sid, policy.FULL),
                generation=session_gen,
                message_generations=message_gens,
                marks=marks.get(bundle.sid),
                scope_path=sp.scopes.get(bundle.sid, (None,))[0],
            )
            gateway.project_session(item, canonical, ctx, tallies[GATEWAY])
            raw.session_row(item, sessions)
            raw.message_rows(item, messages)
        for ds, builder in ((GATEWAY, canonical), (SESSIONS, sessions), (MESSAGES, messages)):
            tables[ds][sp.store.path] = builder.to_table()
        generations[sp.store.path] = gens
    return DayRows(day, tables, tallies, generations, failures, statements, logged)


def read_births(warehouse: Warehouse, day: str, stores: list[str], existing: dict[str, set[str]]) -> dict[str, Births]:
    """Per store, the births of what the day's ``hermes_sessions``/``hermes_messages`` files
    hold already (D15); nothing when the day has no file."""
    sessions = warehouse.read(SESSIONS, day, columns=SESSION_BIRTH_COLUMNS) if day in existing[SESSIONS] else None
    messages = warehouse.read(MESSAGES, day, columns=MESSAGE_BIRTH_COLUMNS) if day in existing[MESSAGES] else None
    if sessions is None and messages is None:
        return {}
    return {path: Births.from_tables(sessions, messages, path) for path in stores}


@dataclass
class ProjectedRun:
    """The run's staged days: what the write step puts in place."""

    plan: CapturePlan
    staging: str
    days: list[StagedDay]

    def failures(self) -> list[StoreFailure]:
        """Every store that failed, in the plan or on any day (each once)."""
        seen: dict[str, StoreFailure] = {f.path: f for f in self.plan.failures()}
        for staged in self.days:
            for f in staged.failures:
                seen.setdefault(f.path, f)
        return list(seen.values())

    def totals(self, dataset: str) -> tuple[int, Counter, list[dict]]:
        """``(rows, errors by kind, a few samples)`` of one dataset over the run."""
        rows, by_kind, samples = 0, Counter(), []
        for staged in self.days:
            d = staged.datasets[dataset]
            rows += d.rows
            by_kind.update(d.errors_by_kind)
            samples.extend(d.samples[: max(0, 10 - len(samples))])
        return rows, by_kind, samples

    def reborn(self) -> int:
        """Stored sessions and messages whose id was captured before with another birth (D15)."""
        return sum(g.reborn for staged in self.days for g in staged.generations.values())

    def statements(self) -> Counter:
        total = Counter(self.plan.statements)
        for staged in self.days:
            total.update(staged.statements)
        return total


def project_rows(
    plan: CapturePlan,
    ctx: ProjectionContext,
    warehouse: Warehouse,
    *,
    staging: str,
    workers: int = 1,
    log_format: str | None = None,
    parallel_min_sessions: int = PARALLEL_MIN_SESSIONS,
) -> ProjectedRun:
    """Project and stage every day of ``plan`` (days in parallel). Nothing is in place
    until :func:`write_partitions`; on an error the staging folder is removed. Staged
    folders and files get the warehouse's modes (SPEC §2, D16), whatever the umask.

    A day that has no partition file yet, and whose rows come from one store, is
    staged as its final partition file; the others as Arrow IPC, merged at the
    write. Days run on ``workers`` processes when the run has at least
    ``parallel_min_sessions`` sessions.
    """
    warehouse.make_dirs(staging, os.path.dirname(os.path.abspath(staging)))
    ctx = replace(ctx, now_s=plan.read_at)  # one clock for the sanity window of the whole run
    existing = {ds: warehouse.existing(ds, plan.days) for ds in CAPTURE_DATASETS}
    state = {
        "plan": plan,
        "ctx": ctx,
        "staging": staging,
        "log_format": log_format,
        "existing": existing,
        "file_mode": warehouse.modes.file,
        "warehouse": (warehouse.uri, warehouse.spool_setting, warehouse.modes),
    }
    if plan.sessions_in_range() < parallel_min_sessions:
        workers = 1
    try:
        days = list(map_days(stage_day, state, plan.days, workers))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    run = ProjectedRun(plan, staging, days)
    for dataset in CAPTURE_DATASETS:
        rows, by_kind, _ = run.totals(dataset)
        log.info(
            "hermes.capture.project", dataset=dataset, days=len(days), rows=rows, errors=errors.error_count(by_kind)
        )
    return run


def stage_day(state: dict, day: str) -> StagedDay:
    """Project one day (:func:`project_day`) and stage its three tables as Arrow IPC:
    cheap to write and to map back; the Parquet encoding happens once, at the write."""
    plan = state["plan"]
    births = read_births(_warehouse(state), day, [sp.store.path for sp in plan.readable()], state["existing"])
    rows = project_day(plan, day, state["ctx"], births=births)
    order = {sp.store.path: i for i, sp in enumerate(state["plan"].stores)}
    datasets = {}
    for dataset, by_store in rows.tables.items():
        staged = {}
        final = day not in state["existing"][dataset] and len(by_store) == 1
        for path, table in by_store.items():
            name = f"{dataset}.{day}.{order[path]}"
            if final and not table.num_rows:
                continue  # nothing to write, nothing to merge with
            staged[path] = os.path.join(state["staging"], name + (ENCODED_SUFFIX if final else STAGED_SUFFIX))
            with _staging(staged[path]):
                if final:
                    encode_to(dataset, table, staged[path], state["file_mode"])
                else:
                    _write_ipc(staged[path], table, state["file_mode"])
        tally = rows.tallies[dataset]
        datasets[dataset] = DatasetDay(
            sum(t.num_rows for t in by_store.values()), tally.as_dict(), tuple(tally.sample_dicts()[:10]), staged
        )
    existing = frozenset(ds for ds in CAPTURE_DATASETS if day in state["existing"][ds])
    pa.default_memory_pool().release_unused()  # a day's buffers back to the system: memory follows one day
    # retention judges the rows of a file that exists; a new day's generations are not needed
    # (and for a long first backfill they would be every message id, held until the write)
    generations = (
        rows.generations if existing else {path: Generations(reborn=g.reborn) for path, g in rows.generations.items()}
    )
    return StagedDay(day, datasets, generations, tuple(rows.failures), dict(rows.statements), existing)


def _warehouse(state: dict) -> Warehouse:
    """The run's warehouse, opened once per process (a worker opens its own client)."""
    if state.get("opened") is None:
        uri, spool, modes = state["warehouse"]
        state["opened"] = Warehouse(uri, spool=spool, modes=modes)
    return state["opened"]


def _write_ipc(path: str, table: pa.Table, mode: int = 0o600) -> None:
    with open_private(path, mode) as f, pa.ipc.new_file(f, table.schema) as writer:
        writer.write_table(table)


@contextlib.contextmanager
def _staging(path: str):
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


def write_staged(dataset: str, path: str, table: pa.Table) -> None:
    """Replace a staged table atomically, in its own form (the purge job scrubs staged days)."""
    tmp = path + ".tmp"
    if path.endswith(ENCODED_SUFFIX):
        encode_to(dataset, table, tmp)
    else:
        _write_ipc(tmp, table)
    os.replace(tmp, path)


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


def write_partitions(run: ProjectedRun, warehouse: Warehouse, *, workers: int = 4) -> WrittenRun:
    """Merge each staged day into its three partition files, atomically, under each
    day's lock, on ``workers`` threads. Stores that failed anywhere in the run keep
    their rows untouched on every day. The staging folder is removed once every day
    is in place; if a write fails it stays, so the step can be re-executed."""
    failures = run.failures()
    failed = {f.path for f in failures}
    results: dict[str, list[WriteResult]] = {ds: [] for ds in CAPTURE_DATASETS}
    if any(sp.status == READ and sp.store.path not in failed for sp in run.plan.stores):
        write = functools.partial(_write_day, run, warehouse, failed)
    else:  # no store read: nothing to merge, every day's files stay as they are
        write = functools.partial(_current_day, warehouse)
    if not warehouse.posix:
        _ = warehouse.fs  # one client for every thread, opened here (a bad URI fails before any thread starts)
    with ThreadPoolExecutor(max(1, min(workers, len(run.days)))) as pool:
        # each day in a copy of the caller's context: its log fields (the run and step) follow it
        futures = [pool.submit(contextvars.copy_context().run, write, staged) for staged in run.days]
        for per_dataset in (f.result() for f in futures):
            for dataset, result in per_dataset.items():
                results[dataset].append(result)
    shutil.rmtree(run.staging, ignore_errors=True)
    written = WrittenRun(results, failures, sum(1 for sp in run.plan.readable() if sp.store.path not in failed))
    for dataset in CAPTURE_DATASETS:
        totals = written.totals(dataset)
        log.info(
            "hermes.capture.write",
            dataset=dataset,
            days=len(results[dataset]),
            rows=totals["rows_written"],
            retained=totals["rows_retained_source_deleted"],
            files_changed=totals["files_changed"],
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
        out[dataset] = warehouse.write_day(dataset, staged.day, new, facts, run.plan.read_at)
    return out


# --------------------------------------------------------------------------
# days in parallel, on spawned worker processes
# --------------------------------------------------------------------------

_WORKER_STATE: dict = {}


def _init_worker(state: dict) -> None:
    logs.configure(state.get("log_format"))
    _WORKER_STATE.clear()
    _WORKER_STATE.update(state)


def _call_in_worker(fn, day: str):
    return fn(_WORKER_STATE, day)


def map_days(fn, state: dict, days: list[str], workers: int = 1):
    """``fn(state, day)`` for every day, in day order, on ``workers`` processes: this one
    and ``workers - 1`` spawned ones.

    Days are independent (a session lives in one day), so a range uses every
    core. The calling process takes days too (it would only wait otherwise), from
    the end of the list while the spawned workers take them from the start: one
    process fewer to start and to hold in memory. Workers are *spawned* (a fresh
    interpreter that imports this module), never forked from the caller, which
    runs threads (Dagster's, pyarrow's): a child forked from a threaded process can
    deadlock or crash. ``state`` reaches each worker once; ``fn`` must be a
    module-level function returning small values.
    """
    workers = min(workers, len(days))
    if workers <= 1:
        for day in days:
            yield fn(state, day)
        return
    results: dict[str, object] = {}
    todo = collections.deque(days)
    running: dict = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers - 1, mp_context=context, initializer=_init_worker, initargs=(state,)) as pool:

        def feed() -> None:  # every spawned worker one day ahead
            with _main_not_reimported():  # workers start while days are submitted
                while todo and len(running) < 2 * (workers - 1):
                    day = todo.popleft()
                    running[pool.submit(_call_in_worker, fn, day)] = day

        try:
            feed()
            while todo or running:
                if todo:
                    day = todo.pop()
                    results[day] = fn(state, day)
                    done = [f for f in running if f.done()]
                else:
                    done = wait(running, return_when=FIRST_COMPLETED).done
                for future in done:
                    results[running.pop(future)] = future.result()
                feed()
        except BaseException:
            for future in running:
                future.cancel()
            raise
    for day in days:
        yield results[day]


@contextlib.contextmanager
def _main_not_reimported():
    """Keep spawned workers from importing the caller's main script.

    Workers only run functions of this package, but multiprocessing imports the
    parent's ``__main__`` script in every child; for the ``dagster`` command that
    is all of Dagster, a second of CPU per worker. A main module whose spec is
    named ``__main__`` is one multiprocessing does not import again, so the main
    script gets such a spec while the workers start. (A main run as
    ``python -m package`` has a spec already and is left alone.)
    """
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = None
