"""The raw datasets' rows: ``hermes_sessions`` (SPEC §3) and ``hermes_messages`` (§4).

Hermes's own cells, as stored, in their v22 types, with the derived columns
beside them (scope and class, per-model usage, generations, decoded content,
copies, a newer Hermes's columns) and each row's provenance (store, label,
profile, day). A cell the dataset cannot keep in its type becomes NULL and is
counted (SPEC §9: the raw datasets count too).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Iterable, Sequence
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics import errors, hermes_tables, schemas
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.basics.timestamps import SANE_MIN_S, round_ms_array, sane_instant, upper_ms
from hermes_assets.lib.projection import copies, display, extra_columns
from hermes_assets.lib.projection.arrays import arrow_array, repeated
from hermes_assets.lib.projection.content import content_text, needs_decoding
from hermes_assets.lib.projection.header import SessionInput
from hermes_assets.lib.source.jsonutil import dumps
from hermes_assets.lib.source.state_db import SessionBundle


class RawColumns:
    """Buffers for ``hermes_sessions`` / ``hermes_messages``: Hermes's own cells, one row of
    them each (a session's tuple, a message's dict's values: its cells as they are when the
    table is built), derived columns beside them, provenance as runs.

    A cell the dataset cannot keep in its v22 type (an insane or unparseable
    time, a TEXT in an INTEGER column) becomes NULL and is counted in
    ``tally`` when the table is built (SPEC §9: raw datasets count too).
    """

    def __init__(
        self,
        schema: pa.Schema,
        source_columns: Iterable[str],
        derived: tuple[str, ...],
        *,
        now_s: float,
        tally: ErrorTally,
        messages: bool,
    ) -> None:
        self.schema = schema
        #: the cells of a row, in order (a column the store lacks and reads as NULL may be
        #: left out: it becomes an all-NULL column)
        self.source = [(name, schema.field(name).type) for name in source_columns]
        self.rows: list[Collection[object]] = []
        self.derived: dict[str, list[object]] = {name: [] for name in derived}
        self.runs: list[tuple[SessionBundle, str, int]] = []
        self.now_s = now_s
        self.tally = tally
        self._messages = messages
        #: the store's columns this contract does not name (D22); whether its rows can be copies (D20)
        self.unknown: list[str] = []
        self.grouped = False

    def __len__(self) -> int:
        return len(self.rows)

    def to_table(self) -> pa.Table:
        n = len(self.rows)
        # the rows turned into columns at once (a row's cells past the source's are left out)
        cells = dict(zip((name for name, _ in self.source), zip(*self.rows))) if n else {}
        counts = [count for _, _, count in self.runs]
        provenance: dict[str, list[str | None]] = {
            "store": [bundle.store.path for bundle, _, _ in self.runs],
            "store_label": [bundle.store.label for bundle, _, _ in self.runs],
            "profile": [bundle.store.profile for bundle, _, _ in self.runs],
            "host": [bundle.store.host for bundle, _, _ in self.runs],
            "day": [day for _, day, _ in self.runs],
        }
        arrays = []
        ends: list[int] = []  # the end row of each run, for finding a row's session
        for f in self.schema:
            if f.name in cells:
                array, nulled = _raw_array(cells[f.name], f.type, self.now_s)
                if nulled and not ends:
                    ends = list(itertools.accumulate(count for _, _, count in self.runs))
                for i in nulled:
                    self._count(i, ends, errors.BAD_TIMESTAMP if f.type == schemas.TS else errors.BAD_VALUE, f.name)
                arrays.append(array)
            elif f.name in self.derived:
                arrays.append(arrow_array(self.derived[f.name], f.type))
            elif f.name in provenance:  # one value per run (a session's rows), expanded by Arrow
                arrays.append(repeated(provenance[f.name], counts, f.type))
            elif f.name in ("source_deleted", "replaced"):
                arrays.append(pa.repeat(pa.scalar(False), n))
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _count(self, row: int, ends: list[int], kind: str, column: str) -> None:
        """Count a cell that became NULL against its session (the run holding ``row``)."""
        # a message's first cell is its id
        mid = cast("int | None", next(iter(self.rows[row]))) if self._messages else None
        bundle = self.runs[bisect.bisect_right(ends, row)][0]
        self.tally.add(kind, bundle.store.scoped(bundle.sid), mid, column)


_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)


def _sane_times(seconds: pa.Array, now_s: float) -> tuple[pa.Array, list[int]]:
    """REAL seconds as times, and the indexes of the cells that became NULL (insane instants)."""
    array = _timestamps(seconds, now_s)
    if array.null_count == seconds.null_count:
        return array, []
    nulled = pc.and_(pc.is_valid(seconds), pc.is_null(array))
    return array, pc.indices_nonzero(nulled).to_pylist()


def _raw_array(values: Sequence[object], typ: pa.DataType, now_s: float) -> tuple[pa.Array, list[int]]:
    """Hermes cells as their v22 type, and the indexes of the cells that became NULL.

    A cell of the wrong type (hostile or ancient data) becomes NULL on its own,
    without costing the column its fast path.
    """
    try:
        if typ == schemas.JSON:
            if values.count(None) == len(values):  # a column this store lacks, or never fills
                return pa.nulls(len(values), typ), []
            cells = [display.json_cell(v) for v in values]
            nulled = [i for i, (v, c) in enumerate(zip(values, cells)) if v is not None and c is None]
            return arrow_array(cells, typ), nulled
        if typ == schemas.TS:
            return _sane_times(pa.array(values, pa.float64()), now_s)
        return pa.array(values, typ), []
    except _CONVERSION_ERRORS:
        coerced = [_cell(v, typ, now_s) for v in values]
        nulled = [i for i, (v, c) in enumerate(zip(values, coerced)) if v is not None and c is None]
        return pa.array(coerced, schemas.TS if typ == schemas.TS else typ), nulled


def _timestamps(seconds: pa.Array, now_s: float) -> pa.Array:
    """REAL epoch seconds -> ms (round half up, SPEC §5.1); insane instants -> NULL."""
    ms = round_ms_array(seconds)
    sane = pc.and_(pc.greater_equal(ms, SANE_MIN_S * 1000), pc.less_equal(ms, float(upper_ms(now_s))))
    return pc.cast(pc.cast(pc.if_else(sane, ms, None), pa.int64()), schemas.TS)


def _cell(value: object, arrow_type: pa.DataType, now_s: float) -> object:
    """A SQLite cell coerced to its v22 type; a value of the wrong type is NULL."""
    if value is None:
        return None
    if arrow_type == schemas.TS:
        return sane_instant(value, now_s)
    if arrow_type == pa.string():
        return (
            value
            if isinstance(value, str)
            else str(value)
            if not isinstance(value, bytes)
            else value.decode("utf-8", "replace")
        )
    if arrow_type == pa.int64():
        return value if type(value) is int and -(2**63) <= value < 2**63 else None
    if arrow_type == pa.float64():
        return float(value) if type(value) is int or type(value) is float else None
    if arrow_type == pa.binary():
        return value if isinstance(value, bytes) else None
    return value


def sessions_columns(now_s: float, tally: ErrorTally, unknown: Sequence[str] = ()) -> RawColumns:
    """``unknown``: the store's ``sessions`` columns this contract does not name (D22)."""
    out = RawColumns(
        schemas.HERMES_SESSIONS,
        _SESSION_NAMES,
        ("scope_path", "policy_class", "usage_by_model", "generation", "extra_columns"),
        now_s=now_s,
        tally=tally,
        messages=False,
    )
    out.unknown = list(unknown)
    return out


