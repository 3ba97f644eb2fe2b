"""The rows the analytics count, and what a day of one analytics dataset is.

The captured datasets keep rows Hermes later deleted (flagged
``source_deleted``, D13) and every generation of a message Hermes copied
(``copy_of``, D20). The analytics describe what the store holds now: every
one of them leaves the deleted rows out (:func:`in_store`), and most count
each logical message once (:func:`live`); the figures that Hermes's own
report counts over every stored row keep the copies (the skills, Hermes's
tool counts).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.ipc import IpcTable
from hermes_assets.lib.basics.schemas import GATEWAY
from hermes_assets.lib.warehouse.retention import source_deleted_mask


@dataclass
class DayFigures:
    """One day of one analytics dataset: its rows and its totals."""

    table: pa.Table
    totals: dict[str, int | float] = field(default_factory=dict)

    def __reduce__(self) -> tuple[Callable[[IpcTable, dict[str, int | float]], DayFigures], tuple[Any, ...]]:
        """Pickled with its rows as an Arrow IPC stream: a capture's worker hands every day's figures
        to the run (:mod:`~hermes_assets.lib.analytics.captured_days`), which loads them on the thread
        that receives the workers' days, beside the days it projects itself."""
        return _day_figures, (IpcTable.of(self.table), self.totals)


def _day_figures(table: IpcTable, totals: dict[str, int | float]) -> DayFigures:
    return DayFigures(table.table(), totals)


def live(table: pa.Table, dataset: str) -> pa.Table:
    """The rows not flagged ``source_deleted`` (D13), each logical message once (no copies,
    D20): what the store holds now."""
    if table.num_rows == 0 or (dataset == GATEWAY and not pc.any(_marked(table)).as_py()):
        return table  # no canonical row may hold either mark (most days): neither mask asked
    drop = pc.or_(source_deleted_mask(dataset, table), copy_mask(dataset, table))
    return table.filter(pc.invert(drop)) if pc.any(drop).as_py() else table


def tool_parts(gateway: pa.Table) -> pa.Table:
    """The canonical tool parts (``tool_call`` and ``tool_result``) the store holds now, each logical
    part once (:func:`live`): what the tools and the sessions' tool calls count, found once a day."""
    if gateway.num_rows == 0:  # no value set to convert (pyarrow's first conversion imports pandas)
        return gateway
    parts = gateway.filter(pc.is_in(gateway.column("part_type"), value_set=pa.array(["tool_call", "tool_result"])))
    return live(parts, GATEWAY)  # the tool parts, then those the store holds now: the same rows, cheaper


def in_store(table: pa.Table, dataset: str) -> pa.Table:
    """The rows not flagged ``source_deleted`` (D13), copies included: every row the store holds now."""
    if table.num_rows == 0:
        return table
    drop = source_deleted_mask(dataset, table)
    return table.filter(pc.invert(drop)) if pc.any(drop).as_py() else table


#: the tail of each mark a canonical row's ``attributes`` holds when it is flagged ``source_deleted``
#: or is a copy (a superset: :func:`source_deleted_mask` and :func:`copy_mask` decide). Each from
#: its ``_``: RE2 skips ahead to that byte, rarer than the quote a mark starts with, and two such
#: searches take half the time of one alternation of both marks (which reads every byte)
_MARK_TAILS = (re.escape('_deleted":true'), re.escape('_of":'))


def _marked(table: pa.Table) -> pa.ChunkedArray:
    """Which canonical rows may be flagged ``source_deleted`` or be copies (null: no attributes)."""
    text = schemas.storage_of(table.column("attributes"))
    return pc.or_(*(pc.match_substring_regex(text, tail) for tail in _MARK_TAILS))


def copy_mask(dataset: str, table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Which rows are copies of an earlier generation of their logical message (D20): a raw
    row's ``copy_of``, a canonical row's ``attributes.hermes.copy_of``; all false for a
    dataset without them."""
    if dataset == GATEWAY and "attributes" in table.column_names:
        text = schemas.storage_of(table.column("attributes"))
        # the key is written compact (SPEC §5.5); inside a JSON string its quotes would be escaped
        return pc.fill_null(holds(text, '"copy_of":'), False)
    if "copy_of" in table.column_names:
        return pc.is_valid(table.column("copy_of"))
    return pa.repeat(pa.scalar(False), table.num_rows)


def holds(text: pa.ChunkedArray | pa.Array, literal: str) -> pa.ChunkedArray | pa.Array:
    """Which cells hold ``literal`` (null for a null cell): Arrow's ``match_substring``, searched by
    RE2, whose literal search is faster than Arrow's plain matcher (for a word, several times)."""
    return pc.match_substring_regex(text, re.escape(literal))


def only(table: pa.Table, columns: list[str]) -> pa.Table:
    """Those of ``columns`` the table has (a filter copies every column it keeps: the others are
    left out first)."""
    present = set(table.column_names)
    return table.select([c for c in columns if c in present])


def count_by(table: pa.Table, keys: list[str]) -> dict[tuple, int]:
    """How many rows hold each combination of ``keys``' values."""
    if table.num_rows == 0:
        return {}
    lead = [table.column(k) for k in keys[:-1]]
    if all(pc.count_distinct(column, mode="all").as_py() == 1 for column in lead):
        # one value in each but the last key (a day of one host's store; one key): Arrow's hash count of
        # the last, without a query plan
        fixed = tuple(column[0].as_py() for column in lead)
        counts = pc.value_counts(table.column(keys[-1])).flatten()
        return {(*fixed, key): n for key, n in zip(counts[0].to_pylist(), counts[1].to_pylist())}
    counts = table.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    columns = [counts.column(k).to_pylist() for k in keys]
    return {tuple(key): n for *key, n in zip(*columns, counts.column("count_all").to_pylist())}
