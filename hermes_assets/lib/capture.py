"""From stores to partition files, one step at a time.

The Dagster shell runs these steps as ops (read -> policy -> project -> write);
each step takes and returns small plain values, never a whole store:

1. :func:`plan_capture` scans each store's ``sessions`` table (one short
   statement) and places every session on its day (SPEC §2);
2. :func:`apply_policy` classifies the sessions of the requested days, with
   their ancestors, before any row is built (SPEC §7, D9);
3. :func:`project_day` reads one day's kept sessions whole and builds the rows
   of the requested datasets;
4. :meth:`Warehouse.write_day` merges and replaces the day's files.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import shutil
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from hermes_assets.lib import errors, policy, projection, schemas
from hermes_assets.lib.errors import ErrorTally
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.state_db import Store, StoreReader
from hermes_assets.lib.warehouse import GATEWAY, MESSAGES, SESSIONS, StoreFacts, Warehouse, encode

log = get_logger()


@dataclass
class StorePlan:
    """One store's sessions, placed on days and (after policy) classified."""

    store: Store
    missing: bool = False
    #: sid -> day (None when the session has no sane time at all)
    days: dict[str, str | None] = field(default_factory=dict)
    #: sid -> the id as SQLite stores it, where that is not the same string (old integer ids)
    raw_ids: dict[str, object] = field(default_factory=dict)
    #: sid -> (scope path, parent sid), for the sessions of the requested days and their ancestors
    scopes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    #: sid -> policy class, for the sessions of the requested days
    classes: dict[str, str] = field(default_factory=dict)

    def sessions_on(self, day: str) -> list[str]:
        return sorted(sid for sid, d in self.days.items() if d == day)

    def kept_on(self, day: str) -> set[str]:
        return {sid for sid in self.sessions_on(day) if self.classes.get(sid, policy.FULL) != policy.IGNORE}

    def ignored_on(self, day: str) -> set[str]:
        return {sid for sid in self.sessions_on(day) if self.classes.get(sid) == policy.IGNORE}


@dataclass
class CapturePlan:
    days: list[str]
    stores: list[StorePlan]
    #: when the stores were first read for this plan: the snapshot's "as of" time.
    #: A day file written from a later plan is never overwritten by this one.
    read_at: float = 0.0
    #: (store label, sid, day or None) of sessions outside the partition range
    out_of_range: list[tuple[str, str, str | None]] = field(default_factory=list)

    def sessions_in_range(self) -> int:
        wanted = set(self.days)
        return sum(1 for sp in self.stores for d in sp.days.values() if d in wanted)


def plan_capture(
    stores: list[Store],
    days: list[str],
    *,
    user_home: str,
    first_day: str | None = None,
    last_day: str | None = None,
    now_s: float | None = None,
    busy_timeout_ms: int | None = None,
) -> CapturePlan:
    """Place every session of every store on its day. A missing store is a state."""
    read_at = time.time()
    now_s = read_at if now_s is None else now_s
    wanted = set(days)
    plan = CapturePlan(days=sorted(wanted), stores=[], read_at=read_at)
    for store in stores:
        sp = StorePlan(store)
        plan.stores.append(sp)
        if not store.exists():
            sp.missing = True
            log.info("hermes.store.missing", path=store.path, store=store.label)
            continue
        try:
            with _reader(store, now_s, busy_timeout_ms) as reader:
                index = reader.session_index()
        except (FileNotFoundError, errors.StoreMissing):  # vanished since, or not created yet
            sp.missing = True
            log.info("hermes.store.missing", path=store.path, store=store.label)
            continue
        for sid, entry in index.items():
            sp.days[sid] = entry.day
            if entry.raw_id != sid:
                sp.raw_ids[sid] = entry.raw_id
            if entry.day is None or (first_day and entry.day < first_day) or (last_day and entry.day > last_day):
                plan.out_of_range.append((store.label, sid, entry.day))
        # scopes of the requested days' sessions and of all their ancestors
        todo = [sid for sid, entry in index.items() if entry.day in wanted]
        while todo:
            sid = todo.pop()
            if sid in sp.scopes or sid not in index:
                continue
            entry = index[sid]
            sp.scopes[sid] = (policy.scope_path(entry.source, entry.cwd, user_home), entry.parent)
            if entry.parent:
                todo.append(entry.parent)
    for label, sid, day in plan.out_of_range:
        log.warning("hermes.capture.out_of_range_session", store=label, session_id=sid, day=day,
                    error_kind=errors.OUT_OF_RANGE_SESSION)
    return plan


