"""Who is who in a warehouse several hosts write: one label, one host; one store, one label.

Two kinds of claim live in the warehouse's ``.hosts/`` folder, each a small JSON
file written once, by a conditional create (:meth:`Storage.put_if`: S3's
``If-None-Match``, a hard link on disk), so that of two hosts claiming at once
exactly one wins:

* ``.hosts/labels/<label>.json``: the host (:class:`~.host_identity.Identity`, by
  the digest of its id) that owns the label, and its first capture. Another
  installation with the same label, set or from its hostname (identical VM images,
  two containers named alike), is refused before it writes anything
  (:func:`check`): it would write the first host's files.
* ``.hosts/stores/<identity>.json``: the label a Hermes store is captured under
  (a store is known by what it holds: :mod:`hermes_assets.lib.source.store_identity`).
  The same store under a second label (a hostname that changed with no identity to
  remember the first: a container whose ``DAGSTER_HOME`` was not kept) is refused:
  it would be written again in full and counted twice. The relabel job moves a
  label's files to another (:mod:`.relabel`).

Each refusal is one line (:class:`HostConflict`, a configuration error) naming what
collides and what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

import pyarrow as pa

from hermes_assets.lib.basics.errors import HostConflict
from hermes_assets.lib.hosts import host_identity
from hermes_assets.lib.hosts.host_identity import Identity, now_iso
from hermes_assets.lib.storage import local_files
from hermes_assets.lib.storage.interface import Storage
from hermes_assets.lib.storage.local_files import FileModes

#: the warehouse's folder of claims (the ids' claims, ``host=<label>``, are :mod:`.host_layout`'s)
CLAIMS = ".hosts"
LABELS = "labels"
STORES = "stores"
#: the job that moves a label's files to another (``defs/jobs.py``)
RELABEL_JOB = "relabel_host"


@dataclass(frozen=True)
class Claim:
    """A label's owner (``host``: its identity's digest) or a store's label, and since when."""

    label: str
    host: str
    since: str

    def render(self) -> pa.Buffer:
        doc = {"label": self.label, "host": self.host, "since": self.since}
        return pa.py_buffer((json.dumps(doc, sort_keys=True) + "\n").encode())


def label_path(storage: Storage, root: str, label: str) -> str:
    return storage.join(root, CLAIMS, LABELS, f"{label}.json")


def store_path(storage: Storage, root: str, store: str) -> str:
    return storage.join(root, CLAIMS, STORES, f"{store}.json")


def read_claim(storage: Storage, path: str) -> Claim | None:
    """The claim at ``path`` (None: none, or one that does not read: written by no version of this)."""
    data = storage.read_bytes(path)
    if data is None:
        return None
    try:
        doc = json.loads(data.to_pybytes().decode("utf-8"))
        return Claim(str(doc["label"]), str(doc["host"]), str(doc.get("since", "")))
    except (ValueError, KeyError, TypeError):
        return None


def label_conflict(label: str, other: Claim) -> HostConflict:
    return HostConflict(
        f"host label {label!r} is taken in this warehouse by another installation (its first capture: "
        f"{other.since or 'unknown'}), and this DAGSTER_HOME is not that host: set HERMES_ASSETS_HOST to a "
        "label of this host's own (nothing was written)"
    )


def store_conflict(path: str, other: Claim, label: str) -> HostConflict:
    return HostConflict(
        f"the Hermes store {path} is already captured in this warehouse as host {other.label!r} (since "
        f"{other.since or 'unknown'}), and this host is {label!r}: capturing it again would count its sessions "
        f"twice; run the {RELABEL_JOB} job with from_label={other.label!r} to move that host's files to "
        f"{label!r} (deploy/README.md, 'Relabel a host'), or capture it as {other.label!r} (nothing was written)"
    )


def check(storage: Storage, root: str, identity: Identity | None, label: str, stores: dict[str, str]) -> None:
    """Refuse (:class:`HostConflict`) when ``label`` is another host's, or a store of
    ``stores`` (path -> its identity) is captured under another label; reads only.
    ``identity``: this host's (None: it has none yet, so any owner of the label is another)."""
    owner = read_claim(storage, label_path(storage, root, label))
    if owner is not None and (identity is None or owner.host != identity.digest):
        raise label_conflict(label, owner)
    for path, store in sorted(stores.items()):
        other = read_claim(storage, store_path(storage, root, store))
        if other is not None and other.label != label:
            raise store_conflict(path, other, label)


def claim(storage: Storage, root: str, identity: Identity, label: str, stores: dict[str, str]) -> None:
    """:func:`check`, then claim the label and the stores not claimed yet (a conditional
    create each: of two hosts claiming at once one wins, and the other is refused)."""
    check(storage, root, identity, label, stores)
    since = now_iso()
    path = label_path(storage, root, label)
    if not storage.put_if(path, Claim(label, identity.digest, since).render(), None):
        check(storage, root, identity, label, {})  # another claimed it first: whose is it?
    for store_path_, store in sorted(stores.items()):
        path = store_path(storage, root, store)
        if not storage.put_if(path, Claim(label, identity.digest, since).render(), None):
            check(storage, root, identity, label, {store_path_: store})


def fix_modes(storage: Storage, root: str, label: str, modes: FileModes) -> None:
    """The modes again (a local warehouse) for the claims' folders, this host's label claim and
    the claims of the stores under its label (what an older umask left open is closed)."""
    if not storage.local:
        return
    for folder in (LABELS, STORES):
        local_files.chmod_dir(storage.location(storage.join(root, CLAIMS, folder)), modes)
    own = [label_path(storage, root, label)]
    own += [store_path(storage, root, s) for s, c in store_claims(storage, root).items() if c.label == label]
    for path in own:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(storage.location(path), modes.file)


def store_claims(storage: Storage, root: str) -> dict[str, Claim]:
    """Every store's claim: store identity -> claim."""
    folder = storage.join(root, CLAIMS, STORES)
    out = {}
    for found in storage.files_under(folder, depth=1):
        name = found.path.rpartition("/")[2]
        if name.endswith(".json") and (c := read_claim(storage, storage.join(folder, name))) is not None:
            out[name[: -len(".json")]] = c
    return out


def settle_host(
    storage: Storage,
    root: str,
    identity_file: str,
    label: str,
    stores: dict[str, str],
    *,
    named: bool,
    modes: FileModes,
) -> Identity:
    """Before a host's capture writes anything: its identity (made now on its first capture),
    its label claimed (settled in the identity file on the first capture: from then on the
    label is read from there), its stores claimed. Raises :class:`HostConflict`, nothing
    written in the warehouse, when the label is another host's or a store another label's."""
    identity = host_identity.load_or_make(identity_file, modes)
    if identity.label is not None and identity.label != label:
        raise HostConflict(
            f"this host's label is {identity.label!r} since its first capture ({identity_file}), not {label!r}: "
            f"reload the definitions, or run the {RELABEL_JOB} job to rename it"
        )
    claim(storage, root, identity, label, stores)
    return host_identity.settle(identity_file, identity, label, named=named, modes=modes)


def check_host(storage: Storage, root: str, identity_file: str, label: str, stores: dict[str, str]) -> None:
    """:func:`check` for the host of ``identity_file`` (which may not exist yet): reads only."""
    check(storage, root, host_identity.read(identity_file), label, stores)
