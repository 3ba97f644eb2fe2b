"""What happens to captured rows whose source vanished or was replaced (SPEC §6, D13, D15).

A day's file is recomputed from the store at every write. A row of the old
file that is not among the new rows is judged by what the store holds now
(:class:`StoreFacts`): dropped (the usage policy ignores its session, or its
session still exists and simply yields fewer rows), kept as it is (a store
this run did not read), or kept and flagged: ``source_deleted`` when its
session or message is gone, ``replaced`` too when its id now names another
session or message (a restored store, D15).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics import ids, schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.source.jsonutil import dumps, loads
from hermes_assets.lib.warehouse.partition_file import DayFile

#: fates of a previously written row that is not among the new rows
KEEP, DELETED, REPLACED = "keep", "source_deleted", "replaced"


@dataclass(frozen=True)
class CarriedOver:
    """The rows of an old file a write keeps (flagged), and what it did with the others."""

    #: rows to append to the new ones (None: none)
    kept: pa.Table | None = None
    #: rows of the old file removed (fewer parts, policy ignore, moved)
    dropped: int = 0
    #: rows this write found replaced by another generation of their id (D15)
    replaced: int = 0


def carry_over(dataset: str, old: DayFile, new: pa.Table, facts: list[StoreFacts]) -> CarriedOver:
    """Rows of the old file not in ``new``: kept (flagged) when their source is gone or was
    replaced by another generation (SPEC §6, D13, D15).

    Decodes only the key columns unless some old row is missing from ``new``.
    """
    old_keys = old.table(list(schemas.DATASETS[dataset].key))
    if old_keys.num_rows == 0:
        return CarriedOver()
    missing = pc.invert(pc.is_in(_key_strings(dataset, old_keys), value_set=_key_strings(dataset, new)))
    if not pc.any(missing).as_py():
        return CarriedOver()
    leftovers = old.table().filter(missing)
    by_path = {f.path: f for f in facts}
    by_hash = {f.path_hash: f for f in facts}
    keep, fates, kept_attrs, newly_replaced = [], [], [], 0
    for row in leftovers.to_pylist():
        # a canonical row's ids and flags live in its attributes: decoded once per row
        attrs = (loads(row["attributes"]) if row["attributes"] else {}) if dataset == GATEWAY else None
        fate = _fate(dataset, row, attrs, by_path, by_hash)
        keep.append(fate is not None)
        if fate is not None:
            fates.append(fate)
            kept_attrs.append(attrs)
            newly_replaced += fate == REPLACED and not _was_replaced(row, attrs)
    kept = leftovers.filter(pa.array(keep, pa.bool_()))
    return CarriedOver(_flag(dataset, kept, fates, kept_attrs), len(keep) - sum(keep), newly_replaced)


def _was_replaced(row: dict, attrs: dict | None) -> bool:
    """Already flagged ``replaced`` (a raw row's column, a canonical row's attributes)."""
    if attrs is None:
        return bool(row["replaced"])
    return bool(attrs.get("hermes", {}).get("replaced"))


def _key_strings(dataset: str, table: pa.Table) -> pa.Array:
    if dataset == GATEWAY:
        return table.column("part_id")
    parts = [pc.cast(table.column(c), pa.string()) for c in schemas.DATASETS[dataset].key]
    if "generation" in table.column_names:
        parts[-1] = pc.cast(pc.fill_null(table.column("generation"), 1), pa.string())
    return pc.binary_join_element_wise(*parts, "\x1f")


def _fate(dataset: str, row: dict, attrs: dict | None, by_path: dict, by_hash: dict) -> str | None:
    """None: drop the row; KEEP: keep it as is; DELETED: keep it, flagged source_deleted;
    REPLACED: keep it, flagged source_deleted and replaced (another generation of its id).
    ``attrs``: a canonical row's decoded attributes."""
    session_gen: int | None
    if attrs is not None:  # a canonical row (GATEWAY)
        facts = by_hash.get(attrs.get("gateway", {}).get("source_path_hash"))
        sid = attrs.get("gateway", {}).get("native_id")
        if facts is None or sid is None:
            return KEEP
        session_gen, mid, gen = _gateway_generations(row, attrs)
        end_row = ids.is_end_row(row["message_id"])
    else:
        facts = by_path.get(row["store"])
        sid = row["id"] if dataset == SESSIONS else row["session_id"]
        mid = row["id"] if dataset == MESSAGES else None
        gen = row["generation"] or 1
        session_gen = gen if dataset == SESSIONS else None
        end_row = False
    if facts is None:  # a store not read in this run: not ours to judge
        return KEEP
    if sid in facts.ignored:
        return None
    if sid not in facts.sessions:  # the whole session is gone from the store
        return DELETED
    now = facts.sessions_now.get(sid)
    if session_gen is not None and now is not None and now != session_gen:
        return REPLACED  # the session id was reused by another session (a restored store)
    if dataset == SESSIONS or end_row:  # the session exists (maybe now not ended, or moved)
        return None
    if mid is None:
        return None
    current = facts.messages_now.get((sid, mid))
    if current is None:
        return DELETED  # the message is gone (deleted, pruned, /retry renumbered it, or its id moved)
    if current != gen:
        return REPLACED  # the message id was reused by another message (a restored store)
    return None  # the message exists but yields fewer parts now


