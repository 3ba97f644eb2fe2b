"""Which Hermes stores there are, and how each one's ids are scoped (SPEC §1, D14).

Discovery only: nothing here opens a store (:mod:`hermes_assets.lib.source.state_db`
reads them). ``HERMES_STATE_DB`` names the stores when it is set (a file, a
directory holding ``**/state.db``, or several of them separated by ``:``);
otherwise the Hermes home's own store and one per profile.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from hermes_assets.lib.basics import errors, ids

STORE_FILE = "state.db"


@dataclass(frozen=True)
class Store:
    """One Hermes store: where it is and how its ids are scoped (SPEC §1).

    ``explicit``: named in ``HERMES_STATE_DB`` (a file that must exist), as
    opposed to found by discovery (absent = Hermes not installed, the idle case).
    """

    path: str
    label: str = ""
    profile: str | None = None
    explicit: bool = False
    #: the host whose store this is (every row names it; :func:`on_host`)
    host: str = ""

    def scoped(self, sid: str) -> str:
        return ids.scoped_sid(self.label, sid)

    def scoped_by_host(self) -> Store:
        """This store with its host joining the scope of its ids (:func:`ids.host_scope`)."""
        return dataclasses.replace(self, label=ids.host_scope(self.host or None, self.label))

    @functools.cached_property
    def path_hash(self) -> str:
        """Every canonical row's ``source_path_hash``: hashed once per store, not once per session."""
        return hashlib.sha256(self.path.encode("utf-8")).hexdigest()[:16]

    def exists(self) -> bool:
        return os.path.isfile(self.path)

    def missing_error(self) -> errors.StoreMissing:
        return errors.StoreMissing(missing_line(self.path), path=self.path)


def missing_line(path: str) -> str:
    """The one line that names a path of ``HERMES_STATE_DB`` that does not exist."""
    return (
        f"HERMES_STATE_DB names {path}, which does not exist: check the path "
        "(unset HERMES_STATE_DB to use the Hermes home's own store)."
    )


def named_paths(state_db: str | None) -> list[str]:
    """The paths ``HERMES_STATE_DB`` names (files or folders, separated by ``:``), absolute."""
    if not state_db or not state_db.strip():
        return []
    return [os.path.abspath(os.path.expanduser(p.strip())) for p in state_db.split(":") if p.strip()]


def missing_named(state_db: str | None) -> list[str]:
    """The paths of ``HERMES_STATE_DB`` that do not exist (a dangling link counts as missing):
    a mistake in the setting, never the idle case of a Hermes not installed (SPEC §1)."""
    return [path for path in named_paths(state_db) if not os.path.exists(path)]


def on_host(stores: list[Store], host: str, *, scoped: bool) -> list[Store]:
    """``stores`` as stores of host ``host``; ``scoped``: its label joins each store's label,
    the scope of its ids (:func:`hermes_assets.lib.basics.ids.host_scope`; whether a host's ids are
    scoped is its warehouse's to say: :meth:`~hermes_assets.lib.warehouse.datasets.Warehouse.adopt_legacy`)."""
    return [dataclasses.replace(s, host=host, label=ids.host_scope(host if scoped else None, s.label)) for s in stores]


def default_hermes_home() -> str:
    """Hermes's own default home, ``~/.hermes``."""
    return os.path.join(os.path.expanduser("~"), ".hermes")


def discover_stores(state_db: str | None = None, hermes_home: str | None = None) -> list[Store]:
    """The stores to read: ``state_db`` (``HERMES_STATE_DB``) if given, else the Hermes
    home and its profiles.

    The default store is listed even when it does not exist (a missing store is a
    state, not an error: SPEC R9); profiles are listed when their file exists.
    """
    if state_db and state_db.strip():
        return _explicit_stores(named_paths(state_db))
    home = os.path.abspath(os.path.expanduser(hermes_home or default_hermes_home()))
    stores = [Store(os.path.join(home, STORE_FILE))]
    profiles = Path(home, "profiles")
    if profiles.is_dir():
        for db in sorted(profiles.glob(f"*/{STORE_FILE}")):
            name = db.parent.name
            stores.append(Store(str(db.absolute()), label=name, profile=name))
    return stores


def _explicit_stores(paths: list[str]) -> list[Store]:
    if len(paths) == 1 and not os.path.isdir(paths[0]):
        return [Store(paths[0], explicit=True)]
    stores: list[Store] = []
    for path in paths:
        if os.path.isdir(path):
            for db in sorted(Path(path).rglob(STORE_FILE)):
                rel = os.path.relpath(db.parent, path)
                stores.append(Store(str(db), label="" if rel == "." else rel.replace(os.sep, "/")))
        else:
            stores.append(Store(path, label=os.path.basename(os.path.dirname(path)), explicit=True))
    labels = [s.label for s in stores]
    clashes = sorted({label for label in labels if labels.count(label) > 1})
    if clashes:
        raise errors.ConfigurationError(
            f"HERMES_STATE_DB names several stores with the same label {clashes}: "
            "labels come from each store's folder name; put the stores in folders with distinct names."
        )
    return stores