def messages_columns(
    now_s: float,
    tally: ErrorTally,
    unknown: Sequence[str] = (),
    *,
    grouped: bool = False,
    names: list[str] | None = None,
) -> RawColumns:
    """``unknown``: as :func:`sessions_columns`; ``grouped``: the store's rows can be copies
    (schema 23+, D20), so ``superseded`` is true or false (NULL before); ``names``: the
    ``messages`` columns the reader selected (the keys of each message, in order)."""
    out = RawColumns(
        schemas.HERMES_MESSAGES,
        names or [name for name, _, _ in hermes_tables.MESSAGE_COLUMNS],
        ("content_text", "content_json", "generation", "copy_of", "superseded", "extra_columns"),
        now_s=now_s,
        tally=tally,
        messages=True,
    )
    out.unknown = list(unknown)
    out.grouped = grouped
    return out


_SESSION_NAMES = tuple(name for name, _, _ in hermes_tables.SESSION_COLUMNS)


def session_row(item: SessionInput, out: RawColumns) -> None:
    """The session's ``hermes_sessions`` row."""
    bundle = item.bundle
    session = bundle.session
    out.rows.append(tuple(map(session.get, _SESSION_NAMES)))
    out.runs.append((bundle, bundle.day, 1))
    out.derived["generation"].append(item.generation)
    out.derived["scope_path"].append(item.scope_path)
    out.derived["policy_class"].append(item.policy_class)
    out.derived["usage_by_model"].append(item.usage_by_model_json())
    out.derived["extra_columns"].append(extra_columns.encode(out.unknown, bundle.extras or ()))
    for table, column, _ in bundle.bad_cells:
        if table == "sessions":
            out.tally.add(errors.BAD_TEXT, bundle.store.scoped(bundle.sid), None, column)
    if bundle.prompt_missing:
        out.tally.add(errors.SYSTEM_PROMPT_MISSING, bundle.store.scoped(bundle.sid), None, "system_prompt_hash")


