"""Which host of a warehouse keeps the ids a single host always had (``hermes-<sid>``), and
which scope theirs by their label (``hermes-<label>:<sid>``): settled once per host and kept.

Each host's choice is its claim in the warehouse's ``.hosts/host=<label>`` (:func:`settle_ids`);
the functions take what they use of a :class:`~hermes_assets.lib.warehouse.datasets.Warehouse`
(:class:`Host`: this package never imports the warehouse).
"""

from __future__ import annotations

import contextlib
import os
from typing import Protocol

import pyarrow as pa

from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.hosts import host_claims, host_labels
from hermes_assets.lib.hosts.host_claims import CLAIMS
from hermes_assets.lib.storage import local_files
from hermes_assets.lib.storage.interface import Storage
from hermes_assets.lib.storage.local_files import FileModes

log = get_logger()

#: what a claim says: tried (the host is settling), held (its ids are unscoped), given up (scoped)
CLAIM_TRIED, CLAIM_HELD, CLAIM_GIVEN_UP = "trying", "unscoped", "scoped"


class Host(Protocol):
    """What these functions use of a warehouse opened by one host."""

    storage: Storage
    host: str
    host_named: bool

    @property
    def root(self) -> str: ...
    @property
    def modes(self) -> FileModes: ...


def _claim_path(wh: Host, host: str | None = None) -> str:
    return wh.storage.join(wh.root, CLAIMS, host_labels.folder(host or wh.host))


def fix_claim_modes(wh: Host) -> None:
    """The claims' folders and this host's claims (on the ids, its label, its stores) get the
    modes again (a local warehouse)."""
    if not wh.storage.local:
        return
    own = wh.storage.location(_claim_path(wh))
    folder = os.path.dirname(own)
    if os.path.isdir(folder):
        local_files.chmod_dir(folder, wh.modes)
    if os.path.isfile(own):
        os.chmod(own, wh.modes.file)
    host_claims.fix_modes(wh.storage, wh.root, wh.host, wh.modes)


def _put_claim(wh: Host, state: str) -> None:
    path = _claim_path(wh)
    if wh.storage.local:
        local_files.make_dirs(os.path.dirname(wh.storage.location(path)), wh.modes, wh.root)
    wh.storage.put(path, pa.py_buffer(f"{state}\n".encode()))


def claims(wh: Host) -> dict[str, str]:
    """Every host's claim on the unscoped ids: label -> what it says."""
    out = {}
    for found in wh.storage.files_under(wh.storage.join(wh.root, CLAIMS), depth=1):
        label = host_labels.label_of(found.path)
        data = None if label is None else wh.storage.read_bytes(_claim_path(wh, label))
        if label is not None and data is not None:
            out[label] = data.to_pybytes().decode("ascii", "replace").strip()
    return out


def settle_ids(wh: Host, *, legacy: bool = False) -> bool:
    """Whether this host's ids are scoped by its label (``<host>:<sid>``), settled once per
    host and kept: a row's id never changes with a later run.

    At most one host of a warehouse keeps the unscoped ids (``<sid>``, as a single host
    always had them), so every id stays unique across hosts whose Hermes session ids
    collide, whether their labels were set or not:

    * the host that moves a warehouse from before (``legacy``: its files, its rows
      byte-identical) holds them, whatever its label;
    * a host whose label was set (``HERMES_ASSETS_HOST``) scopes its ids;
    * a host whose label is its hostname holds them when it is first: it writes its claim
      (``.hosts/host=<label>``), then lists the claims, and holds them only when it finds
      no other host's claim that tried or holds, and no file from before. Of two hosts
      settling at once, at most one finds none (the second to list sees the first's
      claim): at worst both scope their ids, never neither.

    A host's own settled claim, found again (its spool lost: a reboot), says the same.
    """
    own = claims(wh).get(wh.host)
    if own in (CLAIM_HELD, CLAIM_GIVEN_UP):
        return own == CLAIM_GIVEN_UP
    if legacy:
        _put_claim(wh, CLAIM_HELD)
        return False
    if wh.host_named:
        _put_claim(wh, CLAIM_GIVEN_UP)
        return True
    _put_claim(wh, CLAIM_TRIED)
    others = {h: c for h, c in claims(wh).items() if h != wh.host and c != CLAIM_GIVEN_UP}
    scoped = bool(others)
    _put_claim(wh, CLAIM_GIVEN_UP if scoped else CLAIM_HELD)
    log.info("hermes.warehouse.ids_settled", host=wh.host, scoped=scoped, other_claims=sorted(others))
    return scoped


def move_ids_claim(wh: Host, source: str, target: str, *, scoped: bool) -> None:
    """The relabel job's last step for the ids: ``target`` claims them as ``scoped`` says
    (unless it settled its own), and ``source``'s claim goes."""
    if claims(wh).get(target) not in (CLAIM_HELD, CLAIM_GIVEN_UP):
        path = _claim_path(wh, target)
        if wh.storage.local:
            local_files.make_dirs(os.path.dirname(wh.storage.location(path)), wh.modes, wh.root)
        wh.storage.put(path, pa.py_buffer(f"{CLAIM_GIVEN_UP if scoped else CLAIM_HELD}\n".encode()))
    with contextlib.suppress(FileNotFoundError):
        wh.storage.delete(_claim_path(wh, source))
