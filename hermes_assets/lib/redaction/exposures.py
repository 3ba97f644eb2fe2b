"""What to rotate: one row per secret seen (its marker), over every host's sightings.

``hermes_secret_exposures`` is computed whole from every file of the sightings
dataset (:mod:`~hermes_assets.lib.redaction.sighting_files`), every day and
host, and written as one file, ``<warehouse>/hermes_secret_exposures/part-0.parquet``
(replaced atomically, private, byte-identical when nothing changed; no secret
seen: no file). A row says which secret (its marker and kind, the provider's
prefix and the last four characters when the warehouse has them: never the
value), when it was first and last seen, in how many sessions and messages,
on which channels, stores and hosts, in which fields, and whether it is still
in Hermes's store: some cell that holds it was not deleted by Hermes since
(``source_deleted``). A secret still in the store is one a person should rotate
first; one seen only in rows Hermes deleted was still seen, and was as exposed.

Markers of two hosts are the same secret only when the hosts share the
redaction key (``HERMES_ASSETS_REDACTION_KEY``, docs/redaction.md); otherwise
one secret seen on two hosts is two rows, one per host's marker.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import EXPOSURES, HERMES_SECRET_EXPOSURES, SIGHTINGS, table_of_rows
from hermes_assets.lib.redaction import sighting_files
from hermes_assets.lib.warehouse.datasets import Warehouse, WriteResult

log = get_logger()

SCHEMA = HERMES_SECRET_EXPOSURES
#: how many times the table is computed again when the sightings changed while it was computed
#: (another host wrote its files meanwhile) before the run gives up
RECOMPUTE_LIMIT = 8


@dataclass
class Exposures:
    """The table, and what its materialization shows: its totals and the secrets per kind."""

    table: pa.Table
    totals: dict[str, int] = field(default_factory=dict)
    #: kind -> secrets of that kind (the UI plots each)
    by_kind: dict[str, int] = field(default_factory=dict)


def exposures(sightings: pa.Table) -> Exposures:
    """One row per marker of ``sightings`` (module docstring), in marker order."""
    acc: dict[str, dict] = {}
    for s in sightings.to_pylist():
        row = acc.get(s["marker"])
        if row is None:
            row = acc[s["marker"]] = {
                "kind": s["kind"],
                "prefix": set(),
                "last4": set(),
                "still_in_store": False,
                "seen": set(),
                "days": set(),
                "sightings": 0,
                "sessions": set(),
                "messages": set(),
                "channels": set(),
                "stores": set(),
                "hosts": set(),
                "fields": set(),
            }
        session = (s["host"], s["store_label"], s["session_id"])
        row["sightings"] += 1
        row["still_in_store"] |= not s["source_deleted"]
        row["sessions"].add(session)
        if s["message_id"] is not None:
            row["messages"].add((*session, s["message_id"]))
        for name, value in (
            ("prefix", s["prefix"]),
            ("last4", s["last4"]),
            ("seen", s["seen_at"]),
            ("days", s["day"]),
            ("channels", s["channel"]),
            ("stores", s["store"] or s["store_label"]),
            ("hosts", s["host"]),
            ("fields", s["field"]),
        ):
            if value is not None:
                row[name].add(value)
    rows = []
    for marker in sorted(acc):
        row = acc[marker]
        rows.append(
            {
                "marker": marker,
                "kind": row["kind"],
                "prefix": max(row["prefix"], default=None),
                "last4": max(row["last4"], default=None),
                "still_in_store": row["still_in_store"],
                "first_seen": min(row["seen"], default=None),
                "last_seen": max(row["seen"], default=None),
                "first_day": min(row["days"]),
                "last_day": max(row["days"]),
                **{name: len(row[name]) for name in ("sessions", "messages")},
                "sightings": row["sightings"],
                **{name: sorted(row[name]) for name in ("channels", "stores", "hosts", "fields")},
            }
        )
    table = table_of_rows(rows, SCHEMA)
    by_kind = Counter(r["kind"] for r in rows)
    totals = {
        "secrets": len(rows),
        "still_in_store": sum(r["still_in_store"] for r in rows),
        "sightings": sightings.num_rows,
    }
    return Exposures(table, totals, dict(sorted(by_kind.items())))


def write_current(warehouse: Warehouse) -> tuple[WriteResult, Exposures]:
    """Compute the table from every host's sightings and replace its file, until the file is
    known to be computed from the sightings as they are. Several hosts write the sightings and
    this file, as the analytics (:func:`~hermes_assets.lib.analytics.daily.write_current_day`):
    each attempt reads the file's version first, then the sightings' stamp, computes, and
    replaces the file only if it is still that version (a conditional write); after its write it
    checks that the sightings' files are still the ones read. A write that lost the race, or
    whose inputs moved, computes again: the file written last equals a recomputation."""
    for attempt in range(1, RECOMPUTE_LIMIT + 1):
        current = warehouse.read_whole_versioned(EXPOSURES)
        before = warehouse.dataset_stamp(SIGHTINGS)
        found = exposures(sighting_files.read_all(warehouse))
        result = warehouse.replace_whole(EXPOSURES, found.table, current)
        if result is not None and warehouse.dataset_stamp(SIGHTINGS) == before:
            log.info(
                "hermes.exposures.written", **found.totals, kinds=sorted(found.by_kind), files_changed=result.changed
            )
            return result, found
        log.info(
            "hermes.exposures.recomputed",
            attempt=attempt,
            reason="inputs_moved" if result is not None else "file_replaced",
        )
    raise RuntimeError(
        f"{EXPOSURES}: its file or the sightings changed during each of {RECOMPUTE_LIMIT} computations "
        "(other hosts writing them): the next run computes it again"
    )
