"""The pages tier 2 reads besides the ``sessions`` tree's: a rotation day none of whose pages was written keeps its digest.

The map of :mod:`~hermes_assets.lib.changes.wal_delta` also holds the other trees tier 2 reads (:class:`Tier2Pages`):
``idx_messages_session_active`` (its interior pages with their entries, each page with its
range of session ids, bounded by the divider entries above it, both ends included; and the
entries of each leaf written since, as read then), every leaf of ``session_model_usage`` with
the session ids of its rows (read from the cells), and ``system_prompts``. A day's tier 2 reads
its ``sessions`` rows, the index entries of their ids and their usage rows, so it can move only
when a page written holds one of them: a ``sessions`` row of the day (old or new position of a
row is checked by the count), an index entry of a session of the day that the pages written
gained or lost (their entries read from the pages at the position, against those the map held;
an entry moved between two of them, by a split or a merge, is no change; a page whose entries
are not known, as a leaf never written since the map, names every session of its range, before
or after the commit), a usage leaf that held or holds a row of a session of the day (its ids
read from the page at both positions, never from a later state), any page of ``system_prompts``. The days none of which was written since their tier 2
was computed on a tick that no commit raced (:meth:`~hermes_assets.lib.changes.wal_delta.TickFiles.quiet`: every statement then saw
the state of the pages read) keep it: the rotation takes their digest from the cursor, provably
the one it would compute (:attr:`~hermes_assets.lib.changes.delta_map.DeltaMap.clean`). A tick that reads every row starts the set
empty.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from hermes_assets.lib.changes.fingerprint import Fingerprinter, Tier1
from hermes_assets.lib.changes.index_walk import walk_again, walk_index
from hermes_assets.lib.changes.sqlite_pages import (
    Bound,
    Doubt,
    Entries,
    IndexTree,
    Pages,
    SessionsTree,
    map_pages,
    record_key,
)
from hermes_assets.lib.source.text_cells import as_text


@dataclass
class Tier2Pages:
    """The pages tier 2 reads besides the ``sessions`` tree's, mapped so that the pages a commit
    wrote name the days whose tier 2 it may have moved: ``idx_messages_session_active`` (the
    inactive counts; each page with the range of session ids its entries lie in),
    ``session_model_usage`` (each leaf with the sessions its rows belong to) and
    ``system_prompts`` (any page written: every day)."""

    index: IndexTree | None  # None: the store has no inactive counts to read
    usage: SessionsTree | None  # None: no ``session_model_usage``
    usage_sessions: dict[int, frozenset[bytes]]  # usage leaf -> the session ids of its rows (text)
    prompts: SessionsTree | None  # None: no ``system_prompts``
    #: index leaf written since the map -> its entries as read then (the leaves never read: none)
    index_leaves: dict[int, Entries] = field(default_factory=dict)


@dataclass
class SideWrites:
    """What the pages written since the map say of :class:`Tier2Pages` (read before any SQL)."""

    side: Tier2Pages  # the trees as of the pages read (walked again where an interior page was written)
    ranges: list[Bound]  # session id ranges of the index pages written whose entries are not known
    index_ids: set[bytes]  # session ids of the entries a written index leaf gained or lost
    usage_ids: set[bytes]  # session ids of the rows on the usage leaves written, before and after
    overflow_rows: set[int]  # usage rowids whose overflow pages were written
    prompts: bool  # a page of ``system_prompts`` was written


def side_roots(fp: Fingerprinter) -> dict[str, int] | None:
    """The root pages of the trees tier 2 reads besides ``sessions`` (those the store has), or
    None when the page map cannot tell the days their pages hold: session ids compared other
    than as UTF-8 text with the BINARY collation, not the first column of the index or of the
    usage rows, or a tree tier 2 reads and no root found."""
    reader = fp.reader
    names = {"idx_messages_session_active": fp.inactive != "0", "session_model_usage": bool(fp.usage_digest)}
    names["system_prompts"] = "system_prompts" in reader.tables
    rows = reader.fetch_raw("SELECT name, tbl_name, rootpage, sql FROM sqlite_schema")
    roots = {as_text(n): r for n, _, r, _ in rows if names.get(as_text(n)) and isinstance(r, int)}
    if len(roots) != sum(names.values()):
        return None
    ddl = " ".join(str(as_text(q)) for _, t, _, q in rows if as_text(t) in ("sessions", "messages", *names))
    if "collate" in ddl.lower() or reader.fetch_raw("PRAGMA encoding")[0][0] != b"UTF-8":
        return None
    # the session id must be what the pages hold first: the index's first key, the usage rows' first column
    firsts = {
        "idx_messages_session_active": "SELECT name FROM pragma_index_info(?) WHERE seqno = 0",
        "session_model_usage": "SELECT name FROM pragma_table_info(?) WHERE cid = 0",
    }
    for name, sql in firsts.items():
        if name in roots and [as_text(n) for (n,) in reader.fetch_raw(sql, (name,))] != ["session_id"]:
            return None
    return roots


def map_side(pages: Pages, roots: dict[str, int]) -> Tier2Pages:
    """The trees tier 2 reads: the index's interior pages walked, every usage leaf read once (the
    session ids of its rows), ``system_prompts`` whole."""
    index = usage = prompts = None
    sessions: dict[int, frozenset[bytes]] = {}
    if "idx_messages_session_active" in roots:
        index = IndexTree(roots["idx_messages_session_active"])
        walk_index(pages, index)
    if "session_model_usage" in roots:
        usage = SessionsTree(roots["session_model_usage"])
        pages.walk(usage)
        for page in usage.leaves:
            sessions[page] = frozenset(i for _, i in pages.leaf_cells(page, usage) if i is not None)
    if "system_prompts" in roots:
        prompts = map_pages(pages, SessionsTree(roots["system_prompts"]))
    return Tier2Pages(index, usage, sessions, prompts)


def side_writes(pages: Pages, side: Tier2Pages, new: set[int]) -> SideWrites:
    """What the pages written say of the trees tier 2 reads (the trees walked again, into new
    objects, where an interior page was written: a raced read is read again from the old ones)."""
    index = side.index
    ranges: list[Bound] = []
    index_ids: set[bytes] = set()
    leaves: dict[int, Entries] = {}
    if side.index is not None:
        before = side.index
        if new & before.interior or before.root in new:
            index = walk_again(pages, before, new)
        ranges, index_ids, leaves = _index_writes(pages, before, index or before, side.index_leaves, new)
    usage, usage_ids, overflow, sessions = side.usage, set(), set(), dict(side.usage_sessions)
    if side.usage is not None:
        old = side.usage
        usage = SessionsTree(old.root, overflow=dict(old.overflow), children=dict(old.children))
        if new & old.interior or old.root in new:
            pages.walk(usage, new)
        else:
            usage.interior, usage.leaves = old.interior, old.leaves
        usage_ids = {i for p in new for i in side.usage_sessions.get(p, ())}  # before
        for p in sorted(new & usage.leaves):  # after
            sessions[p] = frozenset(i for _, i in pages.leaf_cells(p, usage) if i is not None)
            usage_ids |= sessions[p]
        overflow = {usage.overflow[p] for p in new if p in usage.overflow}
    prompts = side.prompts
    touched = prompts is not None and bool(new & (prompts.interior | prompts.leaves | prompts.overflow.keys()))
    if prompts is not None and touched:
        prompts = map_pages(pages, SessionsTree(prompts.root))
    side = Tier2Pages(index, usage, sessions, prompts, leaves)
    return SideWrites(side, ranges, index_ids, usage_ids, overflow, touched)


def _index_writes(
    pages: Pages, before: IndexTree, after: IndexTree, known: dict[int, Entries], new: set[int]
) -> tuple[list[Bound], set[bytes], dict[int, Entries]]:
    """What the index pages written say: the session ids of the entries the index gained or lost
    on them (their entries as of the position, read from the pages, against those read when each
    was last written or walked: the pages not written hold the same entries), and the ranges of
    the pages whose entries are not known on one side (a leaf never read, or whose entries do not
    parse whole: every session in its range may have gained or lost one). The pages that joined
    or left the tree without being written count as written. And the leaves' entries known now
    (a leaf not written since keeps them)."""
    ranges: set[Bound] = set()
    was: Counter[bytes] = Counter()
    now: Counter[bytes] = Counter()
    leaves = {p: e for p, e in known.items() if p not in new and p in after.bounds and p not in after.interior}
    moved = set() if after is before else before.bounds.keys() ^ after.bounds.keys()  # walked again: a split, a merge
    for page in sorted(new | moved):
        was.update(_entries(page, before, known.get(page), ranges) or ())
        entries = _entries(page, after, None, ranges, pages)
        now.update(entries or ())
        if entries is not None and page in after.bounds and page not in after.interior:
            leaves[page] = entries
    if len(leaves) > MAX_LEAVES:  # a leaf not known is bounded by its range: the others dropped
        leaves = {p: e for p, e in leaves.items() if p in new}
    # an entry moved from one page written to another (a split, a merge) is in both: not a change
    return sorted(ranges, key=repr), {record_key(r) for r in (was - now) + (now - was)}, leaves


#: index leaves whose entries the map keeps (~10 KB each) beyond those written on the tick
MAX_LEAVES = 1024


def _entries(
    page: int, tree: IndexTree, known: Entries | None, ranges: set[Bound], pages: Pages | None = None
) -> Entries | None:
    """The entries of a page of the index on one side of the commits: an interior page's as the
    walk read them; a leaf's read from ``pages`` (as of the position), else ``known`` (as read
    when last written); empty when the page is not the index's then. None when not known: its
    range is added to ``ranges`` (every session in it may have moved)."""
    if page not in tree.bounds:
        return frozenset()
    if page in tree.interior:
        entries = tree.entries.get(page)
    elif pages is not None:
        entries = pages.index_entries(page)
    else:
        entries = known
    if entries is None:
        ranges.add(tree.bounds[page])
    return entries


def ranged_sessions(fp: Fingerprinter, writes: SideWrites) -> set[int] | None:
    """Rowids of the sessions whose index entries the pages written may have moved: those whose
    id lies in the range of an index page written whose entries are not known, and those of the
    entries a written leaf gained or lost (None: every session's may, as the range of a page
    written is the whole index; an empty set when the store has no index)."""
    if (None, None) in writes.ranges:
        return None
    select = "SELECT s.rowid FROM sessions AS s"
    rowids = {r for (r,) in fp.where_in(select, "s.id", _texts(writes.index_ids))}
    return rowids | {r for lo, hi in writes.ranges for r in _sessions_between(fp, lo, hi)}


def moved_days(fp: Fingerprinter, writes: SideWrites, tier1: Tier1, ranged: set[int] | None) -> set[str]:
    """The days whose tier 2 the pages written since the map may have moved, besides those of the
    ``sessions`` rows on them: of the sessions whose usage rows were or are on a usage leaf
    written (their ids read from the pages, as they were at the two positions), and of the
    sessions in the id range of an index page written; every day when a page of
    ``system_prompts`` was written."""
    if writes.prompts or ranged is None:
        return set(tier1.days)
    select = "SELECT u.rowid, s.rowid FROM session_model_usage AS u JOIN sessions AS s ON s.id = u.session_id"
    sessions = ranged | {r for _, r in fp.where_in(select, "u.rowid", sorted(writes.overflow_rows))}
    days = {d for d in fp.days_by_rowid(sessions).values() if d is not None}
    return days | {d for d in fp.days_of(_texts(writes.usage_ids)).values() if d is not None}


def _texts(keys: Iterable[bytes]) -> list[str]:
    """Session ids read from pages, as SQL compares them (UTF-8 text)."""
    try:
        return sorted(k.decode("utf-8") for k in keys)
    except UnicodeDecodeError as exc:
        raise Doubt("a session id on a page is not UTF-8") from exc


def _sessions_between(fp: Fingerprinter, lo: bytes | None, hi: bytes | None) -> list[int]:
    """Rowids of the sessions whose id lies in ``[lo, hi]`` (None: no bound), compared as the
    index compares them (UTF-8 text, BINARY: :func:`side_roots` checks both)."""
    where: list[str] = []
    params: list[str] = []
    for op, key in ((">=", lo), ("<=", hi)):
        if key is not None:
            where.append(f"id {op} ?{len(params) + 1}")
            params += _texts([key])
    return [r for (r,) in fp.reader.fetch_raw(f"SELECT rowid FROM sessions WHERE {' AND '.join(where)}", params)]
