"""Which partitions changed since the last look at the Hermes stores (SPEC §8, D17, D18).

The sensor's cursor (:mod:`hermes_assets.lib.cursor`, typed and versioned)
keeps, per store: the identity of its files, the ``messages`` marks
(``max(id)`` and the ``sqlite_sequence`` high-water mark; new messages are the
rows with ``id > max_mid``, a rowid range scan; a mark that went down, or a new
inode, means the store was replaced), the tier-2 rotation, and per UTC day the
two fingerprints of :mod:`hermes_assets.lib.fingerprint` and the one last
captured. A day is done when its run succeeds, not when it is requested: the
requests in flight are followed to their end by :mod:`hermes_assets.lib.attempts`,
and a day whose run failed is requested again, with backoff.

A tick, per store:

1. Files unchanged and the rotation idle: nothing else, no SQL (two ``stat``).
2. Files changed: new messages by mid, tier 1 of every day, and the days whose
   tier 1 moved, that lost every session, or that hold a session with new
   messages are requested; each gets its tier 2 on this tick. The rotation
   restarts for :data:`ROTATION_TICKS` ticks.
3. While the rotation runs (files changed or not), tier 2 of the ``share``
   days whose tier 2 is oldest, ``share = ceil(days / 16)`` (never lowered
   while the rotation runs); a day whose tier 2 moved is requested. A change
   that tier 1 does not see is therefore requested within 16 ticks: on the
   tick it is committed the rotation restarts, and in 16 ticks of ``share``
   oldest days each, every day present at that tick is digested again (days
   that appear later are digested the tick they appear).

Then, for every store together: the runs of the open attempts are looked up;
a day whose run failed and whose wait is over is requested again.

What each Hermes write (hermes-agent 0.19.0) changes, and when a tick sees it:

=============================  ===============================================  =============
``append_message``             new mid; ``message_count``                       next tick
``end_session``, reopen,       ``ended_at`` (with ``end_reason``), token        next tick
``update_token_counts``,       totals, costs, ``title``, ``model``,
titles, archive, handoff       ``archived``, ``handoff_state`` (tier 1)
``rewind_to_message``          ``rewind_count`` + 1 (always); inactive count    next tick
``restore_rewound``            inactive count of a rewound session (tier 1)     next tick
``archive_and_compact``        new mids; ``message_count``                      next tick
``replace_messages``,          new mids (unless replaced by nothing);           next tick
``clear_messages``             ``message_count``
``delete_session``, prune      the session's row is gone from its day           next tick
new session                    its day's session count                          next tick
``record_auxiliary_usage``,    the session's ``session_model_usage`` rows        next tick
``update_token_counts``        (tier 1: every usage row, digested per day)
pin, hide, auto-archive,       ``pinned``, ``hidden``, ``auto_archived``,        next tick
title source, prompt (v0.22)   ``title_source``, ``system_prompt_hash`` (tier 1)
a prompt row appears for a     the session's prompt resolves to it: the          next tick
hash (schema 25+)              ``system_prompts`` row of the hash (tier 1)
store restored or replaced     new inode or ``sqlite_sequence`` went down:      next tick
                               every day present is requested
``update_system_prompt``,      other columns (``system_prompt``,                within 16
``update_session_meta``,       ``model_config``, billing, cwd/git, gateway      ticks
``update_session_cwd``,        ids, compression state ...): tier 2
gateway peer, billing route
inactive rows of a session     inactive count of a never-rewound session with   within 16
never rewound (no Hermes API)  live messages: tier 2                            ticks
``set_latest_user_api_content`` NOT seen: it only rewrites ``messages.api_content``  (next change
                               of the newest user row, right after a compaction  of the day)
                               inserted that row (whose new mid is seen)
=============================  ===============================================  =============

Cost of a tick whose files changed: one pass over ``sessions`` (tier 1, one
row per day to Python) plus the new messages (rowid range) plus tier 2 of
``ceil(days / 16)`` days and of the changed ones (their rows). The
``messages`` table is never scanned; the cost grows with the sessions table
(~1.7-3 us a session: SQLite reads every page of it, prompts included) and not
with the messages. On the 1.07M-message bench store (59k sessions, 330 days;
``bench/sensor_bench.py``, a 2-core machine shared with other work, load 2-3):
tier 1 ~200 ms (of which ~85 ms of CPU is SQLite reading the table's 46k
pages, prompts included), tier 2 of 21 days ~40 ms. A tick whose files did
not move costs ~0.1 ms once the rotation is idle, ~40 ms while it runs.

Stores are independent (SPEC D18): a store that is busy, corrupt, replaced by
something unreadable or not a Hermes store is reported in :attr:`TickPlan.scans`
(``status`` ``failed``, ``error_kind``), keeps its cursor entry as it was, and
the other stores' days are requested as usual; a later tick reads it again.

Run keys: ``f"{day}@{h}"`` where ``h`` hashes, for every store in which the
day changed, its label, the day's new fingerprints and the store files'
identity. The identity is in there because a fingerprint alone can come back
(a flag set then cleared): Dagster silently skips a run key it has seen, and
the partition would keep the intermediate state. A day requested again after
a failed run gets ``h`` of :func:`~hermes_assets.lib.attempts.retry_hash`.
More than ``max_runs`` days in one tick make one ranged run
(:func:`run_groups`).

No Dagster here: the sensor in ``defs/sensors.py`` turns a :class:`TickPlan`
into run requests.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Callable

from hermes_assets.lib import attempts, errors
from hermes_assets.lib.cursor import Cursor, DayMark, Rotation, StoreState, load_cursor
from hermes_assets.lib.fingerprint import Fingerprinter
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.state_db import DEFAULT_BUSY_TIMEOUT_MS, Store, StoreReader

log = get_logger()

#: a change tier 1 does not compare is requested within this many ticks (SPEC §8 step 2)
ROTATION_TICKS = 16

# statuses of a store in one tick
MISSING = "missing"
UNCHANGED = "unchanged"  # same file identity, rotation idle: no SQL ran
READ = "read"  # files changed: read, compared with the cursor
ROTATED = "rotated"  # files unchanged: only the rotation's tier 2 ran
NEW = "new"  # not in the cursor: every day present is requested
REPLACED = "replaced"  # new inode or sqlite_sequence went down: every day requested
FAILED = "failed"  # could not be read: reported, cursor entry kept (D18)

_READ_STATUSES = (READ, ROTATED, NEW, REPLACED)


# --------------------------------------------------------------------------
# store files and run keys
# --------------------------------------------------------------------------


def file_identity(path: str) -> dict | None:
    """``{"db": [ino, size, mtime_ns], "wal": [...] | None}``; None when the db is absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    try:
        wal = os.stat(path + "-wal")
        wal_id = [wal.st_ino, wal.st_size, wal.st_mtime_ns]
    except FileNotFoundError:
        wal_id = None
    return {"db": [st.st_ino, st.st_size, st.st_mtime_ns], "wal": wal_id}


