"""This host's identity: made once, kept in its Dagster instance's folder, never derived from
the hostname.

A host is one installation (one ``DAGSTER_HOME``), wherever it runs. Its identity
file (``hermes_assets-host.json``, private: ``0600`` in a ``0700`` folder when this
creates it) holds a random id and, from its first capture on, the label its files
and rows carry::

    {"id": "<32 random hex>", "label": "gateway-1", "named": true, "since": "2026-06-01T10:00:00Z"}

The label is settled once, on the host's first capture: ``HERMES_ASSETS_HOST``, or
else the hostname of that moment; from then on it is read from this file, so a new
hostname (a container restarted, a pod rescheduled, a laptop on another network)
changes nothing, and a ``DAGSTER_HOME`` restored on another machine keeps it. The
warehouse knows a host by a digest of its id only (:attr:`Identity.digest`,
:mod:`.host_claims`): the id itself never leaves this folder.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import secrets
from dataclasses import dataclass, replace

import pyarrow as pa

from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.hosts import host_labels
from hermes_assets.lib.storage import local_files
from hermes_assets.lib.storage.local_files import PRIVATE, FileModes

#: the identity's file in the Dagster instance's folder
IDENTITY_FILE = "hermes_assets-host.json"


@dataclass(frozen=True)
class Identity:
    """A host's identity (see the module docstring)."""

    id: str
    #: the settled label (None until the host's first capture)
    label: str | None = None
    #: the label was set (``HERMES_ASSETS_HOST``) when it was settled
    named: bool = False
    #: when the identity was made (UTC, ISO 8601)
    since: str = ""

    @property
    def digest(self) -> str:
        """What the warehouse records of this host: a digest of its id, not the id."""
        return hashlib.sha256(self.id.encode()).hexdigest()[:32]

    def render(self) -> bytes:
        doc = {"id": self.id, "label": self.label, "named": self.named, "since": self.since}
        return (json.dumps(doc, sort_keys=True) + "\n").encode()


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read(path: str) -> Identity | None:
    """The identity in ``path`` (None: there is none yet). A file that is not one is a
    :class:`ConfigurationError` naming it: never replaced (it may be all a host has of its label)."""
    try:
        data = local_files.read_bytes(path)
    except NotADirectoryError:  # a file where its folder should be: none yet (the settings name the folder)
        return None
    if data is None:
        return None
    try:
        doc = json.loads(data.to_pybytes().decode("utf-8"))
        label = doc.get("label")
        if label is not None:
            host_labels.check_label(label)
        identity = Identity(str(doc["id"]), label, bool(doc.get("named")), str(doc.get("since", "")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigurationError(
            f"{path} is not a hermes_assets host identity ({exc}): restore it from a backup of this "
            "DAGSTER_HOME, or remove it to make this installation a new host"
        ) from None
    if len(identity.id) < 16:
        raise ConfigurationError(f"{path} is not a hermes_assets host identity (its id is too short)")
    return identity


def load_or_make(path: str, modes: FileModes = PRIVATE) -> Identity:
    """This host's identity, made now (a random id, no label yet) when there is none. Two
    processes making it at once agree: the file is created whole or not at all, and the one
    that finds it made reads it."""
    found = read(path)
    if found is not None:
        return found
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        local_files.make_dirs(folder, modes)
    made = Identity(secrets.token_hex(16), since=now_iso())
    local_files.create_exclusive(path, pa.py_buffer(made.render()), modes.file)
    found = read(path)
    assert found is not None  # made, or made by another process meanwhile
    return found


def settle(path: str, identity: Identity, label: str, *, named: bool, modes: FileModes = PRIVATE) -> Identity:
    """The identity with its label settled (written once, on the host's first capture; an
    identity whose label is settled keeps it)."""
    if identity.label is not None:
        return identity
    folder, name = os.path.split(path)
    # runs of this host starting at once (the sensor's first runs) settle it once, under a
    # lock: their writes of one file would race (each removes this host's other temp files
    # as a dead writer's); the others read what the first wrote
    with local_files.locked(os.path.join(folder, f".{name}.lock"), modes.file):
        found = read(path)
        if found is not None and found.label is not None:
            return found
        settled = replace(identity, label=host_labels.check_label(label), named=named)
        local_files.atomic_write(path, pa.py_buffer(settled.render()), modes.file)
    return settled


def relabel(path: str, identity: Identity, label: str, modes: FileModes = PRIVATE) -> Identity:
    """The identity with a new label (the relabel job, when it renames this host)."""
    moved = replace(identity, label=host_labels.check_label(label))
    local_files.atomic_write(path, pa.py_buffer(moved.render()), modes.file)
    return moved
