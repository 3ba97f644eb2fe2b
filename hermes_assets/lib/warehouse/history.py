"""Where a user's Hermes history starts: the first day the daily partitions need (SPEC §2).

Unless ``HERMES_ASSETS_START_DATE`` names it, the first partition is the UTC
day of the earliest session in the stores, so a user with five days of
history sees five partitions, not hundreds of empty ones. It is computed each
time the definitions load, with one cheap statement per store: the smallest
sane ``started_at`` (an index range scan of Hermes's ``idx_sessions_started``),
plus any ``started_at`` cell stored as text, which sorts after every number
and goes through the same parser as everywhere else (:mod:`timestamps`).
A session with no sane ``started_at`` at all (placed by its messages) does
not move the start; the capture reports it if it falls before.

Days already captured in a local warehouse count too: when Hermes prunes its
old sessions (it can, after 90 days), the days captured from them stay
partitions, so nothing captured drops out of sight. A store that cannot be read
at that moment (busy, corrupt, not a Hermes store) is logged and left out:
loading the definitions never fails on a store. Nothing here writes anything.
"""

from __future__ import annotations

import time

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import SESSIONS
from hermes_assets.lib.basics.timestamps import SANE_AHEAD_S, SANE_MIN_S, ms_day, sane_instant
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.warehouse.datasets import Warehouse

log = get_logger()

#: the earliest sane REAL/INTEGER ``started_at``, then every TEXT (or BLOB) cell: in SQLite's
#: ordering, text sorts after every number, so ``>= ''`` selects exactly those, through the index
EARLIEST_SESSION_SQL = (
    "SELECT min(started_at) FROM sessions WHERE started_at BETWEEN ? AND ? "
    "UNION ALL SELECT started_at FROM sessions WHERE started_at >= ''"
)


def earliest_session_ms(store: Store, now_s: float, readers: ReaderFactory | None = None) -> int | None:
    """The earliest sane ``started_at`` of one store, in ms; None when it has no session (or no
    file, or Hermes is still creating it: the idle case)."""
    if not store.exists():
        return None
    try:
        with (readers or ReaderFactory()).open(store, now_s) as reader:
            rows = reader.fetch_raw(EARLIEST_SESSION_SQL, (SANE_MIN_S, now_s + SANE_AHEAD_S))
    except errors.StoreAbsent:
        return None
    instants = [ms for (cell,) in rows if (ms := sane_instant(cell, now_s)) is not None]
    return min(instants, default=None)


def first_day(
    stores: list[Store],
    warehouse: Warehouse | None = None,
    *,
    now_s: float | None = None,
    readers: ReaderFactory | None = None,
) -> str | None:
    """The UTC day of the earliest session of ``stores``, or of the earliest day captured in a
    local ``warehouse`` if that is earlier; None when there is neither (no history yet)."""
    now_s = time.time() if now_s is None else now_s
    days = []
    for store in stores:
        try:
            ms = earliest_session_ms(store, now_s, readers)
        except (errors.HermesAssetsError, OSError) as exc:
            failure = errors.StoreFailure.of(store.path, store.label, exc)
            log.warning("hermes.history.store_unreadable", **failure.log_fields())
            continue
        if ms is not None:
            days.append(ms_day(ms))
    if warehouse is not None and warehouse.storage.cheap_listing:  # an object store is not listed at every load
        captured = warehouse.days(SESSIONS)
        days += captured[:1]
    return min(days, default=None)
