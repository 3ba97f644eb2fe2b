"""Remove a scope's or a session's rows from every partition (SPEC §7 "purge").

Used when a scope or session has become ``ignore``: rows already captured go,
from all three datasets, and the sightings of their secrets
(``hermes_secret_sightings``), one atomic file replacement per day. A host purges its
own files (its own stores' rows); in a warehouse several hosts write, each host
runs its purge (SPEC §2).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics import ids, schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS, SIGHTINGS
from hermes_assets.lib.plan.policy import is_under, under
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.staging import merge_files, read_staged, restage, staged_files

log = get_logger()

#: Runs stage their days (``<staging>/<run>/<dataset>.<day>.<store #>.arrow``) before putting
#: them in place; a run killed mid-way, or whose write step failed (kept for a re-execution),
#: leaves them for hours. A staged file that does not read whole and is older than this was
#: left by a dead run.
_DEAD_STAGED_S = 60


@dataclass
class PurgeResult:
    removed: dict[str, int] = field(default_factory=lambda: {GATEWAY: 0, SESSIONS: 0, MESSAGES: 0})
    days: dict[str, list[str]] = field(default_factory=lambda: {GATEWAY: [], SESSIONS: [], MESSAGES: []})
    sessions: int = 0
    #: rows removed from staged files (and dead half-written staged files removed)
    staged: int = 0
    #: sightings of the sessions removed (``hermes_secret_sightings``), and the days they were on
    sightings: int = 0
    sighting_days: list[str] = field(default_factory=list)


def purge(warehouse: Warehouse, *, scope: str | None = None, session_id: str | None = None) -> PurgeResult:
    """Delete every row of the sessions matching ``scope`` (a path) or ``session_id``.

    ``session_id`` may be a raw sid, a scoped ``label:sid`` or a canonical
    ``hermes-...`` id. Sessions are found through ``hermes_sessions`` (their
    ``scope_path``) and through the canonical rows' ``cwd``.
    """
    if not scope and not session_id:
        raise ValueError("purge needs a scope path or a session id")
    if scope:
        # scopes are stored absolute (a channel's under the user's home): `~/...` must match them
        scope = os.path.normpath(os.path.expanduser(scope))
        if not os.path.isabs(scope):
            raise ValueError(
                f"purge scope {scope!r} is not an absolute path: give the directory "
                "(or ~/.hermes/channels/<source> for a channel)"
            )
    canonical: set[str] = set()
    raw: set[tuple[str, str]] = set()  # (store, sid)
    if session_id:
        canonical.add(ids.canonical(session_id))
    children: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    labels: dict[str, str] = {}  # store path -> label (the sightings name a store by its label)
    staged = staged_files(warehouse.staging_root)
    columns = ["store", "store_label", "id", "scope_path", "parent_session_id"]
    warehouse.adopt_legacy()  # a warehouse from before hosts had their own files: this host's now
    session_tables = [warehouse.read_own(SESSIONS, day, columns=columns) for day in warehouse.own_days(SESSIONS)]
    session_tables += [_read_staged(SESSIONS, path, columns) for ds, path in staged if ds == SESSIONS]
    for table in session_tables:
        if table is None:  # gone meanwhile, or a staged file not whole
            continue
        for row in table.to_pylist():
            labels[row["store"]] = row["store_label"]
            scoped = ids.scoped_sid(row["store_label"], row["id"])
            own = ids.session_id(row["store_label"], row["id"])
            if row["parent_session_id"]:
                children.setdefault((row["store"], row["parent_session_id"]), []).append((row["store"], row["id"], own))
            hit = own in canonical or (session_id in (row["id"], scoped))
            if scope and row["scope_path"] is not None:
                hit = hit or is_under(row["scope_path"], scope)
            if hit:
                raw.add((row["store"], row["id"]))
                canonical.add(own)
    # a session's subagents and continuations inherit its class (SPEC §7): purge them too
    todo = list(raw)
    while todo:
        for store, sid, own in children.get(todo.pop(), []):
            if (store, sid) not in raw:
                raw.add((store, sid))
                canonical.add(own)
                todo.append((store, sid))
    result = PurgeResult()

    purged = pa.array(sorted(canonical), pa.string())

    def gateway_keep(table: pa.Table) -> pa.Array:
        session_ids = table.column("session_id")
        if pa.types.is_dictionary(session_ids.type):
            session_ids = pc.cast(session_ids, pa.string())
        # every generation of a session (``hermes-<sid>.g<n>``, D15) is that session
        base = ids.without_generation(session_ids)
        drop = pc.or_(pc.is_in(session_ids, value_set=purged), pc.is_in(base, value_set=purged))
        if scope:
            drop = pc.or_(drop, under(table.column("cwd"), scope))
        return pc.invert(drop)

    def raw_keep(sid_column: str) -> Callable[[pa.Table], pa.Array]:
        keys = pa.array(sorted(f"{s}\x1f{i}" for s, i in raw), pa.string())

        def keep(table: pa.Table) -> pa.Array:
            joined = pc.binary_join_element_wise(
                table.column("store"), pc.cast(table.column(sid_column), pa.string()), "\x1f"
            )
            return pc.invert(pc.is_in(joined, value_set=keys))

        return keep

    keeps = {GATEWAY: gateway_keep, SESSIONS: raw_keep("id"), MESSAGES: raw_keep("session_id")}
    for dataset, keep in keeps.items():
        for day in warehouse.own_days(dataset):
            removed, _ = warehouse.rewrite_day(dataset, day, keep)
            if removed:
                result.removed[dataset] += removed
                result.days[dataset].append(day)
    for dataset, path in staged:
        result.staged += _scrub_staged(dataset, path, keeps[dataset])
    sightings = pa.array(sorted(f"{labels.get(store, '')}\x1f{sid}" for store, sid in raw), pa.string())

    def sightings_keep(table: pa.Table) -> pa.Array:
        joined = pc.binary_join_element_wise(table.column("store_label"), table.column("session_id"), "\x1f")
        return pc.invert(pc.is_in(joined, value_set=sightings))

    for day in warehouse.own_days(SIGHTINGS):
        removed, _ = warehouse.rewrite_day(SIGHTINGS, day, sightings_keep)
        if removed:
            result.sightings += removed
            result.sighting_days.append(day)
    # a pin holds a day's file as it was before the purge, a prepared file was merged from such a
    # file: both go (without them the write merges the day again, from the scrubbed staged rows)
    for _, path in merge_files(warehouse.staging_root):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    warehouse.fix_all_modes()  # every file, rewritten or not, private again (SPEC §2, D16)
    result.sessions = len(canonical)
    log.info(
        "hermes.purge.done",
        scope_given=bool(scope),
        session_given=bool(session_id),
        rows=sum(result.removed.values()),
        staged_rows=result.staged,
        sightings=result.sightings,
        sessions=result.sessions,
    )
    return result


def _read_staged(dataset: str, path: str, columns: list[str] | None = None) -> pa.Table | None:
    try:
        table = read_staged(dataset, path)
    except (OSError, pa.ArrowException):  # gone (its run finished) or not whole (being written, or died)
        return None
    return table.select(columns) if columns else table


def _scrub_staged(dataset: str, path: str, keep_mask_fn: Callable[[pa.Table], pa.Array]) -> int:
    """Drop the purged rows from a staged file (atomically); a dead, half-written one goes whole."""
    table = _read_staged(dataset, path)
    if table is None:
        try:
            if time.time() - os.path.getmtime(path) > _DEAD_STAGED_S:
                os.unlink(path)
                return 1
        except FileNotFoundError:
            pass
        return 0
    kept = table.filter(keep_mask_fn(table))
    removed = table.num_rows - kept.num_rows
    if removed:
        # plain columns: a filtered dictionary column would still hold the purged values
        restage(dataset, path, kept.cast(schemas.DATASETS[dataset].schema))
    return removed
