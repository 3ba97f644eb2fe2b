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

The map, per store, kept in this process between ticks (:mod:`~hermes_assets.lib.changes.delta_map`) and learned on a tick
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
What the ``sessions`` pages cannot say is watched apart: the inactive count of each session
tier 1 counts it for (rewound, or without live messages: ``restore_rewound`` flips
``messages.active`` and no ``sessions`` cell), read again by rowid for the sessions
whose ``idx_messages_session_active`` entries the pages written moved (below), or of a row written;
the sessions no day holds by SQL (placed one by one) compared whole; ``system_prompts``
(schema 25+) by its rows' digest.

**Tier 2 kept**: the map also holds the other trees tier 2 reads, so that a rotation day none
of whose pages was written since keeps its digest (:mod:`~hermes_assets.lib.changes.tier2_pages`).

The same written pages give the rows of ``session_model_usage`` written since (the rowids on
every table leaf among them, :meth:`TickFiles.written_rowids`): the usage marks are read by
those rowids, not by a pass over the table.

A commit that races the tick's own reads is no doubt: the WAL restarted while its pages were
read, or a session committed after the frames were read and before the statements' snapshot
(the count of sessions disagrees with the days named) has the WAL read again and the delta run
again (:class:`~hermes_assets.lib.changes.sqlite_pages.Raced`, up to :data:`RETRIES` times),
and the map of a full pass read again from the WAL as it is then.

Any doubt falls back to the full tier 1 (and learns the map again): no map yet (a new
process), a cursor this process did not write, no ``-wal``, the salts changed (a checkpoint
that reset or restarted the WAL), the WAL shorter than the position read, the db file's inode
changed (or the file itself while the WAL was empty or gone), another schema cookie,
``auto_vacuum`` on (pages move), a page of the tree that is not an interior or leaf page of a
table, a cell that does not parse. The files' formats are read by
:mod:`hermes_assets.lib.changes.sqlite_pages`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.changes import delta_map
from hermes_assets.lib.changes.delta_map import DeltaMap
from hermes_assets.lib.changes.fingerprint import Fingerprinter, Tier1, digest
from hermes_assets.lib.changes.sqlite_pages import (
    Doubt,
    Pages,
    Raced,
    SessionsTree,
    WalFrames,
    map_pages,
    next_generation,
    old_tail,
    read_wal,
    wal_salts,
    written_rows,
)
from hermes_assets.lib.changes.tier2_pages import (
    SideWrites,
    Tier2Pages,
    map_side,
    moved_days,
    ranged_sessions,
    side_roots,
    side_writes,
)

log = get_logger()

T = TypeVar("T")


