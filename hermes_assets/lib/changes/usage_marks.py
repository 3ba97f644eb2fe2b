"""The marks of a store's ``session_model_usage`` rows: which sessions' usage was written since a tick.

``session_model_usage`` feeds the datasets (``usage_by_model``), and Hermes's
``record_auxiliary_usage`` writes only there, touching no ``sessions`` cell: tier 1 of
:mod:`hermes_assets.lib.changes.fingerprint` would not see it. Hermes writes a usage
row (``update_token_counts``, ``record_auxiliary_usage``) with ``last_seen`` = its
clock, taken inside the write, so rows written after a tick carry a later
``last_seen`` than any it saw. The marks are ``[max rowid, max last_seen, [[rowid,
last_seen], ...]]``, the last the rows of the final :data:`USAGE_MARGIN_S` seconds,
which the next tick reads again (two writers' clocks are a little apart) and
recognizes. A row changed some other way (raw SQL, a clock stepped back) is seen by
tier 2. Joining every usage row to its session's day on every tick would cost ~100 ms.
"""

from __future__ import annotations

from hermes_assets.lib.changes.fingerprint import Fingerprinter
from hermes_assets.lib.source.text_cells import as_text

#: above this many rowids written since the last tick, the usage marks read every usage row
MAX_WRITTEN_ROWIDS = 5000
#: usage rows of the last seconds before a tick's newest ``last_seen`` are read again by the next
USAGE_MARGIN_S = 2.0


def usage_changes(
    fp: Fingerprinter, marks: list | None, written: set[int] | None = None
) -> tuple[set[str], list | None]:
    """Sessions whose ``session_model_usage`` rows were written since ``marks``, and the new marks.

    Without ``written``: one pass over the table's small rows (~9 ms for 93k rows,
    13-40 ms on a busy machine). ``written``: the rowids on every table leaf the commits
    since the last tick wrote (:meth:`~hermes_assets.lib.changes.wal_delta.TickFiles.written_rowids`,
    any table's: a superset of the usage rows written). A row the pass would return was
    written since (on one of those leaves) or is in the last margin, so the same rows come
    back from those rowids and the margin's alone, by rowid, without the pass.
    """
    if not fp.usage_digest:
        return set(), None
    reader = fp.reader
    seen = "u.last_seen" if fp.usage_seen else "NULL"
    if marks is None:
        rows = reader.fetch_raw(f"SELECT max(u.rowid), max({seen}) FROM session_model_usage AS u")
        top, newest = rows[0]
        recent = (
            reader.fetch_raw(
                f"SELECT u.rowid, {seen} FROM session_model_usage AS u WHERE {seen} > ?", (newest - USAGE_MARGIN_S,)
            )
            if isinstance(newest, (int, float))
            else []
        )
        newest = newest if isinstance(newest, (int, float)) else None
        return set(), [top or 0, newest, sorted([r, t] for r, t in recent)]
    top, newest, recent = marks
    known = {(r, t) for r, t in recent}
    since = (top, (newest if newest is not None else float("inf")) - USAGE_MARGIN_S)
    select = f"SELECT u.rowid, u.session_id, {seen} FROM session_model_usage AS u"
    condition = f"(u.rowid > ?1 OR {seen} > ?2)"
    if written is None or len(written) > MAX_WRITTEN_ROWIDS:
        rows = reader.fetch_raw(f"{select} WHERE {condition}", since)
    else:
        rows = list(fp.where_in(select, "u.rowid", sorted(written | {r for r, _ in recent}), since, condition))
    changed = {str(as_text(sid)) for rowid, sid, t in rows if (rowid, t) not in known}
    top = max([top, *(r for r, _, _ in rows)])
    times = [t for _, _, t in rows if isinstance(t, (int, float))]  # a text cell: raw SQL, tier 2's
    newest = max([*times, *([newest] if newest is not None else [])], default=None)
    # every row of the new margin is in ``rows``: the statement's margin starts no later
    margin = [
        [r, t] for r, _, t in rows if newest is not None and isinstance(t, (int, float)) and t > newest - USAGE_MARGIN_S
    ]
    return changed, [top, newest, sorted(margin)]
