"""The ``sessions`` rows a store's commits wrote since the last tick, from its ``-wal`` (SPEC §8, D17).

Nothing in Hermes's ``sessions`` table says which row changed (no ``updated_at``), so tier 1
of :mod:`hermes_assets.lib.changes.fingerprint` digests every row on a tick whose files moved.
The store's own pages do say it: in WAL mode every commit appends the pages it wrote to the
``-wal`` file, as frames (SQLite's documented WAL format: a 32-byte header with the page size
and two salts, then per frame a 24-byte header, page number, database size after the commit
for a commit frame, the salts, checksums, and the page). While the WAL's salts and the db file's
inode stay the same, the committed frames after the last one a tick read name every page written
since (a checkpoint copies frames into the db file unchanged: its size and time may move). This
module maps those pages to the ``sessions`` rows on them, so that a tick digests only the days
those rows are on (:meth:`Fingerprinter.tier1` of those days).

The map, per store, kept in this process between ticks (:data:`_MAPS`) and learned on a tick
that read every row (a full tier 1): the ``sessions`` b-tree's interior pages, its leaf pages,
and its overflow pages with the rowid whose payload they continue (a same-size update of a
row with a long ``system_prompt``, e.g. a token count or a title of the same length, writes
only an overflow page: SQLite overwrites the payload in place). Pages are read from the WAL
frames read (the latest of each page) or the db file, the WAL read before any SQL of the tick,
so every statement sees at least those commits. A written page:

- an interior page of the tree: the tree is walked again from its root (a split or a merge);
- a leaf: every row on it is a candidate, and the overflow chains of its cells are mapped again;
- an overflow page: its row is a candidate;
- any other page (other tables and indexes, the freelist, page 1): nothing.

A candidate row's day is read by SQL; a row gone (deleted) is seen by the count of sessions:
the sum of the days' counts must be ``count(*)``, else the tick falls back to the full tier 1.
What the page map cannot see is watched apart: the inactive count of each session tier 1
counts it for (rewound, or without live messages: ``restore_rewound`` flips ``messages.active``
and no ``sessions`` cell), read again by rowid on every tick; the sessions no day holds by SQL
(placed one by one) compared whole; ``system_prompts`` (schema 25+) by its rows' digest.

Any doubt falls back to the full tier 1 (and learns the map again): no map yet (a new
process), a cursor this process did not write, no ``-wal``, the salts changed (a checkpoint
that reset or restarted the WAL), the WAL shorter than the position read, the db file's inode
changed (or the file itself while the WAL was empty or gone), another schema cookie, ``auto_vacuum`` on (pages move), a page of the tree
that is not an interior or leaf page of a table, a cell that does not parse.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.changes.fingerprint import Fingerprinter, Tier1, digest

log = get_logger()

_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER = 32
_FRAME_HEADER = 24
_TABLE_INTERIOR, _TABLE_LEAF = 0x05, 0x0D


class Doubt(Exception):
    """The delta cannot be trusted: the tick reads every row."""


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint at ``buf[i]``: (value, index after it)."""
    v = 0
    for j in range(8):
        c = buf[i + j]
        v = (v << 7) | (c & 0x7F)
        if c < 0x80:
            return v, i + j + 1
    return (v << 8) | buf[i + 8], i + 9


@dataclass
class WalFrames:
    """The committed frames of one WAL generation read so far."""

    salts: tuple[int, int] | None  # None: an empty WAL (no header yet, or truncated)
    page_size: int
    seq: int = 0  # the header's checkpoint sequence number
    size: int = 0  # the file's size when read
    extent: int = 0  # frames of this generation, committed or not
    frames: int = 0  # committed frames read (the position of the next tick)
    latest: dict[int, int] = field(default_factory=dict)  # page -> file offset of its latest frame's page


