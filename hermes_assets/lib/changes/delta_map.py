"""The map a tick that read every row leaves for the next tick of the same store (this process only).

What :class:`~hermes_assets.lib.changes.wal_delta.TickFiles` learns of a store's pages on a full
tick, and the cursor entry it was learned with: the next tick takes it and reads only the pages
written since (:mod:`~hermes_assets.lib.changes.wal_delta`), and keeps a new one for the tick after.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hermes_assets.lib.changes.sqlite_pages import SessionsTree, WalFrames
from hermes_assets.lib.changes.tier2_pages import Tier2Pages


@dataclass
class DeltaMap:
    """What a tick that read every row left for the next one to read only the pages written since."""

    files: dict  # the cursor entry's files identity, as that tick wrote it
    db: tuple[int, int, int]  # inode, size and mtime (ns) of the db file
    wal: WalFrames
    schema_version: int
    tree: SessionsTree
    counts: dict[str, int]  # day -> sessions SQL places on it
    odd: dict[int, tuple[str, str | None]]  # the sessions placed one by one
    seldom: dict[str, list[int]]  # day -> rowids of the sessions tier 1 counts the inactive messages of
    inactive: dict[int, int]  # rowid -> inactive count, of those sessions
    prompts: str | None  # digest of the system_prompts rows (schema 25+)
    tier1: dict[str, str]  # day -> tier 1 the tick found
    side: Tier2Pages | None = None  # None: not mapped, every tier 2 is computed
    #: days whose tier 2 in the cursor is provably that of the store as of the map's position
    #: (digested on a tick no commit raced, and no page of theirs written since)
    clean: frozenset[str] = frozenset()
    tier2: dict[str, str | None] = field(default_factory=dict)  # day -> tier 2 of the cursor left


#: store path -> the map its last full read left (this process only)
_MAPS: dict[str, DeltaMap] = {}


def forget(path: str | None = None) -> None:
    """Drop the map of one store (or of all): its next tick reads every row."""
    if path is None:
        _MAPS.clear()
    else:
        _MAPS.pop(path, None)


def take(path: str) -> DeltaMap | None:
    """The map kept for ``path``, taken (kept again only by :func:`keep`)."""
    return _MAPS.pop(path, None)


def keep(
    path: str,
    m: DeltaMap | None,
    entry_files: dict | None,
    entry_tier1: dict[str, str],
    entry_tier2: dict[str, str | None],
) -> None:
    """Keep what a tick learned (``m``, None: nothing) for the next tick of ``path`` (the cursor entry it wrote)."""
    if m is not None and entry_files is not None and m.tier1 == entry_tier1:
        m.files = entry_files
        m.tier2 = dict(entry_tier2)
        _MAPS[path] = m
