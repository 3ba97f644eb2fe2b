"""Which Hermes store this is, by what it holds: not its path, which another machine shares.

A store's identity is a digest of its earliest sessions: the ids and start times of
the first :data:`EARLIEST` sessions (by start time, then id) and, for each, its first
message (id, role, time and text). Hermes appends: a session once written keeps its
id, its start and its first message, so the identity of a store stays what it was as
it grows, wherever it is copied or mounted. Two machines' stores share one only when
one began as a copy of the other (their earliest sessions are the same sessions).

Only the digest leaves the machine (a warehouse records which host captures which
store: :mod:`hermes_assets.lib.hosts.host_claims`); a store with no session yet
has none.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from hermes_assets.lib.basics import errors
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.store_connection import StoreConnection
from hermes_assets.lib.source.stores import Store

#: how many of the earliest sessions make a store's identity
EARLIEST = 3


def store_identity(reader: StoreConnection) -> str | None:
    """The identity of the store ``reader`` has open (a 32-hex digest); None when it holds no
    session. Two small statements per session named, on the read-only connection."""
    sessions = reader._query(
        "SELECT id, started_at FROM sessions ORDER BY started_at, id LIMIT ?", (EARLIEST,), what="store_identity"
    )
    if not sessions:
        return None
    digest = hashlib.sha256()
    for sid, started in sessions:
        digest.update(f"{sid!r}\x1f{started!r}\x1e".encode())
        first = reader._query(
            "SELECT id, role, timestamp, content FROM messages WHERE session_id = ? ORDER BY id LIMIT 1",
            (sid,),
            what="store_identity",
        )
        for row in first:
            digest.update("\x1f".join(repr(cell) for cell in row).encode("utf-8", "surrogatepass") + b"\x1e")
    return digest.hexdigest()[:32]


def identities(stores: Iterable[Store], readers: ReaderFactory) -> dict[str, str]:
    """Store path -> its identity, for the stores that can be read and hold a session (one
    read-only look each; a store that is not there, or not readable, is the run's to name)."""
    found = {}
    for store in stores:
        try:
            with readers.open(store) as reader:
                identity = store_identity(reader)
        except (OSError, errors.StoreAbsent, errors.HermesAssetsError):
            continue
        if identity is not None:
            found[store.path] = identity
    return found
