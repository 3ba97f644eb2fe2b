"""Which partitions changed since the last look at the Hermes stores (SPEC §8, D17, D18).

The sensor keeps one cursor (JSON, version 2) with, per store:

- ``files``: identity of the store files, ``[inode, size, mtime_ns]`` of the
  db and of its ``-wal`` (``null`` when absent). Unchanged identity means
  nothing was committed.
- ``max_mid`` and ``seq``: the highest ``messages.id`` and the
  ``sqlite_sequence`` high-water mark of ``messages``. New messages are the
  rows with ``id > max_mid`` (a rowid range scan); a mark that went down, or a
  new inode, means the store was replaced.
- ``days``: per UTC day ``[tier 1, tier 2, stamp]``: the two fingerprints of
  the sessions placed on that day (:mod:`hermes_assets.lib.fingerprint`) and
  the rotation tick at which tier 2 was last computed.
- ``rotation``: ``{"tick", "hot", "share"}``: the store's tick counter, how
  many more ticks the rotation runs, and how many days it digests per tick.

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
the partition would keep the intermediate state.

No Dagster here: the sensor in ``defs/sensors.py`` turns a :class:`TickPlan`
into run requests.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Callable

from hermes_assets.lib import errors
from hermes_assets.lib.fingerprint import Fingerprinter
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.state_db import DEFAULT_BUSY_TIMEOUT_MS, Store, StoreReader

log = get_logger()

CURSOR_VERSION = 2
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
# the cursor
# --------------------------------------------------------------------------


def load_cursor(text: str | None) -> dict:
    """The sensor's cursor as a dict; an absent, foreign or broken cursor is an empty one.

    A version-1 cursor (whole-row fingerprints) cannot be compared with the two
    tiers: its stores are read as new, so every day present is requested once.
    """
    empty = {"version": CURSOR_VERSION, "stores": {}, "pending": {}}
    if not text:
        return empty
    try:
        cursor = json.loads(text)
    except ValueError:
        log.warning("hermes.sensor.cursor_unreadable", reason="not JSON")
        return empty
    if isinstance(cursor, dict) and cursor.get("version") == 1:
        log.info("hermes.sensor.cursor_upgraded", stores=len(cursor.get("stores") or {}),
                 reason="fingerprints of cursor version 1 are not comparable: every day is requested once")
        return {**empty, "pending": cursor.get("pending") or {}}
    if not isinstance(cursor, dict) or cursor.get("version") != CURSOR_VERSION:
        log.warning("hermes.sensor.cursor_unreadable", reason="unknown cursor version")
        return empty
    cursor.setdefault("stores", {})
    cursor.setdefault("pending", {})
    return cursor


def dump_cursor(cursor: dict) -> str:
    return json.dumps(cursor, sort_keys=True, separators=(",", ":"))


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
    """The outcome of one tick: days to request (with their run-key hash), the new cursor."""

    requests: list[tuple[str, str]]  # (day, h), newest day first
    pending: dict[str, str]
    cursor: dict
    scans: list[StoreScan]
    skip_reason: str | None
    ms: float = 0.0

    @property
    def cursor_json(self) -> str:
        return dump_cursor(self.cursor)

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
            "days_pending": len(self.pending),
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
) -> TickPlan:
    """Compare the stores with the cursor; return the days to request and the new cursor.

    ``is_partition(day)`` says whether the partitions definition has that key;
    a changed day it lacks is kept in ``pending`` and requested on the first
    tick where it exists. A store that cannot be read is reported in the
    plan's scans and keeps its cursor entry; it never stops the other stores.
    """
    t0 = time.perf_counter()
    cursor = load_cursor(cursor_text)
    old_stores: dict = cursor["stores"]
    new_stores = dict(old_stores)  # stores not discovered, missing or failed keep their entry
    scans = []
    for store in stores:
        scan, entry = _scan(store, old_stores.get(store.path), busy_timeout_ms, now_s)
        scans.append(scan)
        if entry is not None:
            new_stores[store.path] = entry

    # one request per day, whatever the number of stores that changed it
    parts: dict[str, list[tuple[str, str | None, str]]] = {}
    for scan in scans:
        for day, fp in scan.changed.items():
            parts.setdefault(day, []).append((scan.store.label, fp, scan.stamp))
    changed = {day: run_hash(p) for day, p in parts.items()}

    pending = dict(cursor["pending"])
    requests: dict[str, str] = {}
    for day, h in changed.items():
        pending.pop(day, None)
        if is_partition(day):
            requests[day] = h
        else:
            pending[day] = h
    for day, h in list(pending.items()):
        if is_partition(day):  # e.g. the day after a clock-skewed session became today
            requests[day] = h
            del pending[day]

    new_cursor = {"version": CURSOR_VERSION, "stores": new_stores, "pending": pending}
    plan = TickPlan(
        requests=sorted(requests.items(), reverse=True),
        pending=pending,
        cursor=new_cursor,
        scans=scans,
        skip_reason=None,
    )
    plan.skip_reason = None if plan.requests else _skip_reason(scans, changed, pending)
    plan.ms = (time.perf_counter() - t0) * 1000
    return plan


def _scan(store: Store, old: dict | None, busy_timeout_ms: int, now_s: float | None) -> tuple[StoreScan, dict | None]:
    """One store's scan and its new cursor entry (None: keep the old one)."""
    try:
        identity = file_identity(store.path)
    except OSError as exc:  # e.g. a folder we may not search
        return _failed(store, exc), None
    if identity is None:  # not installed (the idle case), unless HERMES_STATE_DB names it: a typo
        return (_failed(store, store.missing_error()) if store.explicit else StoreScan(store, MISSING)), None
    scan = StoreScan(store, UNCHANGED, stamp=_stamp(identity))
    rotation = {"tick": 0, "hot": 0, "share": 0, **((old or {}).get("rotation") or {})}
    files_changed = old is None or old.get("files") != identity
    if not files_changed and rotation["hot"] <= 0:
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
    entry["files"] = _settled_identity(entry["files"], file_identity(store.path))
    return scan, entry