def _stamp(identity: dict) -> str:
    db, wal = identity["db"], identity["wal"] or ["-", "-", "-"]
    return ":".join(str(x) for x in (*db, *wal))


def _settled_identity(before: dict, after: dict | None) -> dict:
    """The identity to remember after a read.

    It must be taken BEFORE reading (a commit during the read then shows as a
    change next tick). The one difference our own read may cause is SQLite
    creating an empty ``-wal`` beside a store that had none: remember that one,
    or the next tick would read again for nothing.
    """
    if after is None or after == before:
        return before
    if after["db"] == before["db"] and before["wal"] is None and after["wal"] is not None and after["wal"][1] == 0:
        return after
    return before


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


# --------------------------------------------------------------------------
# one tick
# --------------------------------------------------------------------------


@dataclass
class StoreScan:
    """What one tick found in one store."""

    store: Store
    status: str
    #: day -> new fingerprint (None: the day is no longer in the store)
    changed: dict[str, str | None] = field(default_factory=dict)
    stamp: str = ""
    new_messages: int = 0
    sessions: int = 0
    unplaced: int = 0
    tier2_days: int = 0  # days whose tier 2 was computed (requested + rotation)
    failure: errors.StoreFailure | None = None  # FAILED: its error_kind (SPEC §9) and what happened


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
    failing: list[str] = field(default_factory=list)  # days whose runs keep failing (attempts.FAILING_AFTER)
    failing_before: list[str] = field(default_factory=list)  # the same, as the last tick left it
    ms: float = 0.0

    @property
    def cursor_json(self) -> str:
        return self.cursor.dump()

    @property
    def failures(self) -> list[StoreScan]:
        return [s for s in self.scans if s.status == FAILED]

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
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    now_s: float | None = None,
    outcomes: attempts.Outcomes | None = None,
    max_runs: int = 1 << 30,
) -> TickPlan:
    """Compare the stores with the cursor; return the days to request and the new cursor.

    ``is_partition(day)`` says whether the partitions definition has that key;
    a changed day it lacks is kept in ``pending`` and requested on the first
    tick where it exists. A store that cannot be read is reported in the
    plan's scans and keeps its cursor entry; it never stops the other stores.
    ``outcomes`` looks up how the runs of earlier requests ended
    (:mod:`hermes_assets.lib.attempts`); without it, requests are not followed.
    """
    t0 = time.perf_counter()
    wall = time.time() if now_s is None else now_s
    cursor = load_cursor(cursor_text)
    scans = []
    for store in stores:  # stores not discovered, missing or failed keep their entry
        scan, entry = _scan(store, cursor.stores.get(store.path), busy_timeout_ms, now_s)
        scans.append(scan)
        if entry is not None:
            cursor.stores[store.path] = entry

    # one request per day, whatever the number of stores that changed it
    parts: dict[str, list[tuple[str, str | None, str]]] = {}
    for scan in scans:
        for day, fp in scan.changed.items():
            parts.setdefault(day, []).append((scan.store.label, fp, scan.stamp))
    changed = {day: run_hash(p) for day, p in parts.items()}

    # days done, failed, due again (attempts.py); a day requested for a change needs no retry
    follow = attempts.follow(cursor, outcomes, wall)
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

    ordered = sorted(requests.items(), reverse=True)
    runs = run_groups(ordered, max_runs)
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
        failing=cursor.failing,
        failing_before=failing_before,
    )
    if not plan.requests:
        plan.skip_reason = _skip_reason(scans, changed, pending) + _waiting_note(follow, wall)
    plan.ms = (time.perf_counter() - t0) * 1000
    return plan


