"""What a SQLite store's own files say, read from them read-only: WAL frames and b-tree pages.

SQLite's documented file formats, the parts :mod:`hermes_assets.lib.changes.wal_delta` needs: the
``-wal`` file's committed frames (a 32-byte header with the page size and two salts, then per
frame a 24-byte header, page number, database size after the commit for a commit frame, the
salts, checksums, and the page), and a table's b-tree (interior pages, leaves and their cells'
rowids, overflow chains), each page read from the latest committed frame that holds it, else
from the db file. Files are opened ``O_RDONLY`` by the caller; nothing here writes. Whatever does
not parse raises :class:`Doubt`.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER = 32
_FRAME_HEADER = 24
_TABLE_INTERIOR, _TABLE_LEAF = 0x05, 0x0D
INDEX_INTERIOR, INDEX_LEAF = 0x02, 0x0A


class Doubt(Exception):
    """The delta cannot be trusted: the tick reads every row."""


class Raced(Doubt):
    """A commit came between two reads of the tick (the WAL restarted while its pages were read, a
    session appeared after its frames were read): the same reads again, from the WAL as it is now,
    may well agree."""


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint at ``buf[i]``: (value, index after it)."""
    v = 0
    for j in range(8):
        c = buf[i + j]
        v = (v << 7) | (c & 0x7F)
        if c < 0x80:
            return v, i + j + 1
    return (v << 8) | buf[i + 8], i + 9


def short_varint(buf: bytes, i: int) -> tuple[int, int]:
    """:func:`varint`, its one- to three-byte values (a cell's size, a rowid below 2 million)
    decoded inline: the maps read some 100,000 cells."""
    a = buf[i]
    if a < 0x80:
        return a, i + 1
    b = buf[i + 1]
    if b < 0x80:
        return ((a & 0x7F) << 7) | b, i + 2
    c = buf[i + 2]
    if c < 0x80:
        return ((a & 0x7F) << 14) | ((b & 0x7F) << 7) | c, i + 3
    return varint(buf, i)


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


#: the text of an index key's first column, as the interior pages above an index page bound it
Bound = tuple[bytes | None, bytes | None]
#: the entries on a page of an index whose first column is text: their records
Entries = frozenset[bytes]