def read_wal(fd: int, known: WalFrames | None) -> tuple[WalFrames, set[int]] | None:
    """The frames committed after ``known`` (the pages they wrote), and the new position.

    ``known`` None or of another generation (other salts or page size): every committed frame
    of the file is read (``new`` is then every page in the WAL). None: no WAL to read (empty,
    or not a WAL).
    """
    head = os.pread(fd, _WAL_HEADER, 0)
    if len(head) < _WAL_HEADER:
        return (WalFrames(None, 0), set()) if os.fstat(fd).st_size == 0 else None
    magic, _version, page_size, seq, salt1, salt2 = struct.unpack(">6I", head[:24])
    if magic not in _WAL_MAGIC or page_size < 512 or page_size & (page_size - 1):
        return None
    salts = (salt1, salt2)
    wal = (
        WalFrames(salts, page_size, seq, frames=known.frames, latest=dict(known.latest))
        if known is not None and known.salts == salts and known.page_size == page_size
        else WalFrames(salts, page_size, seq)
    )
    step = _FRAME_HEADER + page_size
    size = wal.size = os.fstat(fd).st_size
    new: set[int] = set()
    pending: list[tuple[int, int]] = []
    n = wal.frames
    while True:
        off = _WAL_HEADER + n * step
        if off + step > size:
            break
        frame = os.pread(fd, 16, off)
        page, commit, s1, s2 = struct.unpack(">4I", frame)
        if (s1, s2) != salts:
            break
        pending.append((page, off + _FRAME_HEADER))
        n += 1
        if commit:  # a commit frame: every frame up to it is committed
            for p, at in pending:
                wal.latest[p] = at
                new.add(p)
            wal.frames = n
            pending = []
    wal.extent = n
    return wal, new


def old_tail(fd: int, old: WalFrames, new: WalFrames) -> set[int] | None:
    """The pages of ``old``'s frames committed after its position, read after the WAL restarted
    (``new``, the next generation, written from the file's start). None when some may be lost:
    the file was cut short since (a TRUNCATE checkpoint, a size limit), or the new generation
    has reached the position (it wrote over them).

    A restart follows a checkpoint that copied every frame into the db file (their pages are
    there now); the new generation writes from the first frame on, so the old frames after the
    position stay in the file until it reaches them.
    """
    if old.salts is None or new.page_size != old.page_size or new.salts is None:
        return None
    step = _FRAME_HEADER + old.page_size
    if os.fstat(fd).st_size < old.size or new.extent > old.frames:
        return None
    pages: set[int] = set()
    pending: list[int] = []
    n = old.frames
    while True:
        frame = os.pread(fd, 16, _WAL_HEADER + n * step)
        if len(frame) < 16:
            break
        page, commit, s1, s2 = struct.unpack(">4I", frame)
        if (s1, s2) != old.salts:
            break
        pending.append(page)
        n += 1
        if commit:
            pages.update(pending)
            pending = []
    # the new generation may have gone on writing while the headers were read
    head = os.pread(fd, _WAL_HEADER, 0)
    if len(head) < _WAL_HEADER or struct.unpack(">2I", head[16:24]) != new.salts:
        return None
    frame = os.pread(fd, 16, _WAL_HEADER + old.frames * step)
    if len(frame) == 16 and struct.unpack(">2I", frame[8:16]) == new.salts:
        return None
    return pages


@dataclass
class SessionsTree:
    """The pages of the ``sessions`` b-tree, as of the WAL position of a tick."""

    root: int
    interior: set[int] = field(default_factory=set)
    leaves: set[int] = field(default_factory=set)
    overflow: dict[int, int] = field(default_factory=dict)  # overflow page -> rowid
    children: dict[int, list[int]] = field(default_factory=dict)  # interior page -> its children