def _waiting_note(follow: attempts.FollowUp, now_s: float) -> str:
    """What the skip reason adds about days whose capture failed and waits to be requested again."""
    if not follow.waiting:
        return ""
    day, at = min(follow.waiting.items(), key=lambda item: item[1])
    return (f"; {len(follow.waiting)} day(s) whose capture failed wait to be requested again "
            f"(next: {day} in {max(0, round(at - now_s))} s)")


def _scan(store: Store, old: StoreState | None, busy_timeout_ms: int,
          now_s: float | None) -> tuple[StoreScan, StoreState | None]:
    """One store's scan and its new cursor entry (None: keep the old one)."""
    try:
        identity = file_identity(store.path)
    except OSError as exc:  # e.g. a folder we may not search
        return _failed(store, exc), None
    if identity is None:  # not installed (the idle case), unless HERMES_STATE_DB names it: a typo
        return (_failed(store, store.missing_error()) if store.explicit else StoreScan(store, MISSING)), None
    scan = StoreScan(store, UNCHANGED, stamp=_stamp(identity))
    rotation = old.rotation if old else Rotation()
    files_changed = old is None or old.files != identity
    if not files_changed and rotation.hot <= 0:
        return scan, None  # nothing committed since the last tick, rotation idle: no SQL at all

    try:
        with StoreReader(store, busy_timeout_ms=busy_timeout_ms, now_s=now_s) as reader:
            fp = Fingerprinter(reader)
            if files_changed:
                entry = _read(scan, old, identity, rotation, reader, fp)
            else:
                entry = _rotate(scan, old, rotation, fp)
    except (FileNotFoundError, errors.StoreMissing):
        return StoreScan(store, MISSING), None  # deleted between stat and open, or not created yet
    except (errors.HermesAssetsError, sqlite3.DatabaseError, OSError) as exc:
        if isinstance(exc.__cause__, (sqlite3.ProgrammingError, sqlite3.InterfaceError)):
            raise  # our SQL is wrong: a bug, not a bad store
        return _failed(store, exc), None
    entry.files = _settled_identity(entry.files, file_identity(store.path))
    return scan, entry


