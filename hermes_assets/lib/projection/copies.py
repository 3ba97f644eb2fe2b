"""One logical message, several rows: the copies Hermes makes (SPEC D20, schema 23+).

Hermes v0.22 copies message rows. In-place compaction archives the originals
(``active=0, compacted=1``) and re-inserts live copies; it clones the carried
tail and leaves those originals ``active=0, compacted=0`` (the flags of an
undo); a rotation copies the hand-off messages into the child session, live
in both. Its transcript shows each *logical message* once (its display view
folds them by ``display_identity``). Every row is kept whole in every dataset;
this module only says, of each row, whether it is a copy and of which row.

Rows are generations of one logical message when they

* share a non-null ``message_uid`` (anywhere among the rows read), or
* lie in one session, or in a session and its parent, and share a non-null
  ``display_identity``, or, where either has none, the same
  (``role``, ``content``, ``timestamp``, ``tool_call_id``, ``tool_calls``,
  ``tool_name``): Hermes's own display key.

Grouping is transitive. The row with the lowest ``mid`` is the message; every
other row is ``copy_of = "<scoped sid>-<mid>"`` of it. An inactive row with a
later active generation is ``superseded`` (not a rewind).

Which stores: those a Hermes of schema 23 or later has opened, seen by their
``messages`` columns (any column schema 22 lacks). A store written by
hermes-agent 0.19 (schema 22) is read exactly as before: nothing is grouped.
A 0.19 store upgraded in place has the columns; its old rows carry no uid and
no identity, so they group by the display key.

The rows read: the day's sessions, whole, and the identity columns of their
ancestors on other days (one statement per day, in the day's read
transaction): a rotation child's hand-off rows are copies of its parent's. A
row's marks therefore depend only on its session and its ancestors, never on
sessions that come later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hermes_assets.lib.basics import ids

#: mid -> (copy_of, superseded), for the rows that are a copy or superseded
Marks = dict[int, tuple[str | None, bool]]


def _active(value: object) -> bool:
    return value is None or bool(value)  # ``active IS NULL`` means active (SPEC §1)


def mark(
    sessions: Iterable[tuple[str, list[dict]]],
    ancestors: Iterable[tuple],
    parents: dict[str, str | None],
    scoped: Callable[[str], str],
) -> dict[str, Marks]:
    """The copies among the day's rows.

    ``sessions``: the day's sessions, ``(sid, messages as dicts)``; ``ancestors``: the
    rows of their ancestors on other days, tuples in :data:`~hermes_assets.lib.source.columns.IDENTITY_COLUMNS` order;
    ``parents``: sid -> parent sid, for both; ``scoped``: sid -> scoped sid (SPEC §1).
    -> sid -> :data:`Marks` for each of the day's sessions.
    """
    sids: list[str] = []
    rows: list[tuple] = []  # IDENTITY_COLUMNS order, session id as a string
    day: dict[str, range] = {}
    for sid, messages in sessions:
        start = len(rows)
        for m in messages:
            sids.append(sid)
            rows.append(
                (
                    m["id"],
                    sid,
                    m["role"],
                    m["content"],
                    m["timestamp"],
                    m["tool_call_id"],
                    m["tool_calls"],
                    m["tool_name"],
                    m["active"],
                    m.get("message_uid"),
                    m.get("display_identity"),
                )
            )
        day[sid] = range(start, len(rows))
    for row in ancestors:
        sids.append(str(row[1]))
        rows.append(row)
    groups = _Groups(len(rows))
    _by_uid(rows, groups)
    _by_identity(rows, sids, parents, groups)
    _by_display_key(rows, sids, parents, groups)

    roots = [groups.find(i) for i in range(len(rows))]
    first: dict[int, int] = {}  # group -> its row with the lowest mid
    last_active: dict[int, int] = {}  # group -> the highest mid of its active rows
    for i, (row, g) in enumerate(zip(rows, roots)):
        mid = row[0]
        head = first.get(g)
        if head is None or mid < rows[head][0]:
            first[g] = i
        if _active(row[8]) and mid > last_active.get(g, mid - 1):
            last_active[g] = mid
    out: dict[str, Marks] = {}
    for sid, span in day.items():
        marks: Marks = {}
        for i in span:
            g = roots[i]
            head = first[g]
            mid, active = rows[i][0], rows[i][8]
            superseded = active is not None and not active and last_active.get(g, mid) > mid
            if head != i or superseded:
                marks[mid] = (None if head == i else ids.copy_of(scoped(sids[head]), rows[head][0]), superseded)
        out[sid] = marks
    return out


def columns(messages: list[dict], marks: Marks | None, *, grouped: bool) -> tuple[list, list]:
    """``hermes_messages.copy_of`` and ``superseded`` of a session's rows: NULL for a store
    before schema 23 (not ``grouped``), else the copy's first row and true/false."""
    n = len(messages)
    if not grouped:
        return [None] * n, [None] * n
    if not marks:
        return [None] * n, [False] * n
    none = (None, False)
    marked = [marks.get(msg["id"], none) for msg in messages]
    return [c for c, _ in marked], [s for _, s in marked]


class _Groups:
    """Union-find over row positions (path halving)."""

    def __init__(self, n: int):
        self.up = list(range(n))

    def find(self, i: int) -> int:
        up = self.up
        while up[i] != i:
            up[i] = up[up[i]]
            i = up[i]
        return i

    def join(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            self.up[max(a, b)] = min(a, b)


def _by_uid(rows: list[tuple], groups: _Groups) -> None:
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        uid = row[9]
        if uid is not None and uid != "":
            j = seen.setdefault(uid, i)
            if j != i:
                groups.join(i, j)


def _by_identity(rows: list[tuple], sids: list[str], parents: dict[str, str | None], groups: _Groups) -> None:
    """Same ``display_identity`` in one session, or in a session and its parent."""
    seen: dict[tuple, int] = {}
    for i, row in enumerate(rows):
        identity = row[10]
        if identity is not None:
            j = seen.setdefault((sids[i], identity), i)
            if j != i:
                groups.join(i, j)
    for (sid, identity), i in seen.items():
        parent = parents.get(sid)
        if parent is not None and (parent, identity) in seen:
            groups.join(i, seen[(parent, identity)])


def _by_display_key(rows: list[tuple], sids: list[str], parents: dict[str, str | None], groups: _Groups) -> None:
    """Same display key, where either row has no ``display_identity``.

    Only sessions next to a row without an identity need the key (a store written
    by v0.22 gives every row one), so content is hashed only where it can matter.
    """
    lacking = {sids[i] for i, row in enumerate(rows) if row[10] is None}
    if not lacking:
        return
    near = lacking | {parents.get(sid) for sid in lacking} | {sid for sid in set(sids) if parents.get(sid) in lacking}
    buckets: dict[tuple, list[int]] = {}
    without: set[tuple] = set()  # the buckets holding a row without identity
    for i, row in enumerate(rows):
        sid = sids[i]
        if sid in near:
            key = (sid, row[2:8])
            buckets.setdefault(key, []).append(i)
            if row[10] is None:
                without.add(key)
    for key in without:  # a row without identity matches every row of its bucket
        members = buckets[key]
        for i in members[1:]:
            groups.join(members[0], i)
    for (sid, display_key), members in buckets.items():
        parent = parents.get(sid)
        other = buckets.get((parent, display_key)) if parent is not None else None
        if other is None:
            continue
        if (sid, display_key) in without:
            for i in other:
                groups.join(members[0], i)
        elif (parent, display_key) in without:
            for i in members:
                groups.join(other[0], i)