class TickFiles:
    """One tick's view of a store's files, taken before any SQL of the tick: the db file and its
    ``-wal`` opened read-only, the WAL's committed frames read, and the map of the last tick when
    it is still the store's (:meth:`tier1`). A context manager: closes the files."""

    def __init__(
        self,
        path: str,
        old_files: dict | None,
        old_tier1: dict[str, str] | None,
        old_tier2: dict[str, str | None] | None = None,
    ):
        self.path = path
        self.doubt: str | None = None
        self.map: DeltaMap | None = delta_map.take(
            path
        )  # taken: kept again only by :func:`~hermes_assets.lib.changes.delta_map.keep`
        #: days whose tier 2 this tick may keep from the cursor (:meth:`tier1` sets it)
        self.clean: frozenset[str] = frozenset()
        self.side: Tier2Pages | None = None
        self.new: set[int] | None = None
        self.wal: WalFrames | None = None
        self.learned: DeltaMap | None = None  # what this tick leaves for the next one
        self.db_fd = os.open(path, os.O_RDONLY)
        self.wal_fd: int | None = None
        self.db = _identity(self.db_fd)
        if self.map is not None and (old_files != self.map.files or old_tier1 != self.map.tier1):
            self.map, self.doubt = None, "the cursor is not the one the map was left with"
        elif self.map is not None and self.map.db[0] != self.db[0]:
            self.map, self.doubt = None, "the db file's inode changed"
        elif self.map is not None and old_tier2 != self.map.tier2:
            # a tier 2 the map did not leave (a rotation tick's since, or another cursor): a day
            # keeps its tier 2 only when the cursor holds the one the map knows as the store's
            old = old_tier2 or {}
            self.map.clean = frozenset(d for d in self.map.clean if old.get(d, "") == self.map.tier2.get(d))
        if self.map is None:
            self._read_wal(None)
            self.doubt = self.doubt or ("no WAL" if self.wal is None else "no map of this store yet")
        else:
            self.doubt = self._read_wal(self.map)
            if self.doubt is not None:
                self.map = None

    def _read_wal(self, m: DeltaMap | None) -> str | None:
        """Read the ``-wal`` as it is now (opened again: SQLite may have made a new one): the frames
        committed after the map's position, or every committed frame without a map. Why they do not
        name every page written since the map (None: they do)."""
        if self.wal_fd is not None:
            os.close(self.wal_fd)
        try:
            self.wal_fd = os.open(self.path + "-wal", os.O_RDONLY)
        except FileNotFoundError:
            self.wal_fd = None
        if self.wal_fd is None:  # no WAL: the db file holds every commit (as an empty WAL)
            read: tuple[WalFrames, set[int]] | None = (WalFrames(None, 0), set())
        else:
            read = read_wal(self.wal_fd, m.wal if m else None)
        if read is None:
            self.wal = self.new = None
            return "no WAL"
        self.wal, self.new = read
        return None if m is None else self._check(m)

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
        if not next_generation(old, wal):
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

    def settle(self, digested: set[str]) -> None:
        """After the tick's statements (tier 2 of ``digested`` computed): the days whose tier 2 the
        map left for the next tick may keep. The days digested join them only when no commit came
        during the tick (:meth:`quiet`): every statement then saw the state the pages read name,
        and any later change of their rows writes a page the next tick reads; after a commit
        that raced the tick, the days kept stay (their tier 2 is the store's as of the pages read:
        a page's sessions are read from the page), the days digested do not join them."""
        m = self.learned
        if m is not None:
            m.side = self.side
            m.clean = (self.clean | digested) if self.side is not None and self.quiet() else self.clean

    def quiet(self) -> bool:
        """No commit since the position of the map the tick leaves (the WAL's frames, its file
        and the db file as they were)."""
        m = self.learned
        if m is None or self.wal_fd is None or _identity(self.db_fd) != self.db:
            return False
        try:
            if os.stat(self.path + "-wal").st_ino != os.fstat(self.wal_fd).st_ino:
                return False
        except FileNotFoundError:
            return False
        read = read_wal(self.wal_fd, m.wal)
        return read is not None and read[0].salts == m.wal.salts and read[0].frames == m.wal.frames

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
        if wal_salts(self.wal_fd) != self.wal.salts:
            raise Raced("the WAL restarted while its pages were read")

    # -- a tick of a store whose map is known ----------------------------------------

    def tier1(self, fp: Fingerprinter) -> Tier1 | None:
        """Tier 1 of every day, digesting only the days the rows written since the map are on;
        None (``doubt`` says why) when the full pass must run. A commit that raced the tick's
        reads (:class:`Raced`) has the WAL read again and the delta run again, up to
        :data:`RETRIES` times: under a busy writer that costs one more delta, not the pass over
        every row and the map learned again (~0.8 s on the 1M store)."""
        m = self.map
        if m is None or self.new is None or self.wal is None:
            return None
        for attempt in range(RETRIES + 1):
            try:
                return self._delta(fp, m, self.new)
            except Raced as exc:
                self.doubt = str(exc)
                if attempt == RETRIES:
                    return None
                self.db = _identity(self.db_fd)
                again = self._read_wal(m)
                if again is not None or self.new is None:
                    self.doubt = again or self.doubt
                    return None
                log.debug("hermes.sensor.wal_delta_raced", path=self.path, reason=str(exc), attempt=attempt + 1)
            except Doubt as exc:
                self.doubt = str(exc)
                return None
        return None

    def _delta(self, fp: Fingerprinter, m: DeltaMap, new: set[int]) -> Tier1:
        def read() -> tuple[set[int], SideWrites | None]:
            pages = self._pages()
            return written_rows(pages, m.tree, new), None if m.side is None else side_writes(pages, m.side, new)

        rows, writes = self._settled(read)
        with fp.reader.snapshot():  # one state of the store for the statements below (the count's check)
            ranged = None if writes is None else ranged_sessions(fp, writes)
            tier1, days = self._digest_days(fp, m, rows, new, ranged)
            if writes is not None:
                self.side = writes.side
                self.clean = m.clean - days - moved_days(fp, writes, tier1, ranged)
            return tier1

    def written_rowids(self) -> set[int] | None:
        """After the delta: the rowids on every table leaf written since the map's position, of
        any table (the rows of ``session_model_usage`` written since are among them:
        :func:`~hermes_assets.lib.changes.usage_marks.usage_changes`). None: not known (no delta
        this tick, or the WAL restarted while they were read)."""
        if self.learned is None or self.new is None or self.map is None:
            return None
        new = self.new
        try:
            pages = self._pages()
            return self._settled(lambda: {r for page in sorted(new) for r in pages.rowids(page)})
        except Doubt:
            return None

    def _settled(self, read: Callable[[], T]) -> T:
        """``read()`` of pages, then the check that the WAL did not restart meanwhile: a page that
        does not parse because its frame was written over is a race (:class:`Raced`), not a doubt."""
        try:
            out = read()
        except Doubt:
            self._unmoved()
            raise
        self._unmoved()
        return out

    def _digest_days(
        self, fp: Fingerprinter, m: DeltaMap, rows: set[int], new: set[int], ranged: set[int] | None
    ) -> tuple[Tier1, set[str]]:
        """Tier 1, and the days of the ``sessions`` rows written (digested again).

        ``ranged``: the sessions whose index entries the pages written may have moved (None: any
        session's may): of the sessions tier 1 counts the inactive messages of, only those and the
        rows written are counted again (an inactive count moves only with an index entry of the
        session's id), the others keep theirs."""
        reader = fp.reader
        if _schema_version(fp) != m.schema_version:
            raise Doubt("the schema changed")
        if _prompts(fp) != m.prompts:
            raise Doubt("system_prompts changed")
        again = set(m.inactive) if ranged is None else m.inactive.keys() & (ranged | rows)
        inactive = {r: n for r, n in m.inactive.items() if r not in again} | _inactive(fp, sorted(again))
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
            # a session deleted, or one committed after the frames were read (the snapshot holds it)
            raise Raced("a session left a day the pages did not name (deleted)")
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
        return Tier1(tier1, total, unplaced, counts, seldom), days

    # -- a tick that read every row -------------------------------------------------

    def learn(self, fp: Fingerprinter, tier1: Tier1) -> None:
        """After the full pass: the map the next tick reads only the written pages with."""
        if self.wal is None or fp.started == "NULL" or not fp.by_started:
            return
        if fp.inactive != "0" and fp.seldom_where is None:
            return  # every session's inactive count is digested: not followed by page
        position = self.wal  # the frames the full pass saw at least: the next tick reads those after
        try:
            if fp.reader.fetch_raw("PRAGMA auto_vacuum")[0][0] != 0:
                return  # pages move between trees
            root = fp.reader.fetch_raw("SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = 'sessions'")
            if len(root) != 1 or not isinstance(root[0][0], int):
                return
            roots = side_roots(fp)
            tree, side = self._map_tree(root[0][0], roots)
        except Doubt as exc:
            log.debug("hermes.sensor.wal_delta_unmapped", path=self.path, reason=str(exc))
            return
        self.side = side
        marked = sorted({r for rs in tier1.seldom.values() for r in rs})
        self.learned = DeltaMap(
            {},
            self.db,
            position,
            _schema_version(fp),
            tree,
            dict(tier1.counts),
            fp.odd_sessions(),
            dict(tier1.seldom),
            _inactive(fp, marked),
            _prompts(fp),
            dict(tier1.days),
        )

    def _map_tree(self, root: int, roots: dict[str, int] | None) -> tuple[SessionsTree, Tier2Pages | None]:
        """The ``sessions`` tree (every leaf read once, its overflow chains mapped), and the trees
        tier 2 reads (``roots``, :func:`side_roots`; None: not mapped). A commit that
        raced the reads has the pages read again from the WAL as it is now, up to :data:`RETRIES`
        times: the structure is then a later one than the full pass saw, which is safe, as every
        page written after the position is read again by the next tick."""

        def read() -> tuple[SessionsTree, Tier2Pages | None]:
            pages = self._pages()
            return map_pages(pages, SessionsTree(root)), None if roots is None else map_side(pages, roots)

        for attempt in range(RETRIES + 1):
            try:
                return self._settled(read)
            except Raced:
                if attempt == RETRIES:
                    raise
                if self._read_wal(None) or self.wal is None:  # the WAL as it is now, the pages to read from
                    raise Doubt("no WAL") from None
        raise AssertionError("unreachable")


#: above this many days to digest, the pass over every row costs less
MAX_DAYS = 64
#: times a delta that a commit raced is read again before the pass over every row
RETRIES = 2


def _identity(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


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
