"""Move a host's files to another label, in place, nothing lost (the ``relabel_host`` job).

A store is captured under one label (:mod:`.host_claims`). When that label must
change (a container whose hostname, and so its label, changed with no identity kept;
a host to rename), this moves every file of ``host=<from>`` to this host's folder
``host=<to>`` (the captured datasets and the sightings of secrets), each row rewritten
as ``<to>`` would have written it:

* ``host`` is ``<to>``;
* ids scoped by the old label (``hermes-<from>:<sid>``, ``hermes-<from>/<label>:<sid>``,
  the ``store_label`` and ``copy_of`` columns, ``attributes.hermes.store`` and
  ``copy_of``) are scoped by the new one; ids a host keeps unscoped stay as they are
  when ``<to>`` takes over ``<from>``'s unscoped ids (:func:`hermes_assets.lib.basics.ids.host_scope`);
* a day ``<to>`` holds already keeps ``<to>``'s rows, and gains ``<from>``'s other rows
  (a store captured twice, under both labels, is then held once);

then the read marks, the claims of the stores and of the ids, and the label's own
claim. Each day is written under ``<to>`` before ``<from>``'s file goes, so a job
killed half-way loses nothing, and running it again finishes it (idempotent: a
label with no file left moves nothing). While it runs, a reader's glob may see a
day's rows under both labels.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics import ids, schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, PER_HOST, SIGHTINGS
from hermes_assets.lib.hosts import host_claims, host_identity, host_labels, unscoped_ids
from hermes_assets.lib.hosts.host_claims import Claim
from hermes_assets.lib.source import jsonutil
from hermes_assets.lib.storage.interface import LOCK_FILE
from hermes_assets.lib.warehouse import partition_file, read_marks
from hermes_assets.lib.warehouse.datasets import Warehouse

log = get_logger()


@dataclass
class Relabeled:
    """What :func:`relabel` moved."""

    from_label: str
    to_label: str
    files: int = 0
    rows: int = 0
    #: rows ``<to>`` held already (the same store captured under both labels): kept once
    duplicates: int = 0
    days: set[str] = field(default_factory=set)
    #: files of the sightings of secrets moved (what to rotate names their hosts)
    sightings: int = 0

    def metadata(self) -> dict:
        return {
            "from_label": self.from_label,
            "to_label": self.to_label,
            "files_moved": self.files,
            "rows_moved": self.rows,
            "rows_held_twice": self.duplicates,
            "days_moved": len(self.days),
        }


@dataclass(frozen=True)
class Scopes:
    """How a store label of ``<from>`` becomes one of ``<to>`` (each side scoped or not)."""

    old: str
    new: str
    old_scoped: bool
    new_scoped: bool

    def label(self, label: str | None) -> str:
        bare = label or ""
        if self.old_scoped:
            bare = "" if bare == self.old else bare[len(self.old) + 1 :] if bare.startswith(self.old + "/") else bare
        return ids.host_scope(self.new if self.new_scoped else None, bare)


def _prefix(label: str) -> str:
    return f"{label}:" if label else ""


def _swap(value: str | None, old: str, new: str) -> str | None:
    return new + value[len(old) :] if value is not None and value.startswith(old) else value


def _map(table: pa.Table, name: str, fn: Callable[[int, Any], object]) -> pa.Table:
    """``table`` with column ``name``'s values mapped by ``fn(row, value)`` (its type kept)."""
    if name not in table.column_names:
        return table
    index = table.schema.get_field_index(name)
    field_ = table.schema.field(index)
    column = table.column(name)
    storage_type = field_.type.storage_type if isinstance(field_.type, pa.ExtensionType) else field_.type
    values = [fn(i, v) for i, v in enumerate(column.to_pylist())]
    array: pa.Array = pa.array(values, pa.string() if pa.types.is_dictionary(storage_type) else storage_type)
    if isinstance(field_.type, pa.ExtensionType):
        array = pa.ExtensionArray.from_storage(field_.type, array)
    elif pa.types.is_dictionary(storage_type):
        array = pc.dictionary_encode(array).cast(storage_type)
    return table.set_column(index, field_, array)