def _read(scan: StoreScan, old: StoreState | None, identity: dict, rotation: Rotation, reader: StoreReader,
          fp: Fingerprinter) -> StoreState:
    """Files changed: marks, new messages, tier 1 of every day, then the rotation."""
    store = scan.store
    max_mid, seq = reader.message_marks()
    replaced = _replaced(old, identity, seq)
    since = None if old is None or replaced else (old.max_mid or 0)
    new_by_sid = {}
    if since is not None and max_mid is not None and max_mid > since:
        new_by_sid = reader.sessions_with_messages_after(since)
    usage_sids, usage = fp.usage_changes(None if old is None or replaced else old.usage)
    tier1 = fp.tier1()
    old_days = {} if old is None else old.days
    scan.sessions, scan.unplaced = tier1.sessions, tier1.unplaced
    scan.new_messages = sum(new_by_sid.values())
    if old is None or replaced:
        scan.status = NEW if old is None else REPLACED
        changed = set(tier1.days) | set(old_days)
        if replaced:
            log.warning("hermes.sensor.store_replaced", path=store.path, store=store.label, reason=replaced,
                        days=len(changed), error_kind=errors.StoreReplaced.error_kind)
    else:
        scan.status = READ
        changed = {d for d, h in tier1.days.items() if d not in old_days or old_days[d].tier1 != h}
        changed |= set(old_days) - set(tier1.days)
        changed |= {d for d in fp.days_of(set(new_by_sid) | usage_sids).values() if d in tier1.days}
    # a change of the files restarts the rotation; the share never drops while it runs
    share = _share(len(tier1.days), rotation)
    days = _digest(scan, fp, tier1.days, old_days, changed, share, rotation.tick + 1)
    return StoreState(store.label, identity, max_mid, seq, days,
                      Rotation(tick=rotation.tick + 1, hot=ROTATION_TICKS - 1, share=share), usage)


def _rotate(scan: StoreScan, old: StoreState, rotation: Rotation, fp: Fingerprinter) -> StoreState:
    """Files unchanged but the rotation still running: tier 2 of the next days only."""
    scan.status = ROTATED
    tier1 = {d: m.tier1 for d, m in old.days.items()}
    share = _share(len(tier1), rotation)
    days = _digest(scan, fp, tier1, old.days, set(), share, rotation.tick + 1)
    return StoreState(old.label, old.files, old.max_mid, old.seq, days,
                      Rotation(tick=rotation.tick + 1, hot=rotation.hot - 1, share=share), old.usage)