def _read(scan: StoreScan, old: dict | None, identity: dict, rotation: dict, reader: StoreReader,
          fp: Fingerprinter) -> dict:
    """Files changed: marks, new messages, tier 1 of every day, then the rotation."""
    store = scan.store
    max_mid, seq = reader.message_marks()
    replaced = _replaced(old, identity, seq)
    since = None if old is None or replaced else (old.get("max_mid") or 0)
    new_by_sid = {}
    if since is not None and max_mid is not None and max_mid > since:
        new_by_sid = reader.sessions_with_messages_after(since)
    tier1 = fp.tier1()
    old_days = {} if old is None else old.get("days", {})
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
        changed = {d for d, h in tier1.days.items() if _tier1(old_days.get(d)) != h}
        changed |= set(old_days) - set(tier1.days)
        changed |= {d for d in fp.days_of(new_by_sid).values() if d in tier1.days}
    # a change of the files restarts the rotation; the share never drops while it runs
    share = _share(len(tier1.days), rotation)
    days = _digest(scan, fp, tier1.days, old_days, changed, share, rotation["tick"] + 1)
    return {
        "label": store.label,
        "files": identity,
        "max_mid": max_mid,
        "seq": seq,
        "days": days,
        "rotation": {"tick": rotation["tick"] + 1, "hot": ROTATION_TICKS - 1, "share": share},
    }


def _rotate(scan: StoreScan, old: dict, rotation: dict, fp: Fingerprinter) -> dict:
    """Files unchanged but the rotation still running: tier 2 of the next days only."""
    scan.status = ROTATED
    old_days = old.get("days", {})
    tier1 = {d: v[0] for d, v in old_days.items()}
    share = _share(len(tier1), rotation)
    days = _digest(scan, fp, tier1, old_days, set(), share, rotation["tick"] + 1)
    return {**old, "days": days, "rotation": {"tick": rotation["tick"] + 1, "hot": rotation["hot"] - 1, "share": share}}


def _share(n_days: int, rotation: dict) -> int:
    share = -(-n_days // ROTATION_TICKS)
    return max(share, rotation["share"]) if rotation["hot"] > 0 else share


def _digest(scan: StoreScan, fp: Fingerprinter, tier1: dict[str, str], old_days: dict, changed: set[str],
            share: int, tick: int) -> dict:
    """Tier 2 of the changed days and of the rotation's ``share`` oldest others; the new ``days``.

    Sets ``scan.changed``: the changed days, and rotation days whose tier 2 moved.
    """
    present = set(tier1)
    now = changed & present
    others = sorted(present - now, key=lambda d: (_stamp_of(old_days.get(d)), d))
    rotation = others[:share]
    tier2 = fp.tier2(now | set(rotation))
    scan.tier2_days = len(tier2)
    changed = set(changed) | {d for d in rotation if _tier2(old_days.get(d)) != tier2[d]}
    days = {}
    for d in present:
        if d in tier2:
            days[d] = [tier1[d], tier2[d], tick]
        else:
            days[d] = [tier1[d], _tier2(old_days.get(d)), _stamp_of(old_days.get(d))]
    scan.changed = {d: (days[d][0] + days[d][1]) if d in days else None for d in changed}
    return days


def _tier1(entry) -> str | None:
    return entry[0] if entry else None


def _tier2(entry) -> str | None:
    return entry[1] if entry else None


def _stamp_of(entry) -> int:
    return entry[2] if entry else -1


def _failed(store: Store, exc: Exception) -> StoreScan:
    """A store that cannot be read this tick (SPEC D18): reported, its cursor entry kept."""
    failure = errors.StoreFailure.of(store.path, store.label, exc)
    log.error("hermes.sensor.store_failed", path=store.path, store=store.label, error_kind=failure.error_kind,
              reason=failure.message)
    return StoreScan(store, FAILED, failure=failure)


def _replaced(old: dict | None, identity: dict, seq: int | None) -> str | None:
    """Why the store counts as replaced since the cursor, or None (SPEC §8)."""
    if old is None:
        return None
    old_files = old.get("files") or {}
    if old_files.get("db") and old_files["db"][0] != identity["db"][0]:
        return "inode changed"
    old_seq = old.get("seq")
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
    text = (f"{_count(len(failed), 'store')} could not be read; the next check reads "
            f"{'it' if len(failed) == 1 else 'them'} again (their cursor entries are kept): {failures}")
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
            f"({len(pending)} in all) until they are partitions: the partitions start at "
            "HERMES_ASSETS_START_DATE or, unset, at the earliest session when the definitions loaded "
            "(Reload definitions after restoring older history)"
        )
    read = [s for s in scans if s.status in (READ, NEW, REPLACED)]
    tail = f"; no store yet at {', '.join(missing)}" if missing else ""
    watched = len(scans) - len(missing)
    store = "the Hermes store" if watched == 1 else f"the {watched} Hermes stores"
    if read:
        return (f"no change: Hermes wrote to {store} (a checkpoint, or tables this project does not capture) "
                f"but no session or message changed{tail}")
    return f"no change: nothing new in {store} since the last check{tail}"