@dataclass
class IndexTree:
    """The pages of an index b-tree whose first column is text (``idx_messages_session_active``),
    each with the range of that column its entries lie in: the first columns of the divider
    entries of the interior pages above it, both ends included (None: no bound)."""

    root: int
    interior: set[int] = field(default_factory=set)
    bounds: dict[int, Bound] = field(default_factory=dict)  # every page of the tree -> its range
    #: interior page -> its children, each with the first column of the divider after it
    dividers: dict[int, list[tuple[int, bytes | None]]] = field(default_factory=dict)
    #: interior page -> its own entries (the dividers: an index's interior cells are entries)
    entries: dict[int, Entries] = field(default_factory=dict)


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

    def index_dividers(self, page: int) -> tuple[list[tuple[int, bytes | None]], Entries]:
        """An index interior page's children, each with the first column (text) of the divider
        entry after it (None for the right-most child); and its entries."""
        data, ptrs, max_local = self._index_cells(page, INDEX_INTERIOR)
        out: list[tuple[int, bytes | None]] = []
        entries = set()
        try:
            for ptr in ptrs:
                size, i = varint(data, ptr + 4)
                header, j = varint(data, i)
                kind = varint(data, j)[0]
                if size > max_local or kind < 13 or kind % 2 == 0 or i + size > len(data):
                    raise Doubt(f"a key of index page {page} is not a short text")  # it overflows, or not text
                key = bytes(data[i + header : i + header + (kind - 13) // 2])
                out.append((int.from_bytes(data[ptr : ptr + 4], "big"), key))
                entries.add(bytes(data[i : i + size]))
        except IndexError as exc:
            raise Doubt(f"a cell of page {page} does not parse") from exc
        h = 100 if page == 1 else 0
        return [*out, (int.from_bytes(data[h + 8 : h + 12], "big"), None)], frozenset(entries)

    def _index_cells(self, page: int, kind: int) -> tuple[bytes, tuple[int, ...], int]:
        """A page of an index that must be of ``kind`` (interior or leaf): its bytes, its cells'
        offsets, and the largest record a cell holds whole on it."""
        data = self.read(page)
        h = 100 if page == 1 else 0
        if data[h] != kind:
            raise Doubt(f"page {page} is no longer an index page of type {kind:#x}")
        ncell = int.from_bytes(data[h + 3 : h + 5], "big")
        try:
            ptrs = struct.unpack_from(f">{ncell}H", data, h + (12 if kind == INDEX_INTERIOR else 8))
        except struct.error as exc:
            raise Doubt(f"the cells of page {page} do not parse") from exc
        return data, ptrs, ((self.usable - 12) * 64 // 255) - 23

    def index_entries(self, page: int) -> Entries | None:
        """The entries on a leaf of an index whose first column is text (their records); None when
        one is not held whole on the page (its record overflows) or its first column is not text:
        the caller then bounds the leaf by its dividers."""
        data, ptrs, max_local = self._index_cells(page, INDEX_LEAF)
        out = set()
        try:
            for ptr in ptrs:
                size, i = short_varint(data, ptr)
                if size > max_local or i + size > len(data):
                    return None
                record = bytes(data[i : i + size])
                if _first_text(record, 0, size, page) is None:
                    return None
                out.add(record)
        except IndexError as exc:
            raise Doubt(f"a cell of page {page} does not parse") from exc
        return frozenset(out)

    def _children(self, page: int) -> list[int]:
        data = self.read(page)
        h = 100 if page == 1 else 0
        if data[h] != _TABLE_INTERIOR:
            raise Doubt(f"page {page} is not an interior page of the sessions tree")
        ncell = int.from_bytes(data[h + 3 : h + 5], "big")
        ptrs = struct.unpack_from(f">{ncell}H", data, h + 12)
        return [*(int.from_bytes(data[p : p + 4], "big") for p in ptrs), int.from_bytes(data[h + 8 : h + 12], "big")]

    def rowids(self, page: int) -> list[int]:
        """The rowids on a page when it is a table leaf, of any table (none for another kind of page)."""
        data = self.read(page)
        h = 100 if page == 1 else 0
        if data[h] != _TABLE_LEAF:
            return []
        ncell = int.from_bytes(data[h + 3 : h + 5], "big")
        rows = []
        try:
            for ptr in struct.unpack_from(f">{ncell}H", data, h + 8):
                rowid = varint(data, varint(data, ptr)[1])[0]
                rows.append(rowid - (1 << 64) if rowid >= 1 << 63 else rowid)
        except (IndexError, struct.error) as exc:
            raise Doubt(f"a cell of page {page} does not parse") from exc
        return rows

    def leaf_rows(self, page: int, tree: SessionsTree) -> list[int]:
        """The rowids on a leaf of the tree; maps the overflow pages of its cells."""
        return [rowid for rowid, _ in self.leaf_cells(page, tree, first=False)]

    def leaf_cells(self, page: int, tree: SessionsTree, first: bool = True) -> list[tuple[int, bytes | None]]:
        """The rows on a leaf of the tree: each rowid, with its first column when that is text
        (None when it is not, or not ``first``); maps the overflow pages of its cells."""
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
            size, i = short_varint(data, ptr)
            rowid, i = short_varint(data, i)
            if rowid >= 1 << 63:
                rowid -= 1 << 64
            local = size
            if size > max_local:
                local = min_local + (size - min_local) % (u - 4)
                local = min_local if local > max_local else local
            rows.append((rowid, _first_text(data, i, local, page) if first else None))
            if size <= max_local:
                continue
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


def _first_text(data: bytes, i: int, local: int, page: int) -> bytes | None:
    """The first column of the record at ``data[i:]`` (``local`` bytes of it on the page) when
    it is text; None when it is of another type."""
    try:
        header, kind = data[i], data[i + 1]
        if header >= 0x80 or kind >= 0x80:  # not one byte each (a short text's are)
            header, j = varint(data, i)
            kind = varint(data, j)[0]
    except IndexError as exc:
        raise Doubt(f"a cell of page {page} does not parse") from exc
    if kind < 13 or kind % 2 == 0:
        return None
    end = header + (kind - 13) // 2
    if header > local or end > local:
        raise Doubt(f"a first column on page {page} overflows")
    return data[i + header : i + end]


def record_key(record: bytes) -> bytes:
    """The first column (text) of an index entry's whole record (:data:`Entries`)."""
    key = _first_text(record, 0, len(record), 0)
    if key is None:
        raise Doubt("an index entry's first column is not text")
    return key


def next_generation(old: WalFrames, new: WalFrames) -> bool:
    """Whether ``new`` is the WAL restarted once after ``old``."""
    assert old.salts is not None and new.salts is not None
    return new.seq == (old.seq + 1) & 0xFFFFFFFF and new.salts[0] == (old.salts[0] + 1) & 0xFFFFFFFF


def wal_salts(fd: int) -> tuple[int, int] | None:
    """The salts the WAL's header holds now (None: no header): a restart writes a new header
    before any frame."""
    head = os.pread(fd, _WAL_HEADER, 0)
    return struct.unpack(">2I", head[16:24]) if len(head) >= _WAL_HEADER else None


def map_pages(pages: Pages, tree: SessionsTree) -> SessionsTree:
    """``tree`` from its root: every interior page walked, every leaf read once (its overflow chains)."""
    pages.walk(tree)
    for page in tree.leaves:
        pages.leaf_rows(page, tree)
    return tree


def written_rows(pages: Pages, tree: SessionsTree, new: set[int]) -> set[int]:
    """The rowids on the written leaves and overflow pages of the tree (walked again first when
    an interior page was written)."""
    if new & tree.interior or tree.root in new:  # a split, a merge, a root that grew a level
        pages.walk(tree, new)
    rows: set[int] = set()
    for page in sorted(new & tree.leaves):
        rows.update(pages.leaf_rows(page, tree))
    rows.update(tree.overflow[p] for p in new if p in tree.overflow and p not in tree.leaves)
    return rows
