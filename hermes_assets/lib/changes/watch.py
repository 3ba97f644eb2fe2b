"""Which partitions changed since the last look at the Hermes stores (SPEC §8, D17, D18).

The sensor's cursor (:mod:`hermes_assets.lib.changes.cursor`, typed and versioned)
keeps, per store: the identity of its files, the ``messages`` marks
(``max(id)`` and the ``sqlite_sequence`` high-water mark; new messages are the
rows with ``id > max_mid``, a rowid range scan; a mark that went down, or a new
inode, means the store was replaced), the tier-2 rotation, and per UTC day the
two fingerprints of :mod:`hermes_assets.lib.changes.fingerprint` and the one last
captured. A day is done when its run succeeds, not when it is requested: the
requests in flight are followed to their end by :mod:`hermes_assets.lib.changes.attempts`,
and a day whose run failed is requested again, with backoff.

Every partition day is captured once the sensor has seen it, sessions or not: a partition day
that no store holds a session on and that no capture was ever requested of (the cursor's
``covered`` spans) is requested once, as a day *without sessions* (its run writes no file and
shows 0 rows, and its checks pass): the days of a history with gaps, the days between its last
session and today, today itself when it begins. Only when every store could be read and at
least one exists: an idle machine with no Hermes requests nothing.

Each store is scanned by :mod:`hermes_assets.lib.changes.store_scan` (what changed in
it since the cursor, and the table of what each Hermes write changes and when
a tick sees it). Then, for every store together, the runs of the open attempts
are looked up: a day whose run failed and whose wait is over is requested
again, and a changed day whose run still waits in the queue is left to it.

Stores are independent (SPEC D18): a store that is busy, corrupt, replaced by
something unreadable or not a Hermes store is reported in :attr:`TickPlan.scans`
(``status`` ``failed``, ``error_kind``), keeps its cursor entry as it was, and
the other stores' days are requested as usual; a later tick reads it again.

Run keys: ``f"{day}@{h}"`` where ``h`` hashes, for every store in which the
day changed, its label, the day's new fingerprints and the store files'
identity. The identity is in there because a fingerprint alone can come back
(a flag set then cleared): Dagster silently skips a run key it has seen, and
the partition would keep the intermediate state. A day requested again after
a failed run gets ``h`` of :func:`~hermes_assets.lib.changes.attempts.retry_hash`.
More than ``max_runs`` days in one tick make one ranged run
(:func:`run_groups`).

No Dagster here: the sensor in ``defs/sensors.py`` turns a :class:`TickPlan`
into run requests.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hermes_assets.lib.basics.errors import StoreFailure
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.changes import attempts
from hermes_assets.lib.changes.cursor import Cursor, load_cursor
from hermes_assets.lib.changes.store_scan import (  # noqa: F401  (statuses and helpers, as callers know them here)
    _READ_STATUSES,
    FAILED,
    MISSING,
    NEW,
    READ,
    REPLACED,
    ROTATED,
    ROTATION_TICKS,
    UNCHANGED,
    StoreScan,
    file_identity,
    scan_store,
)
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.stores import Store

log = get_logger()


# --------------------------------------------------------------------------
# run keys
# --------------------------------------------------------------------------


def run_hash(parts: list[tuple[str, str | None, str]]) -> str:
    """Short hash of ``(store label, day fingerprint or None, files stamp)`` for the stores that changed a day."""
    ordered = sorted(parts, key=lambda p: (p[0], p[2]))
    text = "\n".join(f"{label}\t{fp or '-'}\t{stamp}" for label, fp, stamp in ordered)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=6).hexdigest()


def run_groups(requests: list[tuple[str, str]], max_runs: int) -> list[tuple[list[str], str]]:
    """``(days, run key)`` of each run: one per day, or one ranged run when more than ``max_runs`` days."""
    if len(requests) <= max_runs:
        return [([day], f"{day}@{h}") for day, h in requests]
    days = sorted(day for day, _ in requests)
    h = hashlib.sha256("|".join(f"{d}@{x}" for d, x in sorted(requests)).encode()).hexdigest()[:12]
    return [(days, f"{days[0]}...{days[-1]}@{h}")]


def empty_groups(days: list[str], max_runs: int, now_s: float) -> list[tuple[list[str], str]]:
    """``(days, run key)`` of the runs of days without sessions: one per span of consecutive days,
    or one ranged run over them all when there are more than ``max_runs`` spans. The key holds the
    time of the request: a day requested again after the cursor was reset gets a key Dagster has
    not seen (it skips one it has, whatever became of that run)."""
    spans: list[list[str]] = []
    for day in sorted(days):
        if spans and dt.date.fromisoformat(day) - dt.date.fromisoformat(spans[-1][-1]) == dt.timedelta(days=1):
            spans[-1].append(day)
        else:
            spans.append([day])
    if len(spans) > max_runs:
        spans = [sorted(days)]
    runs = []
    for span in spans:
        h = hashlib.blake2b(f"no sessions\t{','.join(span)}\t{now_s}".encode(), digest_size=6).hexdigest()
        runs.append((span, f"{span[0]}@{h}" if len(span) == 1 else f"{span[0]}...{span[-1]}@{h}"))
    return runs


# --------------------------------------------------------------------------
# one tick
# --------------------------------------------------------------------------


@dataclass
class TickPlan:
    """The outcome of one tick: days to request (with their run-key hash), the runs, the new cursor."""

    requests: list[tuple[str, str]]  # (day, h), newest day first
    runs: list[tuple[list[str], str]]  # (days, run key) of each run to request
    pending: dict[str, str]
    cursor: Cursor
    scans: list[StoreScan]
    skip_reason: str | None
    follow: attempts.FollowUp | None = None
    retried: list[str] = field(default_factory=list)  # days requested again after a failed run
    coalesced: list[str] = field(default_factory=list)  # changed days whose queued run will capture them
    early: list[str] = field(default_factory=list)  # days before the first partition, requested in one run
    empty: list[str] = field(default_factory=list)  # partition days without sessions, requested once
    failing: list[str] = field(default_factory=list)  # days whose runs keep failing (attempts.FAILING_AFTER)
    failing_before: list[str] = field(default_factory=list)  # the same, as the last tick left it
    unchanged: str | None = None  # the cursor's text, when the tick changed nothing in it
    ms: float = 0.0

    @property
    def cursor_json(self) -> str:
        return self.unchanged if self.unchanged is not None else self.cursor.dump()

    @property
    def failures(self) -> list[StoreScan]:
        return [s for s in self.scans if s.status == FAILED]

    @property
    def failed(self) -> list[tuple[StoreScan, StoreFailure]]:
        """The stores this tick could not read, each with what happened."""
        return _failed(self.scans)

    def counts(self) -> dict:
        """Counts for the tick log (ids and counts only). Runs are counted by the sensor:
        several days can make one ranged run."""
        by_status: dict[str, int] = {}
        for s in self.scans:
            by_status[s.status] = by_status.get(s.status, 0) + 1
        changed = {d for s in self.scans for d in s.changed}
        follow = self.follow or attempts.FollowUp([], [], [], {}, 0)
        return {
            "stores": len(self.scans),
            "stores_missing": by_status.get(MISSING, 0),
            "stores_unchanged": by_status.get(UNCHANGED, 0),
            "stores_read": sum(by_status.get(k, 0) for k in _READ_STATUSES),
            "stores_new": by_status.get(NEW, 0),
            "stores_replaced": by_status.get(REPLACED, 0),
            "stores_failed": by_status.get(FAILED, 0),
            "days_changed": len(changed),
            "days_requested": len(self.requests),
            "days_retried": len(self.retried),
            "days_left_to_queued_runs": len(self.coalesced),
            "days_before_first_partition": len(self.early),
            "days_without_sessions": len(self.empty),
            "days_pending": len(self.pending),
            "days_captured": len(follow.succeeded),
            "days_run_failed": len(follow.failed),
            "days_in_flight": follow.running,
            "days_waiting_retry": len(follow.waiting),
            "days_failing": len(self.failing),
            "tier2_days": sum(s.tier2_days for s in self.scans),
            "new_messages": sum(s.new_messages for s in self.scans),
            "sessions": sum(s.sessions for s in self.scans),
            "sessions_unplaced": sum(s.unplaced for s in self.scans),
        }


def plan_tick(
    stores: list[Store],
    cursor_text: str | None,
    *,
    is_partition: Callable[[str], bool],
    readers: ReaderFactory | None = None,
    now_s: float | None = None,
    outcomes: attempts.Outcomes | None = None,
    max_runs: int = 1 << 30,
    before_first: Callable[[str], bool] | None = None,
    partition_days: Sequence[str] | None = None,
) -> TickPlan:
    """Compare the stores with the cursor; return the days to request and the new cursor.

    ``is_partition(day)`` says whether the partitions definition has that key;
    a changed day it lacks is kept in ``pending`` and requested on the first
    tick where it exists. ``before_first(day)`` says whether a day the
    partitions lack is history older than their first day that a run can
    capture all the same (the run loads the definitions afresh, and they
    start at the earliest session then): such days are requested at once,
    all in one run of their own (:attr:`TickPlan.early`; ranged when there are
    several), never kept waiting for a reload. A store that cannot be read is
    reported in the plan's scans and keeps its cursor entry; it never stops the
    other stores.
    ``outcomes`` looks up how the runs of earlier requests ended
    (:mod:`hermes_assets.lib.changes.attempts`); without it, requests are not followed.
    ``partition_days``: every day of the partitions, the first to today; those no store holds a
    session on, never requested before, are requested once, as days without sessions
    (:attr:`TickPlan.empty`, :func:`empty_groups`). Without it, none is.
    """
    t0 = time.perf_counter()
    wall = time.time() if now_s is None else now_s
    cursor = load_cursor(cursor_text)
    readers = readers or ReaderFactory()
    pending_before = dict(cursor.pending)
    scans, read = [], False
    for store in stores:  # stores not discovered, missing or failed keep their entry
        scan, entry = scan_store(store, cursor.stores.get(store.path), readers, now_s)
        scans.append(scan)
        if entry is not None:
            cursor.stores[store.path] = entry
            read = True

    # one request per day, whatever the number of stores that changed it
    parts: dict[str, list[tuple[str, str | None, str]]] = {}
    for scan in scans:
        for day, fp in scan.changed.items():
            parts.setdefault(day, []).append((scan.store.label, fp, scan.stamp))
    changed = {day: run_hash(p) for day, p in parts.items()}

    # days done, failed, due again (attempts.py); a day requested for a change needs no retry; a
    # change of a day whose run waits in the queue is that run's to capture
    follow = attempts.follow(cursor, outcomes, wall)
    coalesced = sorted(set(changed) & follow.queued)
    attempts.refresh(cursor, coalesced)
    for day in coalesced:
        del changed[day]
    retried = {day: attempts.retry_hash(cursor.attempts[day]) for day in follow.due if day not in changed}
    for day in attempts.uncaptured(cursor) - set(changed) - set(retried) - set(cursor.pending):
        retried[day] = run_hash([("", day, f"uncaptured at {wall}")])

    pending = cursor.pending
    requests: dict[str, str] = {}
    for day, h in (changed | retried).items():
        pending.pop(day, None)
        if is_partition(day):
            requests[day] = h
        else:
            pending[day] = h
    for day, h in list(pending.items()):
        if is_partition(day):  # e.g. the day after a clock-skewed session became today
            requests[day] = h
            del pending[day]
    # history older than the first partition: every such day of the tick in one run (ranged from the
    # oldest to the newest when there are several), apart from the other days' runs (it computes its
    # days' analytics too). One run, never one a day: each run costs a process and a load of the
    # definitions (10-20 s on a busy machine) and the queue starts at most two of the sensor's runs at
    # once (dagster.yaml), so a restored history of N days, one run each, would wait N such turns
    early: dict[str, str] = {}
    if before_first is not None:
        for day in sorted((d for d in pending if before_first(d)), reverse=True):
            early[day] = pending.pop(day)

    ordered = sorted(requests.items(), reverse=True)
    runs = run_groups(ordered, max_runs)
    empty = _days_without_sessions(cursor, scans, partition_days, busy=set(requests) | set(early) | set(pending))
    runs += empty_groups(empty, max_runs, wall)
    if early:
        runs += run_groups(sorted(early.items(), reverse=True), 1)
    ordered = sorted((requests | early).items(), reverse=True)
    cursor.covered.add(day for days, _ in runs for day in days)
    attempts.open_attempts(cursor, runs, wall)
    failing_before, cursor.failing = cursor.failing, attempts.failing(cursor)
    plan = TickPlan(
        requests=ordered,
        runs=runs,
        pending=pending,
        cursor=cursor,
        scans=scans,
        skip_reason=None,
        follow=follow,
        retried=sorted(d for d in retried if d in requests),
        coalesced=coalesced,
        early=sorted(early),
        empty=empty,
        failing=cursor.failing,
        failing_before=failing_before,
    )
    if not plan.runs:
        plan.skip_reason = _skip_reason(scans, changed, pending) + _waiting_note(follow, coalesced, wall)
    if not (
        read
        or runs
        or coalesced
        or follow.succeeded
        or follow.failed
        or cursor.reset
        or pending != pending_before
        or cursor.failing != failing_before
    ):
        plan.unchanged = cursor_text  # the same cursor: not written out again (a no-change tick)
    plan.ms = (time.perf_counter() - t0) * 1000
    return plan


def _days_without_sessions(
    cursor: Cursor, scans: list[StoreScan], partition_days: Sequence[str] | None, busy: set[str]
) -> list[str]:
    """The partition days to request as days without sessions: no store holds a session on them
    (as the cursor knows the stores), no capture of them was ever requested (``covered``), none is
    open or requested on this tick (``busy``). None while a store cannot be read (its days are
    unknown), nor when no store exists (Hermes not installed: the sensor stays idle)."""
    if partition_days is None or not scans or any(s.status == FAILED for s in scans):
        return []
    if all(s.status == MISSING for s in scans):
        return []
    with_sessions = {day for state in cursor.stores.values() for day in state.days}
    taken = busy | with_sessions | set(cursor.attempts)
    return [day for day in partition_days if day not in taken and day not in cursor.covered]


def _waiting_note(follow: attempts.FollowUp, coalesced: list[str], now_s: float) -> str:
    """What the skip reason adds about runs in the queue and failed days waiting to be requested again."""
    note = ""
    if coalesced:
        note += f"; {len(coalesced)} changed day(s) ({', '.join(coalesced[:5])}) left to their run waiting in the queue"
    if follow.waiting:
        day, at = min(follow.waiting.items(), key=lambda item: item[1])
        note += (
            f"; {len(follow.waiting)} day(s) whose capture failed wait to be requested again "
            f"(next: {day} in {max(0, round(at - now_s))} s)"
        )
    return note


def _failed(scans: list[StoreScan]) -> list[tuple[StoreScan, StoreFailure]]:
    # a FAILED scan always holds its failure (store_scan sets both together)
    return [(s, s.failure) for s in scans if s.status == FAILED and s.failure is not None]


def _skip_reason(scans: list[StoreScan], changed: dict, pending: dict) -> str:
    failed = _failed(scans)
    healthy = [s for s in scans if s.status != FAILED]
    reason = _healthy_reason(healthy, changed, pending) if healthy else ""
    if not failed:
        return reason
    failures = "; ".join(
        f"{s.store.path} could not be read ({failure.error_kind}): {failure.message}" for s, failure in failed
    )
    text = (
        f"{_count(len(failed), 'store')} could not be read; the next check reads "
        f"{'it' if len(failed) == 1 else 'them'} again (their cursor entries are kept): {failures}"
    )
    return f"{text} | the other stores: {reason}" if reason else text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _healthy_reason(scans: list[StoreScan], changed: dict, pending: dict) -> str:
    """Why a tick requested nothing, as a person reads it in the UI (the sensor's latest tick)."""
    missing = [s.store.path for s in scans if s.status == MISSING]
    if scans and len(missing) == len(scans):
        return "; ".join(f"no Hermes installation at {p}" for p in missing)
    if changed:
        days = sorted(changed)
        return (
            f"no change to capture yet: Hermes has new activity on {_count(len(days), 'day')} outside the "
            f"partitions ({', '.join(days[:5])}{' ...' if len(days) > 5 else ''}), kept pending "
            f"({len(pending)} in all) until they are partitions: a day after today (a writer whose clock "
            "runs ahead) when today reaches it; a day before HERMES_ASSETS_START_DATE when the setting "
            "is moved back to it (unset, older history is captured as it comes)"
        )
    read = [s for s in scans if s.status in (READ, NEW, REPLACED)]
    tail = f"; no store yet at {', '.join(missing)}" if missing else ""
    watched = len(scans) - len(missing)
    store = "the Hermes store" if watched == 1 else f"the {watched} Hermes stores"
    if read:
        return (
            f"no change: Hermes wrote to {store} (a checkpoint, or tables this project does not capture) "
            f"but no session or message changed{tail}"
        )
    return f"no change: nothing new in {store} since the last check{tail}"
