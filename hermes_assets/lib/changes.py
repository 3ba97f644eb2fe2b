"""Which partitions changed since the last look at the Hermes stores (SPEC §8).

The sensor keeps one cursor (JSON) with, per store:

- ``files``: identity of the store files, ``[inode, size, mtime_ns]`` of the
  db and of its ``-wal`` (``null`` when absent). Unchanged identity means
  nothing was committed: the tick ends after two ``stat`` calls, with no SQL.
- ``max_mid`` and ``seq``: the highest ``messages.id`` and the
  ``sqlite_sequence`` high-water mark of ``messages``. New messages are the
  rows with ``id > max_mid`` (a rowid range scan); a mark that went down, or a
  new inode, means the store was replaced.
- ``days``: per UTC day, a 16-hex fingerprint of the whole ``sessions`` rows of
  the sessions placed on that day (every column) and of each session's count
  of inactive messages (:meth:`StoreReader.session_prints`).

What each Hermes write changes, and so how it is seen (hermes-agent 0.19.0):

============================  ===============================================
``append_message``            new mid; ``sessions.message_count`` + 1
``end_session``, reopen,      the sessions row (``ended_at``, ``end_reason``,
titles, archive, totals       token/cost columns, ``title``, ``archived`` ...)
``rewind_to_message``         ``sessions.rewind_count`` + 1 (always); inactive count
``archive_and_compact``       new mids; ``message_count``; inactive count
``replace_messages``,         new mids (unless replaced by nothing);
``clear_messages``            ``message_count``; inactive count when inactive
                              rows go
``restore_rewound``           inactive count only
``delete_session``, prune     the session's row is gone from its day
``set_latest_user_api_content``  NOT seen: it only rewrites ``messages.api_content``
                              of the newest user row, right after a compaction
                              inserted that row (whose new mid is seen); a
                              later one waits for the day's next change
============================  ===============================================

Cost of a tick whose files changed: proportional to the ``sessions`` table
(one pass, in rowid batches) plus one index seek per session into
``idx_messages_session_active`` (counting inactive rows, index only) plus the
new messages (rowid range). The ``messages`` table is never scanned.

Run keys: ``f"{day}@{h}"`` where ``h`` hashes, for every store in which the
day changed, its label, the day's new fingerprint and the store files'
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
import time
from dataclasses import dataclass, field
from typing import Callable

from hermes_assets.lib import errors
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.state_db import DEFAULT_BUSY_TIMEOUT_MS, Store, StoreReader

log = get_logger()

CURSOR_VERSION = 1
_MASK64 = (1 << 64) - 1
_MIX = 0x9E3779B97F4A7C15  # odd: multiplying by it is a bijection mod 2**64

# statuses of a store in one tick
MISSING = "missing"
UNCHANGED = "unchanged"  # same file identity: no SQL ran
READ = "read"  # files changed: read, compared with the cursor
NEW = "new"  # not in the cursor: every day present is requested
REPLACED = "replaced"  # new inode or sqlite_sequence went down: every day requested


# --------------------------------------------------------------------------
# the cursor
# --------------------------------------------------------------------------


def load_cursor(text: str | None) -> dict:
    """The sensor's cursor as a dict; an absent, foreign or broken cursor is an empty one."""
    empty = {"version": CURSOR_VERSION, "stores": {}, "pending": {}}
    if not text:
        return empty
    try:
        cursor = json.loads(text)
    except ValueError:
        log.warning("hermes.sensor.cursor_unreadable", reason="not JSON")
        return empty
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


# --------------------------------------------------------------------------
# fingerprints
# --------------------------------------------------------------------------


