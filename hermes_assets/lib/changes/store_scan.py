"""One store, one tick: what changed in it since the sensor's cursor (SPEC §8 steps 1-2, D17).

A tick, per store:

1. Files unchanged and the rotation idle: nothing else, no SQL (two ``stat``).
2. Files changed: new messages by mid, tier 1 of every day, and the days whose
   tier 1 moved, that lost every session, or that hold a session with new
   messages are requested; each gets its tier 2 on this tick. The rotation
   restarts for :data:`ROTATION_TICKS` ticks. Tier 1 is digested again only
   for the days of the rows on the pages the commits since the last tick wrote
   (read from the ``-wal`` frames, :mod:`hermes_assets.lib.changes.wal_delta`),
   the other days keeping theirs, the same to the bit; on any doubt (no map
   yet in this process, the WAL reset, a session deleted ...) every row is read.
3. While the rotation runs (files changed or not), tier 2 of the ``share``
   days whose tier 2 is oldest, ``share = ceil(days / 16)`` (never lowered
   while the rotation runs); a day whose tier 2 moved is requested. A change
   that tier 1 does not see is therefore requested within 16 ticks: on the
   tick it is committed the rotation restarts, and in 16 ticks of ``share``
   oldest days each, every day present at that tick is digested again (days
   that appear later are digested the tick they appear). On a tick whose tier 1
   came from the WAL's pages, a rotation day none of whose pages was written
   since its tier 2 was computed keeps it (:mod:`~hermes_assets.lib.changes.wal_delta`:
   provably the digest it would compute), as if computed on the tick.

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

Cost of a tick whose files changed: the WAL frames written since the last
tick (their headers) and the ``sessions`` pages among them, tier 1 of the
days their rows are on (their rows, through ``idx_sessions_started``), the
inactive counts of the sessions tier 1 counts them for (rewound or without
live messages: one index seek each), ``count(*)`` of ``sessions``, plus the new
messages (rowid range) plus the ``session_model_usage`` rows by the rowids on
the table leaves written (any table's; a tick that reads every row makes one
pass over the usage table's small rows instead) plus tier 2 of ``ceil(days / 16)``
days and of the changed ones (their rows). A tick that reads every row (the first of a
process, or a doubt) adds one pass over ``sessions`` (tier 1, one row per
day to Python) and learns the map of the table's pages (every leaf read once).
The ``messages`` table is never scanned. On the 1.07M-message bench store
(59k sessions, 330 days, 93k usage rows, 671 sessions rewound or without
messages; ``bench/sensor_bench.py``, 2 shared cores, load ~1.5-3): a change
tick ~10-25 ms once the rotation's days are kept (tier 2 of 21-23 days costs
~70-80 ms: every tick for the 16 ticks after a pass over every row, until each
day was digested once), the usage marks ~1 ms (a pass over them 13-40 ms), tier 1
through the WAL ~5-15 ms (the inactive counts of the sessions in the ranges of the
index pages written only); the pass over every row ~150-280 ms and learning the
map ~300-450 ms (45,860 leaves of ``sessions`` read, the usage leaves and the
index's interior pages).
A tick whose files did not move costs ~0.3 ms once the rotation is idle,
~55 ms while it runs. (Two connections on two threads are no faster: in one
process they take turns inside SQLite.)
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.changes import delta_map, usage_marks, wal_delta
from hermes_assets.lib.changes.cursor import DayMark, FileIdentity, Rotation, StoreState
from hermes_assets.lib.changes.fingerprint import Fingerprinter
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.stores import Store

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
    digested: set[str] = field(default_factory=set)  # the days whose tier 2 was computed (requested + rotation)
    #: the rotation's days whose tier 2 was kept: no page of theirs written since it was computed
    tier2_kept: int = 0
    #: tier 1 of the days the pages written since the last tick hold only (``wal_delta``)
    delta: bool = False
    #: why tier 1 read every row (None: it did not, or the files did not change)
    full_reason: str | None = None
    failure: errors.StoreFailure | None = None  # FAILED: its error_kind (SPEC §9) and what happened

    @property
    def tier2_days(self) -> int:
        """How many days' tier 2 was computed (requested + rotation)."""
        return len(self.digested)


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


def _settled_identity(before: FileIdentity | None, after: FileIdentity | None) -> FileIdentity | None:
    """The identity to remember after a read.

    It must be taken BEFORE reading (a commit during the read then shows as a
    change next tick). The one difference our own read may cause is SQLite
    creating an empty ``-wal`` beside a store that had none: remember that one,
    or the next tick would read again for nothing.
    """
    if before is None or after is None or after == before:
        return before
    if after["db"] == before["db"] and before["wal"] is None and after["wal"] is not None and after["wal"][1] == 0:
        return after
    return before


def scan_store(
    store: Store, old: StoreState | None, readers: ReaderFactory, now_s: float | None
) -> tuple[StoreScan, StoreState | None]:
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
        if old is not None and not files_changed:
            with readers.open(store, now_s) as reader:
                entry = _rotate(scan, old, rotation, Fingerprinter(reader))
        else:
            files = wal_delta.TickFiles(store.path, old.files if old else None, _tier1_of(old), _tier2_of(old))
            with files:
                entry = _read(scan, old, identity, rotation, readers, now_s, files)
                files.settle(scan.digested)
    except (FileNotFoundError, errors.StoreAbsent):
        return StoreScan(store, MISSING), None  # deleted between stat and open, or not created yet
    except (errors.HermesAssetsError, sqlite3.DatabaseError, OSError) as exc:
        if isinstance(exc.__cause__, (sqlite3.ProgrammingError, sqlite3.InterfaceError)):
            raise  # our SQL is wrong: a bug, not a bad store
        return _failed(store, exc), None
    entry.files = _settled_identity(entry.files, file_identity(store.path))
    if scan.status != ROTATED:
        delta_map.keep(store.path, files.learned, entry.files, _tier1_of(entry) or {}, _tier2_of(entry) or {})
    return scan, entry


