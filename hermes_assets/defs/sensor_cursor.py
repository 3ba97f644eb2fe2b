"""The watermark sensor's cursor as Dagster keeps it: a one-line summary, the state beside it.

The sensor's state (:mod:`hermes_assets.lib.changes.cursor`: per store and day its
fingerprints, the attempts, the days covered) grows with the history: a hundred days are
some twenty kilobytes, and the UI prints a sensor's cursor in full above its ticks. So the
cursor Dagster stores is a short summary of that state, one line, and the state itself is
kept in the instance's key-value store (the table Dagster's own daemons keep their cursors
in, on SQLite and Postgres alike), under a key the summary names::

    {"covered":"2026-07-26..2026-12-03","days":100,"failing":0,"open":0,"pending":0,
     "state":"9f2c41d0.5be0c3a1d27f6e88","stores":1,"version":4}

``state`` is ``<lineage>.<hash>``: the key's suffix (a new one whenever the sensor starts from
nothing, so a reset cursor never reads an older state) and the hash of the state's text. The
key holds the state the summary names and the one before it, by hash: a tick whose cursor
Dagster did not keep (a daemon stopped between the two writes) still finds the state of the
cursor it kept. A cursor whose state is gone (the key-value store wiped) starts over, as a reset
does, with one warning. A cursor in the old form, the state itself as Dagster's cursor (version
3 and before), is read as it is, and replaced by a summary on the next tick that changes it.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import dagster as dg

from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.changes.cursor import CURSOR_VERSION, load_cursor

log = get_logger()

#: the key-value store's key of a lineage's state (its suffix is the lineage)
KEY_PREFIX = "hermes_assets.hermes_state_sensor.state."


def _summary(text: str | None) -> dict | None:
    """The summary a Dagster cursor holds, or None when it is the state itself (the old form) or empty."""
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("state"), str) else None


def state_of(instance: dg.DagsterInstance, cursor: str | None) -> str | None:
    """The sensor's state (its full text) that the Dagster ``cursor`` names; the cursor itself when it
    is in the old form; None when there is none (a first tick) or its state is gone."""
    summary = _summary(cursor)
    if summary is None:
        return cursor or None
    lineage, _, digest = summary["state"].partition(".")
    kept = _kept(instance, lineage)
    if digest in kept:
        return kept[digest]
    log.warning(
        "hermes.sensor.cursor_state_missing",
        state=summary["state"],
        reason="the sensor's state is not in the Dagster instance (its key-value store was wiped?): the sensor "
        "starts over, every day of every store is requested once",
    )
    return None


def summarize(instance: dg.DagsterInstance, cursor: str | None, state: str) -> str:
    """The Dagster cursor for ``state`` (the full text), storing the state when it changed: the
    summary of the tick before when the state is the same."""
    digest = _digest(state)
    summary = _summary(cursor)
    lineage = summary["state"].partition(".")[0] if summary else uuid.uuid4().hex[:8]
    if summary and summary["state"] == f"{lineage}.{digest}":
        return cursor or ""
    kept = _kept(instance, lineage)
    previous = summary["state"].partition(".")[2] if summary else None
    slots = {d: t for d, t in kept.items() if d == previous}
    slots[digest] = state
    instance.run_storage.set_cursor_values({KEY_PREFIX + lineage: json.dumps(slots, separators=(",", ":"))})
    return _line(lineage, digest, state)


def _kept(instance: dg.DagsterInstance, lineage: str) -> dict[str, str]:
    key = KEY_PREFIX + lineage
    value = instance.run_storage.get_cursor_values({key}).get(key)
    try:
        kept = json.loads(value) if value else {}
    except ValueError:
        return {}
    return kept if isinstance(kept, dict) else {}


def _digest(state: str) -> str:
    return hashlib.blake2b(state.encode("utf-8"), digest_size=8).hexdigest()


def _line(lineage: str, digest: str, state: str) -> str:
    """What the UI shows as the cursor: where the state is, and what it holds, counted."""
    cursor = load_cursor(state)
    spans = cursor.covered.spans
    covered = (
        "" if not spans else f"{spans[0][0]}..{spans[-1][1]}" + (f" ({len(spans)} spans)" if len(spans) > 1 else "")
    )
    return json.dumps(
        {
            "version": CURSOR_VERSION,
            "state": f"{lineage}.{digest}",
            "stores": len(cursor.stores),
            "days": len({d for s in cursor.stores.values() for d in s.days}),
            "covered": covered,
            "pending": len(cursor.pending),
            "open": len(cursor.attempts),
            "failing": len(cursor.failing),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