def day_prints(prints: dict) -> tuple[dict[str, str], int]:
    """``day -> 16-hex fingerprint`` from ``sid -> SessionPrint``; and the count of unplaced sessions.

    Order-free (a sum of the sessions' 64-bit digests, and their count), so no
    sort is needed; a session that moves to another day changes both days.
    """
    sums: dict[str, int] = {}
    counts: dict[str, int] = {}
    unplaced = 0
    for p in prints.values():
        if p.day is None:
            unplaced += 1
            continue
        sums[p.day] = sums.get(p.day, 0) + p.digest * _MIX  # spread each digest over all 64 bits
        counts[p.day] = counts.get(p.day, 0) + 1
    return {d: format((sums[d] + counts[d]) * _MIX & _MASK64, "016x") for d in sums}, unplaced


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
    reason: str | None = None  # why a store counts as replaced
    ms: float = 0.0


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

    def counts(self) -> dict:
        by_status: dict[str, int] = {}
        for s in self.scans:
            by_status[s.status] = by_status.get(s.status, 0) + 1
        changed = {d for s in self.scans for d in s.changed}
        return {
            "stores": len(self.scans),
            "stores_missing": by_status.get(MISSING, 0),
            "stores_unchanged": by_status.get(UNCHANGED, 0),
            "stores_read": sum(n for k, n in by_status.items() if k not in (MISSING, UNCHANGED)),
            "stores_new": by_status.get(NEW, 0),
            "stores_replaced": by_status.get(REPLACED, 0),
            "days_changed": len(changed),
            "runs_requested": len(self.requests),
            "days_pending": len(self.pending),
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
    tick where it exists. An unreadable store raises its typed error
    (:mod:`hermes_assets.lib.errors`): the tick fails and the cursor stays.
    """
    t0 = time.perf_counter()
    cursor = load_cursor(cursor_text)
    old_stores: dict = cursor["stores"]
    new_stores = dict(old_stores)  # stores not discovered this time keep their entry
    scans = [_scan(store, old_stores.get(store.path), new_stores, busy_timeout_ms, now_s) for store in stores]

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


def _scan(store: Store, old: dict | None, new_stores: dict, busy_timeout_ms: int, now_s: float | None) -> StoreScan:
    t0 = time.perf_counter()
    identity = file_identity(store.path)
    if identity is None:
        return StoreScan(store, MISSING)
    scan = StoreScan(store, UNCHANGED, stamp=_stamp(identity))
    if old is not None and old.get("files") == identity:
        return scan  # nothing committed since the last tick: no SQL at all

    try:
        with StoreReader(store, busy_timeout_ms=busy_timeout_ms, now_s=now_s) as reader:
            max_mid, seq = reader.message_marks()
            replaced = _replaced(old, identity, seq)
            since = None if old is None or replaced else (old.get("max_mid") or 0)
            new_by_sid = {}
            if since is not None and max_mid is not None and max_mid > since:
                new_by_sid = reader.sessions_with_messages_after(since)
            prints = reader.session_prints()
    except (FileNotFoundError, errors.StoreMissing):
        return StoreScan(store, MISSING)  # deleted between stat and open, or not created yet
    except errors.HermesAssetsError as exc:
        log.error("hermes.sensor.store_unreadable", path=store.path, store=store.label,
                  error_kind=exc.error_kind)
        raise type(exc)(
            f"{exc} The sensor's cursor was not advanced; the next tick reads the store again.", path=store.path
        ) from exc

    days, unplaced = day_prints(prints)
    old_days = {} if old is None else old.get("days", {})
    scan.sessions, scan.unplaced = len(prints), unplaced
    scan.new_messages = sum(new_by_sid.values())
    if old is None or replaced:
        scan.status = NEW if old is None else REPLACED
        scan.reason = replaced
        scan.changed = {**{d: None for d in old_days}, **days}
        if replaced:
            log.warning("hermes.sensor.store_replaced", path=store.path, store=store.label, reason=replaced,
                        days=len(scan.changed), error_kind=errors.StoreReplaced.error_kind)
    else:
        scan.status = READ
        scan.changed = {d: fp for d, fp in days.items() if old_days.get(d) != fp}
        scan.changed.update({d: None for d in old_days if d not in days})
        for sid in new_by_sid:
            p = prints.get(sid)
            if p is not None and p.day is not None:
                scan.changed.setdefault(p.day, days[p.day])
    new_stores[store.path] = {
        "label": store.label,
        "files": _settled_identity(identity, file_identity(store.path)),
        "max_mid": max_mid,
        "seq": seq,
        "days": days,
    }
    scan.ms = (time.perf_counter() - t0) * 1000
    return scan


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
    missing = [s.store.path for s in scans if s.status == MISSING]
    if scans and len(missing) == len(scans):
        return "; ".join(f"no Hermes installation at {p}" for p in missing)
    if changed:
        days = sorted(changed)
        return (
            f"{len(days)} day(s) changed ({', '.join(days[:5])}{' ...' if len(days) > 5 else ''}) but none is a "
            f"partition yet: kept pending ({len(pending)} pending in all)"
        )
    read = [s for s in scans if s.status not in (MISSING, UNCHANGED)]
    tail = f"; missing: {', '.join(missing)}" if missing else ""
    if read:
        return (
            f"no change: the files of {len(read)} store(s) moved but no captured row changed "
            f"(a checkpoint or a write outside the captured tables){tail}"
        )
    return f"no change: {len(scans) - len(missing)} store(s) unchanged since the last tick{tail}"