def _attributes(text: object, old: str, new: str) -> object:
    """A canonical row's ``attributes`` with ``hermes.store`` ``old`` -> ``new`` (absent when
    empty: after ``real_cwd``, else ``source``, where the projection puts it) and
    ``hermes.copy_of`` re-scoped; every other member as it was, where it was."""
    if not isinstance(text, str) or old == new:
        return text
    attrs = jsonutil.loads(text)
    members = [(k, v) for k, v in attrs.get("hermes", {}).items() if k != "store" or new]
    members = [(k, new if k == "store" else v) for k, v in members]
    members = [(k, _swap(v, _prefix(old), _prefix(new)) if k == "copy_of" else v) for k, v in members]
    if new and not old:
        names = [k for k, _ in members]
        after = names.index("real_cwd") if "real_cwd" in names else names.index("source") if "source" in names else -1
        members.insert(after + 1, ("store", new))
    attrs["hermes"] = dict(members)
    return jsonutil.dumps(attrs)


def rewrite(dataset: str, table: pa.Table, scopes: Scopes) -> pa.Table:
    """A day's rows of ``<from>`` as ``<to>`` writes them (see the module docstring)."""
    table = _map(table, "host", lambda i, v: scopes.new)
    if dataset != GATEWAY:
        labels = table.column("store_label").to_pylist()
        if dataset == MESSAGES:
            table = _map(table, "copy_of", lambda i, v: _swap(v, _prefix(labels[i]), _prefix(scopes.label(labels[i]))))
        return _map(table, "store_label", lambda i, v: scopes.label(v))
    olds = [jsonutil.loads(a).get("hermes", {}).get("store", "") if a else "" for a in table["attributes"].to_pylist()]
    pre = [(ids.PREFIX + _prefix(old), ids.PREFIX + _prefix(scopes.label(old))) for old in olds]
    for name in ("session_id", "message_id", "part_id", "parent_thread_id"):
        table = _map(table, name, lambda i, v: _swap(v, *pre[i]))
    table = _map(
        table,
        "previous_message_id",
        lambda i, v: None if v is None else json.dumps([_swap(x, *pre[i]) for x in json.loads(v)]),
    )
    return _map(table, "attributes", lambda i, v: _attributes(v, olds[i], scopes.label(olds[i])))


def _keys(dataset: str, table: pa.Table) -> list[tuple]:
    key = schemas.spec(dataset).key
    return list(zip(*(table.column(k).to_pylist() for k in key))) if table.num_rows else []