def apply_policy(plan: CapturePlan, resolver: policy.PolicyResolver) -> dict[str, int]:
    """Classify the requested days' sessions; return the counts for op metadata."""
    counts = Counter()
    wanted = set(plan.days)
    for sp in plan.stores:
        classes = resolver.classify_sessions(sp.scopes)
        sp.classes = {sid: cls for sid, cls in classes.items() if sp.days.get(sid) in wanted}
        counts["sessions_in"] += len(sp.classes)
        counts.update(cls for cls in sp.classes.values())
    return {
        "sessions_in": counts["sessions_in"],
        "kept": counts["sessions_in"] - counts[policy.IGNORE],
        "ignored": counts[policy.IGNORE],
        "local_only": counts[policy.LOCAL_ONLY],
        "errors": 0,
        "warnings": len(resolver.warnings),
    }


@dataclass
class DayRows:
    """One day's rows for the requested datasets, with what retention needs."""

    day: str
    tables: dict[str, pa.Table]
    facts: list[StoreFacts]
    tally: ErrorTally

    def mids(self) -> dict[str, set[int]]:
        return {f.path: f.mids for f in self.facts}


def facts_for_day(plan: CapturePlan, day: str, mids: dict[str, set[int]]) -> list[StoreFacts]:
    """What retention needs to judge the day's previously written rows (SPEC §6)."""
    return [
        StoreFacts(sp.store.path, sp.store.path_hash, sp.days, mids=mids.get(sp.store.path, set()),
                   ignored=sp.ignored_on(day))
        for sp in plan.stores
    ]


def project_day(
    plan: CapturePlan,
    day: str,
    datasets: set[str],
    ctx: projection.ProjectionContext,
    *,
    busy_timeout_ms: int | None = None,
) -> DayRows:
    """Read the day's kept sessions whole and build the rows of ``datasets``."""
    tally = ErrorTally()
    gateway = projection.GatewayColumns()
    sessions = projection.sessions_columns()
    messages = projection.messages_columns()
    mids: dict[str, set[int]] = {}
    columns = schemas.MESSAGE_COLUMNS if MESSAGES in datasets else projection.GATEWAY_MESSAGE_COLUMNS
    for sp in plan.stores:
        seen = mids.setdefault(sp.store.path, set())
        kept = sp.kept_on(day)
        if sp.missing or not kept:
            continue
        with _reader(sp.store, ctx.now_s, busy_timeout_ms) as reader:
            wanted = [(sid, sp.raw_ids.get(sid, sid)) for sid in sorted(kept)]
            for bundle in reader.read_sessions(day, wanted, columns):
                seen.update(m["id"] for m in bundle.messages if isinstance(m["id"], int))
                cls = sp.classes.get(bundle.sid, policy.FULL)
                if GATEWAY in datasets:
                    projection.project_session(bundle, gateway, ctx, tally, policy_class=cls)
                if SESSIONS in datasets:
                    scope = sp.scopes.get(bundle.sid, (None, None))[0]
                    projection.session_row(bundle, sessions, day=day, scope_path=scope, policy_class=cls, now_s=ctx.now_s)
                if MESSAGES in datasets:
                    projection.message_rows(bundle, messages, day=day, now_s=ctx.now_s)
            tally.merge(reader.tally)
    tables = {}
    if GATEWAY in datasets:
        tables[GATEWAY] = gateway.to_table()
    if SESSIONS in datasets:
        tables[SESSIONS] = sessions.to_table()
    if MESSAGES in datasets:
        tables[MESSAGES] = messages.to_table()
    return DayRows(day, tables, facts_for_day(plan, day, mids), tally)


def _reader(store: Store, now_s: float, busy_timeout_ms: int | None) -> StoreReader:
    timeout = busy_timeout_ms if busy_timeout_ms is not None else int(
        os.environ.get("HERMES_ASSETS_BUSY_TIMEOUT_MS", "2000")
    )
    return StoreReader(store, busy_timeout_ms=timeout, now_s=now_s)


# --------------------------------------------------------------------------
# days in parallel
# --------------------------------------------------------------------------