def _share(n_days: int, rotation: Rotation) -> int:
    share = -(-n_days // ROTATION_TICKS)
    return max(share, rotation.share) if rotation.hot > 0 else share


def _digest(scan: StoreScan, fp: Fingerprinter, tier1: dict[str, str], old_days: dict[str, DayMark],
            changed: set[str], share: int, tick: int) -> dict[str, DayMark]:
    """Tier 2 of the changed days and of the rotation's ``share`` oldest others; the new ``days``.

    Sets ``scan.changed``: the changed days, and rotation days whose tier 2 moved.
    Each day keeps the fingerprint last captured.
    """
    present = set(tier1)
    now = changed & present
    others = sorted(present - now, key=lambda d: (old_days[d].stamp if d in old_days else -1, d))
    rotation = others[:share]
    tier2 = fp.tier2(now | set(rotation))
    scan.tier2_days = len(tier2)
    changed = set(changed) | {d for d in rotation if d not in old_days or old_days[d].tier2 != tier2[d]}
    days = {}
    for d in present:
        old = old_days.get(d)
        captured = old.captured if old else None
        if d in tier2:
            days[d] = DayMark(tier1[d], tier2[d], tick, captured)
        else:
            days[d] = DayMark(tier1[d], old.tier2 if old else None, old.stamp if old else -1, captured)
    scan.changed = {d: days[d].fingerprint if d in days else None for d in changed}
    return days


def _failed(store: Store, exc: Exception) -> StoreScan:
    """A store that cannot be read this tick (SPEC D18): reported, its cursor entry kept."""
    failure = errors.StoreFailure.of(store.path, store.label, exc)
    log.error("hermes.sensor.store_failed", path=store.path, store=store.label, error_kind=failure.error_kind,
              reason=failure.message)
    return StoreScan(store, FAILED, failure=failure)


def _replaced(old: StoreState | None, identity: dict, seq: int | None) -> str | None:
    """Why the store counts as replaced since the cursor, or None (SPEC §8)."""
    if old is None:
        return None
    old_files = old.files or {}
    if old_files.get("db") and old_files["db"][0] != identity["db"][0]:
        return "inode changed"
    old_seq = old.seq
    if old_seq is not None and (seq is None or seq < old_seq):
        return f"sqlite_sequence of messages went down ({old_seq} -> {seq})"
    return None


def _skip_reason(scans: list[StoreScan], changed: dict, pending: dict) -> str:
    failed = [s for s in scans if s.status == FAILED]
    healthy = [s for s in scans if s.status != FAILED]
    reason = _healthy_reason(healthy, changed, pending) if healthy else ""
    if not failed:
        return reason
    failures = "; ".join(f"{s.store.path} could not be read ({s.failure.error_kind}): {s.failure.message}"
                         for s in failed)
    text = (f"{len(failed)} store(s) failed, their cursor entries are kept and the next tick reads them "
            f"again: {failures}")
    return f"{text} | other stores: {reason}" if reason else text


def _healthy_reason(scans: list[StoreScan], changed: dict, pending: dict) -> str:
    missing = [s.store.path for s in scans if s.status == MISSING]
    if scans and len(missing) == len(scans):
        return "; ".join(f"no Hermes installation at {p}" for p in missing)
    if changed:
        days = sorted(changed)
        return (
            f"{len(days)} day(s) changed ({', '.join(days[:5])}{' ...' if len(days) > 5 else ''}) but none is a "
            f"partition yet: kept pending ({len(pending)} pending in all)"
        )
    read = [s for s in scans if s.status in (READ, NEW, REPLACED)]
    rotated = [s for s in scans if s.status == ROTATED]
    tail = f"; missing: {', '.join(missing)}" if missing else ""
    if read:
        return (
            f"no change: the files of {len(read)} store(s) moved but no captured row changed "
            f"(a checkpoint or a write outside the captured tables){tail}"
        )
    if rotated:
        return (
            f"no change: {len(rotated)} store(s) unchanged since the last tick; the rotation checked "
            f"{sum(s.tier2_days for s in rotated)} day(s) of long text{tail}"
        )
    return f"no change: {len(scans) - len(missing)} store(s) unchanged since the last tick{tail}"