def _gateway_generations(row: dict, attrs: dict) -> tuple[int, int | None, int]:
    """``(session generation, mid, message generation)`` of a canonical row, from its ids:
    ``hermes-<scoped sid>[.g<n>]-<mid>[.g<n>]-<k>`` (SPEC D15)."""
    session_gen = ids.session_generation(
        row["session_id"], attrs.get("hermes", {}).get("store"), attrs["gateway"]["native_id"]
    )
    mid = row["provider_uuid"]
    mid = int(mid) if mid is not None and mid.isdigit() else None
    if mid is None:
        return session_gen, None, 1
    return session_gen, mid, ids.message_generation(row["message_id"], row["session_id"], mid)


def _flag(dataset: str, table: pa.Table, fates: list[str], attrs: list) -> pa.Table:
    """Flag the kept rows by their fate (``fates`` holds one per row of ``table``; ``attrs``
    their decoded attributes, canonical rows)."""
    if not any(f != KEEP for f in fates):
        return table
    if dataset != GATEWAY:
        for column, on in (("source_deleted", (DELETED, REPLACED)), ("replaced", (REPLACED,))):
            current = pc.fill_null(table.column(column), False).to_pylist()
            values = pa.array([c or f in on for c, f in zip(current, fates)], pa.bool_())
            idx = table.schema.get_field_index(column)
            table = table.set_column(idx, table.schema.field(idx), values)
        return table
    idx = table.schema.get_field_index("attributes")
    out = []
    for text, fate, value in zip(table.column("attributes").to_pylist(), fates, attrs):
        if fate != KEEP:
            hermes = value.setdefault("hermes", {})
            hermes["source_deleted"] = True
            if fate == REPLACED:
                hermes["replaced"] = True
            text = dumps(value, normalized=True)
        out.append(text)
    typ = schemas.AI_GATEWAY_MESSAGES.field("attributes").type
    return table.set_column(
        idx, table.schema.field(idx), pa.ExtensionArray.from_storage(typ, pa.array(out, pa.string()))
    )


def source_deleted_mask(dataset: str, table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Which rows are flagged ``source_deleted`` (D13): a raw dataset's column, or a canonical
    row's ``attributes.hermes.source_deleted``; all false for a dataset that keeps no such rows."""
    if dataset != GATEWAY:
        if "source_deleted" not in table.column_names:  # a derived dataset keeps no retained rows
            return pa.repeat(pa.scalar(False), table.num_rows)
        return pc.fill_null(table.column("source_deleted"), False)
    column = table.column("attributes")
    text = schemas.storage_of(column)
    # the flag is written compact (SPEC §5.5); a candidate is confirmed by parsing it
    maybe = pc.fill_null(pc.match_substring(text, '"source_deleted":true'), False)
    if not pc.any(maybe).as_py():
        return maybe
    return pa.array(
        [
            bool(m) and bool((loads(t).get("hermes") or {}).get("source_deleted"))
            for m, t in zip(maybe.to_pylist(), text.to_pylist())
        ],
        pa.bool_(),
    )


def count_source_deleted(dataset: str, table: pa.Table) -> int:
    return pc.sum(source_deleted_mask(dataset, table)).as_py() or 0
