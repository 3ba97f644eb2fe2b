"""An index tree's pages and their ranges, walked from its root, or again where pages were written.

A tick that wrote an interior page of ``idx_messages_session_active`` (a leaf split, a merge) walked
the whole tree again: ~12,500 leaves' ranges rebuilt on the 1M store, ~3 ms (p95 ~18 ms, with
the collections of its tuples), for the few dozen pages under the one interior page a split writes. :func:`walk_again` walks only the subtrees of
the topmost interior pages written: a page none of whose ancestors was written keeps its place,
its range (its parent's dividers are those it had) and its children. Whatever it doubts (a page
twice, a subtree whose leaves are not at their old depth) falls back to the whole walk.
"""

from __future__ import annotations

from hermes_assets.lib.changes.sqlite_pages import INDEX_INTERIOR, INDEX_LEAF, Bound, Doubt, Entries, IndexTree, Pages

#: interior page -> its dividers and entries, as read when it was last walked (not written since)
Known = dict[int, tuple[list[tuple[int, bytes | None]], Entries]]


def walk_index(pages: Pages, tree: IndexTree, written: set[int] | None = None) -> None:
    """Learn an index tree's pages and their ranges from its root, reading its interior pages
    only (a b-tree's leaves are all at one depth: the first child tells what its siblings are).
    ``written``: the pages written since the last walk; the others' dividers are known."""
    known = {} if written is None else _known(tree, written)
    tree.interior, tree.bounds, tree.dividers, tree.entries = set(), {}, {}, {}
    _walk(pages, tree, [(tree.root, (None, None))], known)


def walk_again(pages: Pages, before: IndexTree, written: set[int]) -> IndexTree:
    """``before`` walked again into a new tree (``before`` is left as it was): the subtrees of the
    topmost interior pages written walked, the pages their old subtrees held and the new ones do
    not dropped, every other page kept with its range; the whole walk when the root was written
    (a root split raises the depth) or on any doubt."""
    after = IndexTree(before.root, dividers=before.dividers, entries=before.entries)
    if before.root not in written:
        try:
            if _rewalk(pages, before, written, after):
                return after
        except Doubt:
            pass  # a read raced or a page moved where no write says it could: the whole walk tells
        after = IndexTree(before.root, dividers=before.dividers, entries=before.entries)
    walk_index(pages, after, written)
    return after


def _rewalk(pages: Pages, before: IndexTree, written: set[int], after: IndexTree) -> bool:
    """Walk the subtrees of the topmost interior pages written into ``after``, a copy of
    ``before`` but for their old subtrees. False when the result may not be the whole walk's: a
    page both kept and walked, or twice, a subtree whose leaves are not at their old depth."""
    above = [p for p in before.interior if before.dividers[p][0][0] in before.interior]  # not those above leaves
    parent = {c: p for p in above for c, _ in before.dividers[p]}
    tops = sorted(p for p in written & before.interior if not _ancestors(parent, p) & written)
    after.interior, after.bounds = set(before.interior), dict(before.bounds)
    after.dividers, after.entries = dict(before.dividers), dict(before.entries)
    depths = [_drop(before, top, after) for top in tops]
    kept, known = len(after.bounds), _known(before, written)
    walks = [_walk(pages, after, [(top, before.bounds[top])], known) for top in tops]
    return [d for _, d in walks] == depths and len(after.bounds) == kept + sum(n for n, _ in walks)


def _ancestors(parent: dict[int, int], page: int) -> set[int]:
    out: set[int] = set()
    while page in parent and len(out) <= len(parent):
        page = parent[page]
        out.add(page)
    return out


def _drop(tree: IndexTree, top: int, into: IndexTree) -> int:
    """Drop from ``into`` the pages of ``top``'s subtree as ``tree`` has it; the number of
    interior levels from ``top`` down."""
    level, depth = [top], 0
    while True:
        for page in level:
            into.bounds.pop(page, None)
        if level[0] not in tree.interior:
            return depth
        for page in level:
            into.interior.discard(page)
            del into.dividers[page], into.entries[page]
        level, depth = [c for p in level for c, _ in tree.dividers[p]], depth + 1


def _known(tree: IndexTree, written: set[int]) -> Known:
    return {p: (d, tree.entries[p]) for p, d in tree.dividers.items() if p not in written}


def _walk(pages: Pages, tree: IndexTree, level: list[tuple[int, Bound]], known: Known) -> tuple[int, int]:
    """Add to ``tree`` the pages from ``level`` (pages of one depth, with their ranges) down to
    the leaves: the number of pages added, and of interior levels."""
    added = depth = 0
    while True:
        tree.bounds.update(level)
        added += len(level)
        if level[0][0] not in known:
            kind = pages.read(level[0][0], 101)[100 if level[0][0] == 1 else 0]
            if kind == INDEX_LEAF:
                return added, depth
            if kind != INDEX_INTERIOR:
                raise Doubt(f"page {level[0][0]} of an index is of type {kind:#x}")
        below: list[tuple[int, Bound]] = []
        for page, (lo, hi) in level:
            if page in tree.interior or len(tree.interior) > 1 << 20:
                raise Doubt("a cycle in an index")
            tree.interior.add(page)
            dividers, tree.entries[page] = known.get(page) or pages.index_dividers(page)
            tree.dividers[page] = dividers
            for child, key in dividers:  # the right-most child: up to the page's own bound
                below.append((child, (lo, hi if key is None else key)))
                lo = key
        level, depth = below, depth + 1