class Pages:
    """Pages of a store at a WAL position: from the latest committed frame read, else the db file."""

    def __init__(self, db_fd: int, wal_fd: int | None, wal: WalFrames | None, page_size: int, usable: int):
        self.db_fd, self.wal_fd, self.wal = db_fd, wal_fd, wal
        self.page_size, self.usable = page_size, usable

    def read(self, page: int, n: int | None = None) -> bytes:
        n = self.page_size if n is None else n
        at = self.wal.latest.get(page) if self.wal is not None else None
        if at is not None and self.wal_fd is not None:
            data = os.pread(self.wal_fd, n, at)
        else:
            data = os.pread(self.db_fd, n, (page - 1) * self.page_size)
        if len(data) != n:
            raise Doubt(f"page {page} cut short")
        return data

    def walk(self, tree: SessionsTree, written: set[int] | None = None) -> None:
        """Learn the tree's interior and leaf pages from its root, reading its interior pages only
        (a b-tree's leaves are all at one depth: the first child tells what its siblings are).
        ``written``: the pages written since the last walk; the others' children are known."""
        known = {} if written is None else {p: c for p, c in tree.children.items() if p not in written}
        tree.interior, tree.leaves, tree.children = set(), set(), {}
        level = [tree.root]
        while level:
            if level[0] not in known:
                kind = self.read(level[0], 101)[100 if level[0] == 1 else 0]
                if kind == _TABLE_LEAF:
                    tree.leaves.update(level)
                    return
                if kind != _TABLE_INTERIOR:
                    raise Doubt(f"page {level[0]} of the sessions tree is of type {kind:#x}")
            below: list[int] = []
            for page in level:
                if page in tree.interior or len(tree.interior) > 1 << 20:
                    raise Doubt("a cycle in the sessions tree")
                tree.interior.add(page)
                children = known.get(page)
                if children is None:
                    children = self._children(page)
                tree.children[page] = children
                below += children
            level = below

    def _children(self, page: int) -> list[int]:
        data = self.read(page)
        h = 100 if page == 1 else 0
        if data[h] != _TABLE_INTERIOR:
            raise Doubt(f"page {page} is not an interior page of the sessions tree")
        ncell = int.from_bytes(data[h + 3 : h + 5], "big")
        ptrs = struct.unpack_from(f">{ncell}H", data, h + 12)
        return [*(int.from_bytes(data[p : p + 4], "big") for p in ptrs), int.from_bytes(data[h + 8 : h + 12], "big")]

    def leaf_rows(self, page: int, tree: SessionsTree) -> list[int]:
        """The rowids on a leaf of the tree; maps the overflow pages of its cells."""
        data = self.read(page)
        h = 100 if page == 1 else 0
        if data[h] != _TABLE_LEAF:
            raise Doubt(f"page {page} is no longer a table leaf")
        u = self.usable
        max_local = u - 35
        min_local = ((u - 12) * 32 // 255) - 23
        ncell = int.from_bytes(data[h + 3 : h + 5], "big")
        rows = []
        for k in range(ncell):
            ptr = int.from_bytes(data[h + 8 + 2 * k : h + 10 + 2 * k], "big")
            size, i = varint(data, ptr)
            rowid, i = varint(data, i)
            if rowid >= 1 << 63:
                rowid -= 1 << 64
            rows.append(rowid)
            if size <= max_local:
                continue
            local = min_local + (size - min_local) % (u - 4)
            if local > max_local:
                local = min_local
            if i + local + 4 > len(data):
                raise Doubt(f"a cell of page {page} does not parse")
            nxt = int.from_bytes(data[i + local : i + local + 4], "big")
            left = size - local
            while left > 0:
                if nxt == 0:
                    raise Doubt(f"an overflow chain of page {page} ends early")
                tree.overflow[nxt] = rowid
                left -= u - 4
                nxt = int.from_bytes(self.read(nxt, 4), "big") if left > 0 else 0
        return rows


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


#: store path -> the map its last full read left (this process only)
_MAPS: dict[str, DeltaMap] = {}


def forget(path: str | None = None) -> None:
    """Drop the map of one store (or of all): its next tick reads every row."""
    if path is None:
        _MAPS.clear()
    else:
        _MAPS.pop(path, None)


class TickFiles:
    """One tick's view of a store's files, taken before any SQL of the tick: the db file and its
    ``-wal`` opened read-only, the WAL's committed frames read, and the map of the last tick when
    it is still the store's (:meth:`tier1`). A context manager: closes the files."""

    def __init__(self, path: str, old_files: dict | None, old_tier1: dict[str, str] | None):
        self.path = path
        self.doubt: str | None = None
        self.map: DeltaMap | None = _MAPS.pop(path, None)  # taken: kept again only by :func:`keep`
        self.new: set[int] | None = None
        self.wal: WalFrames | None = None
        self.learned: DeltaMap | None = None  # what this tick leaves for the next one
        self.db_fd = os.open(path, os.O_RDONLY)
        self.wal_fd: int | None = None
        st = os.fstat(self.db_fd)
        self.db = (st.st_ino, st.st_size, st.st_mtime_ns)
        try:
            self.wal_fd = os.open(path + "-wal", os.O_RDONLY)
        except FileNotFoundError:
            self.wal_fd = None
        if self.map is not None and (old_files != self.map.files or old_tier1 != self.map.tier1):
            self.map, self.doubt = None, "the cursor is not the one the map was left with"
        elif self.map is not None and self.map.db[0] != self.db[0]:
            self.map, self.doubt = None, "the db file's inode changed"
        if self.wal_fd is None:  # no WAL: the db file holds every commit (as an empty WAL)
            read: tuple[WalFrames, set[int]] | None = (WalFrames(None, 0), set())
        else:
            read = read_wal(self.wal_fd, self.map.wal if self.map else None)
        if read is None:
            self.map, self.doubt = None, self.doubt or "no WAL"
            return
        self.wal, self.new = read
        if self.map is not None:
            self.doubt = self._check(self.map)
            if self.doubt is not None:
                self.map = None
        elif self.doubt is None:
            self.doubt = "no map of this store yet"

    def _check(self, m: DeltaMap) -> str | None:
        """Why the frames read do not name every page written since the map (None: they do).

        The db file changes only by a checkpoint, which copies frames into it unchanged: its
        size and time may move while the WAL holds every frame after the position.
        """
        old, wal = m.wal, self.wal
        assert wal is not None and self.new is not None
        if wal.salts is None or old.salts is None:
            # no WAL, or an empty one, at either end: only an untouched db file tells that no
            # frame was written, copied into it and dropped in between
            return None if m.db == self.db else "the db file changed while the WAL was empty"
        if wal.salts == old.salts and wal.page_size == old.page_size:
            return "the WAL shrank" if wal.size < old.size else None
        if not _next_generation(old, wal):
            return "the WAL's salts changed (restarted more than once)"
        assert self.wal_fd is not None
        tail = old_tail(self.wal_fd, old, wal)
        if tail is None:
            return "the WAL's salts changed (a checkpoint reset it)"
        self.new |= tail
        return None

    def __enter__(self) -> TickFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.db_fd)
        if self.wal_fd is not None:
            os.close(self.wal_fd)

    def _pages(self) -> Pages:
        head = os.pread(self.db_fd, 100, 0)
        if len(head) < 100:
            raise Doubt("no db header")
        page_size = int.from_bytes(head[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        if self.wal is not None and self.wal.salts is not None and self.wal.page_size != page_size:
            raise Doubt("the WAL's page size is not the db's")
        return Pages(self.db_fd, self.wal_fd, self.wal, page_size, page_size - head[20])

    def _unmoved(self) -> None:
        """After pages were read from the WAL's frames: the WAL was not restarted meanwhile (a
        restart writes the new header before any frame), so no frame read was written over."""
        if self.wal is None or self.wal.salts is None or self.wal_fd is None:
            return
        head = os.pread(self.wal_fd, _WAL_HEADER, 0)
        if len(head) < _WAL_HEADER or struct.unpack(">2I", head[16:24]) != self.wal.salts:
            raise Doubt("the WAL restarted while its pages were read")

    # -- a tick of a store whose map is known ----------------------------------------

    def tier1(self, fp: Fingerprinter) -> Tier1 | None:
        """Tier 1 of every day, digesting only the days the rows written since the map are on;
        None (``doubt`` says why) when the full pass must run."""
        if self.map is None or self.new is None or self.wal is None:
            return None
        try:
            return self._delta(fp, self.map, self.new)
        except Doubt as exc:
            self.doubt = str(exc)
            return None

    def _delta(self, fp: Fingerprinter, m: DeltaMap, new: set[int]) -> Tier1:
        pages = self._pages()
        tree = m.tree
        if new & tree.interior or tree.root in new:  # a split, a merge, a root that grew a level
            pages.walk(tree, new)
        rows: set[int] = set()
        for page in sorted(new & tree.leaves):
            rows.update(pages.leaf_rows(page, tree))
        rows.update(tree.overflow[p] for p in new if p in tree.overflow and p not in tree.leaves)
        self._unmoved()
        with fp.reader.snapshot():  # one state of the store for the statements below (the count's check)
            return self._digest_days(fp, m, rows, new)

    def _digest_days(self, fp: Fingerprinter, m: DeltaMap, rows: set[int], new: set[int]) -> Tier1:
        reader = fp.reader
        if _schema_version(fp) != m.schema_version:
            raise Doubt("the schema changed")
        if _prompts(fp) != m.prompts:
            raise Doubt("system_prompts changed")
        inactive = _inactive(fp, sorted(m.inactive))
        rows.update(r for r, n in m.inactive.items() if inactive.get(r) != n)
        odd = fp.odd_sessions()
        if odd != m.odd:
            raise Doubt("the sessions placed one by one changed")
        days = {d for d in fp.days_by_rowid(rows).values() if d is not None}
        if len(days) > MAX_DAYS:
            raise Doubt(f"{len(days)} days to digest")
        part = fp.tier1(days)
        tier1 = {d: h for d, h in m.tier1.items() if d not in days} | part.days
        counts = {d: n for d, n in m.counts.items() if d not in days} | part.counts
        total = reader.fetch_raw("SELECT count(*) FROM sessions")[0][0]
        if sum(counts.values()) + len(odd) != total:
            raise Doubt("a session left a day the pages did not name (deleted)")
        seldom = {d: r for d, r in m.seldom.items() if d not in days} | part.seldom
        marked = {r for rs in seldom.values() for r in rs}
        known = {r: n for r, n in inactive.items() if r in marked}
        known |= _inactive(fp, sorted(marked - set(known)))
        unplaced = sum(1 for _, d in odd.values() if d is None)
        self.learned = DeltaMap(
            {},
            self.db,
            self.wal if self.wal is not None else m.wal,
            m.schema_version,
            m.tree,
            counts,
            odd,
            seldom,
            known,
            m.prompts,
            tier1,
        )
        log.debug("hermes.sensor.wal_delta", path=self.path, pages=len(new), rows=len(rows), days=len(days))
        return Tier1(tier1, total, unplaced, counts, seldom)

    # -- a tick that read every row -------------------------------------------------

    def learn(self, fp: Fingerprinter, tier1: Tier1) -> None:
        """After the full pass: the map the next tick reads only the written pages with."""
        if self.wal is None or fp.started == "NULL" or not fp.by_started:
            return
        if fp.inactive != "0" and fp.seldom_where is None:
            return  # every session's inactive count is digested: not followed by page
        try:
            if fp.reader.fetch_raw("PRAGMA auto_vacuum")[0][0] != 0:
                return  # pages move between trees
            root = fp.reader.fetch_raw("SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = 'sessions'")
            if len(root) != 1 or not isinstance(root[0][0], int):
                return
            pages = self._pages()
            tree = SessionsTree(root[0][0])
            pages.walk(tree)
            for page in tree.leaves:
                pages.leaf_rows(page, tree)
            self._unmoved()
        except Doubt as exc:
            log.debug("hermes.sensor.wal_delta_unmapped", path=self.path, reason=str(exc))
            return
        marked = sorted({r for rs in tier1.seldom.values() for r in rs})
        self.learned = DeltaMap(
            {},
            self.db,
            self.wal,
            _schema_version(fp),
            tree,
            dict(tier1.counts),
            fp.odd_sessions(),
            dict(tier1.seldom),
            _inactive(fp, marked),
            _prompts(fp),
            dict(tier1.days),
        )


def _next_generation(old: WalFrames, new: WalFrames) -> bool:
    """Whether ``new`` is the WAL restarted once after ``old``."""
    assert old.salts is not None and new.salts is not None
    return new.seq == (old.seq + 1) & 0xFFFFFFFF and new.salts[0] == (old.salts[0] + 1) & 0xFFFFFFFF


#: above this many days to digest, the pass over every row costs less
MAX_DAYS = 64


def keep(path: str, files: TickFiles, entry_files: dict | None, entry_tier1: dict[str, str]) -> None:
    """Keep what the tick learned for the next tick of ``path`` (the cursor entry it wrote)."""
    m = files.learned
    if m is not None and entry_files is not None and m.tier1 == entry_tier1:
        m.files = entry_files
        _MAPS[path] = m


def _schema_version(fp: Fingerprinter) -> int:
    return fp.reader.fetch_raw("PRAGMA schema_version")[0][0]


def _prompts(fp: Fingerprinter) -> str | None:
    if "system_prompts" not in fp.reader.tables:
        return None
    rows = fp.reader.fetch_raw("SELECT count(*), group_concat(hash, x'1f') FROM (SELECT hash FROM system_prompts)")
    return digest([rows[0]])


def _inactive(fp: Fingerprinter, rowids: list[int]) -> dict[int, int]:
    """rowid -> inactive count (what tier 1 adds for the session)."""
    if not rowids or fp.inactive == "0":
        return {r: 0 for r in rowids}
    return dict(fp.rows_by_rowid(f"SELECT s.rowid, {fp.inactive} FROM sessions AS s", rowids))