_WORKER_STATE: dict = {}


def _init_worker(state: dict) -> None:
    _WORKER_STATE.clear()
    _WORKER_STATE.update(state)


def _call_in_worker(fn, day: str):
    return fn(_WORKER_STATE, day)


def default_workers() -> int:
    configured = os.environ.get("HERMES_ASSETS_WORKERS", "").strip()
    return max(1, int(configured)) if configured else (os.cpu_count() or 1)


def map_days(fn, state: dict, days: list[str], workers: int | None = None):
    """``fn(state, day)`` for every day, in day order, on up to ``workers`` processes.

    Days are independent (a session lives in one day), so a range uses every
    core. ``state`` reaches the workers once, by fork, not per day; ``fn`` must
    be a module-level function and should return small values (counts, paths).
    One day, or one worker, runs inline.
    """
    workers = min(workers or default_workers(), len(days))
    if workers <= 1:
        for day in days:
            yield fn(state, day)
        return
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(state,)) as pool:
        yield from pool.map(functools.partial(_call_in_worker, fn), days)


# --------------------------------------------------------------------------
# the per-day work of the assets (run by map_days, in worker processes)
# --------------------------------------------------------------------------


def stage_day(state: dict, day: str) -> dict:
    """Build one day of ``state["datasets"]`` into staged files: the exact bytes of
    each partition file, beside the warehouse, not yet in place.

    Staging every day before writing any means a store-level failure (busy,
    corrupt) part-way through a range changes no partition file (SPEC §9).
    """
    datasets = state["datasets"]
    rows = project_day(state["plan"], day, set(datasets), state["ctx"], busy_timeout_ms=state.get("busy_timeout_ms"))
    paths = {}
    for dataset in datasets:
        paths[dataset] = os.path.join(state["staging"], f"{dataset}.{day}.staged")
        with open(paths[dataset], "wb") as f:
            f.write(memoryview(encode(dataset, rows.tables[dataset])))
    return {"day": day, "paths": paths, "mids": rows.mids(), "tally": rows.tally, "read_at": state["plan"].read_at,
            "rows": {ds: t.num_rows for ds, t in rows.tables.items()}}


def write_staged_day(state: dict, day: str) -> dict:
    """Put one staged day in place, dataset by dataset (merge, atomic replace)."""
    item = state["staged"][day]
    warehouse = state.get("opened") or Warehouse(state["warehouse"])
    return {ds: warehouse.write_staged_day(ds, day, path, item["facts"], item["read_at"])
            for ds, path in item["paths"].items()}


def write_days(state: dict, days: list[str], workers: int | None = None):
    """:func:`write_staged_day` for every day, in day order.

    A local warehouse writes on worker processes (merges are CPU work). A URI
    warehouse writes on threads sharing one ``pyarrow.fs`` client: its time is
    network waits, and an object-store client must not cross a fork.
    """
    warehouse = Warehouse(state["warehouse"])
    if warehouse.posix:
        yield from map_days(write_staged_day, state, days, workers)
        return
    warehouse.fs  # one client for every thread, opened here (a bad URI fails before any thread starts)
    state = {**state, "opened": warehouse}
    workers = min(workers or max(4, default_workers()), len(days)) or 1
    with ThreadPoolExecutor(workers) as pool:
        yield from pool.map(functools.partial(write_staged_day, state), days)


def capture_days(plan: CapturePlan, datasets: tuple[str, ...], ctx: projection.ProjectionContext, *,
                 warehouse: str, staging: str, busy_timeout_ms: int | None = None):
    """Stage every day of ``plan`` (in parallel), then write them.

    Returns ``(staged, written)``: per day the projection figures (rows, tally)
    and per day the :class:`WriteResult` of each dataset.
    """
    os.makedirs(staging, exist_ok=True)
    try:
        state = {"plan": plan, "ctx": ctx, "datasets": datasets, "warehouse": warehouse,
                 "staging": staging, "busy_timeout_ms": busy_timeout_ms}
        staged = list(map_days(stage_day, state, plan.days))
        for item in staged:
            item["facts"] = facts_for_day(plan, item["day"], item.pop("mids"))
        write_state = {"warehouse": warehouse, "staged": {item["day"]: item for item in staged}}
        written = list(write_days(write_state, plan.days))
        return staged, written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