def _move_day(wh: Warehouse, dataset: str, day: str, source: str, scopes: Scopes, moved: Relabeled) -> None:
    """One day of one dataset from ``source``'s folder to this host's (under this host's day lock)."""
    with wh.day_lock(dataset, day):
        data = wh.storage.read_bytes(wh.path(dataset, day, source))
        old_marks = wh.storage.join(wh.file_dir(dataset, day, source), read_marks.READ_AT_FILE)
        if data is not None:
            table = rewrite(dataset, partition_file.decode(dataset, data), scopes)
            version = partition_file.redaction_version(data)
            held = wh.storage.read_bytes(wh.path(dataset, day))
            if held is not None:  # this host's rows of the day win; the other's join them, once
                mine = partition_file.decode(dataset, held)
                known = set(_keys(dataset, mine))
                fresh = pa.array([k not in known for k in _keys(dataset, table)], pa.bool_())
                moved.duplicates += table.num_rows - pc.sum(fresh.cast(pa.int64())).as_py()
                table = pa.concat_tables([mine, table.filter(fresh)], promote_options="permissive")
                version = _common_version(version, partition_file.redaction_version(held))
            wh.storage.put(wh.path(dataset, day), partition_file.encode(dataset, table, version))
            moved.files += 1
            moved.sightings += dataset == SIGHTINGS
            moved.rows += table.num_rows
            moved.days.add(day)
        marks = read_marks.parse(wh.storage.read_bytes(old_marks))
        if marks:
            own = read_marks.parse(wh.storage.read_bytes(wh.marks_path(dataset, day)))
            merged = {k: max(v, own.get(k, v)) for k, v in marks.items()} | {
                k: v for k, v in own.items() if k not in marks
            }
            wh.storage.put(wh.marks_path(dataset, day), read_marks.render(merged), durable=False)
        for path in (wh.path(dataset, day, source), old_marks):
            with contextlib.suppress(FileNotFoundError):
                wh.storage.delete(path)
        wh.fix_modes(dataset, day)
    if wh.storage.local:  # the old label's folder goes too, when nothing but its day lock is left
        folder = wh.storage.location(wh.file_dir(dataset, day, source))
        with contextlib.suppress(OSError):
            os.remove(os.path.join(folder, LOCK_FILE))
            os.rmdir(folder)


def _common_version(a: str | None, b: str | None) -> str | None:
    """The redaction version both files' cells went through: theirs when they agree, else
    None (unknown: the next run that redacts brings the file to its own version)."""
    return a if a == b else None


def relabel(wh: Warehouse, from_label: str, identity_file: str, *, to_label: str | None = None) -> Relabeled:
    """Move ``from_label``'s files to ``to_label`` (default: this host's label; another label
    only when ``from_label`` is this host's own, which is then renamed). Raises ValueError
    for a move that cannot be this host's to make, :class:`HostConflict` when ``to_label``
    is another host's."""
    source = host_labels.check_label(from_label)
    target = host_labels.check_label(to_label or wh.host)
    if source == target:
        raise ValueError(f"relabel_host: from_label and the new label are both {source!r}: nothing to move")
    if target != wh.host and source != wh.host:
        raise ValueError(
            f"relabel_host moves files to this host ({wh.host!r}), or renames this host: run it on the host "
            f"that is to own {target!r}"
        )
    identity = host_identity.load_or_make(identity_file, wh.modes)
    host_claims.claim(wh.storage, wh.root, identity, target, {})
    claims = unscoped_ids.claims(wh)
    old_scoped = claims.get(source) != unscoped_ids.CLAIM_HELD
    held = claims.get(target)
    settled = held in (unscoped_ids.CLAIM_HELD, unscoped_ids.CLAIM_GIVEN_UP)
    # the new label keeps its own ids' scope, or takes the old one's as they were
    new_scoped = held == unscoped_ids.CLAIM_GIVEN_UP if settled else old_scoped
    scopes = Scopes(source, target, old_scoped, new_scoped)
    moving = copy.copy(wh)  # this warehouse, as the host that is to own the files
    moving.host = target
    moved = Relabeled(source, target)
    for dataset in PER_HOST:  # the sightings' rows name their host and store label as the datasets' do
        for day in sorted({d for d, h in moving.files(dataset) if h == source}):
            _move_day(moving, dataset, day, source, scopes, moved)
    for store, claim in host_claims.store_claims(wh.storage, wh.root).items():
        if claim.label == source:
            path = host_claims.store_path(wh.storage, wh.root, store)
            wh.storage.put(path, Claim(target, identity.digest, claim.since).render())
    unscoped_ids.move_ids_claim(wh, source, target, scoped=new_scoped)
    with contextlib.suppress(FileNotFoundError):
        wh.storage.delete(host_claims.label_path(wh.storage, wh.root, source))
    if identity.label in (None, source):
        host_identity.relabel(identity_file, identity, target, wh.modes)
    log.warning("hermes.warehouse.relabeled", **moved.metadata())
    return moved