def message_rows(item: SessionInput, out: RawColumns) -> None:
    """Every stored message of the session (inactive ones too), cells as stored; content
    decoded through ``item.decoded``, shared with the canonical rows."""
    bundle, generations, decoded, plain = item.bundle, item.message_generations, item.decoded, item.plain
    texts, decoded_json = out.derived["content_text"], out.derived["content_json"]
    gens = out.derived["generation"]
    scoped = bundle.store.scoped(bundle.sid)
    n = len(bundle.messages)
    if generations is None:
        gens += [1] * n
    else:
        gens += [generations[msg["id"]] for msg in bundle.messages]
    copy_of, superseded = copies.columns(bundle.messages, item.marks, grouped=out.grouped)
    out.derived["copy_of"] += copy_of
    out.derived["superseded"] += superseded
    if out.unknown:
        extras = bundle.message_extras or {}
        out.derived["extra_columns"] += [
            extra_columns.encode(out.unknown, extras.get(msg["id"], ())) for msg in bundle.messages
        ]
    else:
        out.derived["extra_columns"] += [None] * n
    out.rows += map(dict.values, bundle.messages)  # views: the cells are read when the table is built
    for msg in bundle.messages:
        content = msg["content"]
        # a plain text cell is its own text, with no envelope, and no cell has none (content_text's
        # answers, without its calls), as the canonical rows found it (the same cell) or seen here;
        # any other cell is decoded by it
        if content is None or plain.get(msg["id"]) is content or (type(content) is str and not needs_decoding(content)):
            texts.append(content)
            decoded_json.append(None)
            continue
        text, envelope = content_text(content, out.tally, scoped, msg["id"], decoded)
        texts.append(text)
        decoded_json.append(dumps(envelope, normalized=True) if envelope is not None else None)
    if bundle.messages:
        out.runs.append((bundle, bundle.day, len(bundle.messages)))
    for table, column, mid in bundle.bad_cells:
        if table == "messages":
            out.tally.add(errors.BAD_TEXT, bundle.store.scoped(bundle.sid), mid, column)