def _tier1_of(state: StoreState | None) -> dict[str, str] | None:
    return None if state is None else {d: m.tier1 for d, m in state.days.items()}


def _tier2_of(state: StoreState | None) -> dict[str, str | None] | None:
    return None if state is None else {d: m.tier2 for d, m in state.days.items()}


def _read(
    scan: StoreScan,
    old: StoreState | None,
    identity: dict,
    rotation: Rotation,
    readers: ReaderFactory,
    now_s: float | None,
    files: wal_delta.TickFiles,
) -> StoreState:
    """Files changed: marks, new messages, usage marks, tier 1 of every day, then the rotation.

    ``files`` (opened and its WAL read before this reads any row): tier 1 digests only the days
    of the rows on the pages written since the last tick when it can tell them, else every row.
    """
    store = scan.store
    old_days = {} if old is None else old.days
    with readers.open(store, now_s) as reader:
        fp = Fingerprinter(reader)
        max_mid, seq = reader.message_marks()
        replaced = _replaced(old, identity, seq)
        since = None if old is None or replaced else (old.max_mid or 0)
        new_by_sid = {}
        if since is not None and max_mid is not None and max_mid > since:
            new_by_sid = reader.sessions_with_messages_after(since)
        tier1 = files.tier1(fp) if old is not None and not replaced else None
        scan.delta = tier1 is not None
        # after tier 1: the usage rows by the rowids the pages written since its position hold
        usage_sids, usage = usage_marks.usage_changes(
            fp, old.usage if old else None, files.written_rowids() if tier1 else None
        )
        if tier1 is None:
            scan.full_reason = files.doubt or ("replaced" if replaced else "new store")
            tier1 = fp.tier1()
            files.learn(fp, tier1)
        scan.sessions, scan.unplaced = tier1.sessions, tier1.unplaced
        scan.new_messages = sum(new_by_sid.values())
        if old is None or replaced:
            scan.status = NEW if old is None else REPLACED
            changed = set(tier1.days) | set(old_days)
            if replaced:
                log.warning(
                    "hermes.sensor.store_replaced",
                    path=store.path,
                    store=store.label,
                    reason=replaced,
                    days=len(changed),
                    error_kind=errors.StoreReplaced.error_kind,
                )
        else:
            scan.status = READ
            changed = {d for d, h in tier1.days.items() if d not in old_days or old_days[d].tier1 != h}
            changed |= set(old_days) - set(tier1.days)
            changed |= {d for d in fp.days_of(set(new_by_sid) | usage_sids).values() if d in tier1.days}
        # a change of the files restarts the rotation; the share never drops while it runs
        share = _share(len(tier1.days), rotation)
        days = _digest(scan, fp, tier1.days, old_days, changed, share, rotation.tick + 1, files.clean)
    return StoreState(
        store.label,
        identity,
        max_mid,
        seq,
        days,
        Rotation(tick=rotation.tick + 1, hot=ROTATION_TICKS - 1, share=share),
        usage,
    )


def _rotate(scan: StoreScan, old: StoreState, rotation: Rotation, fp: Fingerprinter) -> StoreState:
    """Files unchanged but the rotation still running: tier 2 of the next days only."""
    scan.status = ROTATED
    tier1 = {d: m.tier1 for d, m in old.days.items()}
    share = _share(len(tier1), rotation)
    days = _digest(scan, fp, tier1, old.days, set(), share, rotation.tick + 1)
    return StoreState(
        old.label,
        old.files,
        old.max_mid,
        old.seq,
        days,
        Rotation(tick=rotation.tick + 1, hot=rotation.hot - 1, share=share),
        old.usage,
    )


def _share(n_days: int, rotation: Rotation) -> int:
    share = -(-n_days // ROTATION_TICKS)
    return max(share, rotation.share) if rotation.hot > 0 else share


def _oldest(old_days: dict[str, DayMark], skip: set[str], n: int) -> list[str]:
    """The ``n`` days (not in ``skip``) whose tier 2 was computed longest ago."""
    others = sorted((d for d in old_days if d not in skip), key=lambda d: (old_days[d].stamp, d))
    return others[:n]


def _digest(
    scan: StoreScan,
    fp: Fingerprinter,
    tier1: dict[str, str],
    old_days: dict[str, DayMark],
    changed: set[str],
    share: int,
    tick: int,
    clean: frozenset[str] = frozenset(),
) -> dict[str, DayMark]:
    """Tier 2 of the changed days and of the rotation's ``share`` oldest others; the new ``days``.

    ``clean``: days whose tier 2 in ``old_days`` is provably the store's now (no page of their
    rows written since it was computed, :mod:`~hermes_assets.lib.changes.wal_delta`): a rotation
    day among them keeps it, as computed on this tick. Sets ``scan.changed``: the changed days,
    and rotation days whose tier 2 moved. Each day keeps the fingerprint last captured.
    """
    present = set(tier1)
    now = changed & present
    rotation = _oldest({d: old_days[d] for d in present if d in old_days}, now, share)  # new days are changed
    kept = {d: old_days[d].tier2 for d in rotation if d in clean}
    tier2: dict[str, str | None] = {**fp.tier2(now | (set(rotation) - kept.keys())), **kept}
    scan.digested, scan.tier2_kept = set(tier2) - kept.keys(), len(kept)
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
    log.error("hermes.sensor.store_failed", **failure.log_fields())
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
