"""The canonical rows of ``ai_gateway_messages_hermes``, column by column (SPEC §5).

:func:`project_session` builds one session's rows from its header
(:mod:`.header`), its messages' parts (:mod:`.parts`) and its end row
(:mod:`.end_row`) into :class:`GatewayColumns`: one tuple per row for the
columns that vary, one per session for those constant over it, turned into an
Arrow table without a per-row dict (the row tuples converted by Arrow in one pass).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics import ids, schemas
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.basics.timestamps import DAY_MS, ms_day
from hermes_assets.lib.projection.arrays import arrow_array, repeated, row_columns
from hermes_assets.lib.projection.context import ProjectionContext
from hermes_assets.lib.projection.end_row import end_row
from hermes_assets.lib.projection.header import SessionInput, session_header
from hermes_assets.lib.projection.parts import append_parts
from hermes_assets.lib.source.jsonutil import quote

#: columns that vary per row, in the order of a row tuple
ROW_COLUMNS = (
    "message_id",
    "provider_uuid",
    "message_created_at",
    "role",
    "part_type",
    "content_text",
    "tool_name",
    "tool_call_id",
    "tool_args",
    "tool_result_for",
    "is_compact_summary",
    "status",
    "attributes",
)
#: columns that vary per row but follow from the others, built by Arrow at :meth:`GatewayColumns.to_table`
#: (no Python value per row): a part's index in its session, its ``part_id`` (its ``message_id`` and
#: :data:`~hermes_assets.lib.basics.ids.PART_SUFFIX`), its ``provider_subtype`` (one per ``part_type``),
#: its ``previous_message_id`` (the row before's ``message_id`` in its session, as a JSON array), its
#: ``date`` (the day of its ``message_created_at``)
DERIVED_COLUMNS = ("message_index", "part_id", "provider_subtype", "previous_message_id", "date")
#: ``part_type`` -> ``provider_subtype`` (SPEC §5.2: every part type has one)
SUBTYPES = {
    "reasoning": "thinking",
    "tool_call": "tool_use",
    "tool_result": "tool_result",
    "text": "text",
    "status": "status",
}
#: columns constant over a session (one value per session, repeated at build time)
SESSION_COLUMNS = (
    "session_id",
    "provider",
    "model",
    "system_text",
    "conversation_started_at",
    "cwd",
    "git_branch",
    "git_remote",
    "repo_root",
    "entrypoint",
    "parent_thread_id",
    "host",
)
_CONSTANTS = {
    "gateway_id": "hypaware-local",
    "schema_version": 7,
    "conversation_source": "hermes",
    "client_name": "hermes",
    "part_index": 0,
}


class GatewayColumns:
    """Buffers for ``ai_gateway_messages_hermes`` rows: one tuple per row for the
    varying columns, one tuple per session for the session-constant ones.

    :meth:`to_table` builds the session-constant text columns (system prompt,
    model, cwd ...) as dictionary arrays, one value per session: a long system
    prompt is stored once per session, not once per row, until the Parquet
    encoder writes it as a dictionary page.
    """

    def __init__(self):
        self.rows: list[tuple] = []
        self.sessions: list[tuple] = []
        self.session_rows: list[int] = []

    def __len__(self) -> int:
        return len(self.rows)

    def to_table(self) -> pa.Table:
        n = len(self.rows)
        schema = schemas.AI_GATEWAY_MESSAGES
        row_cols = dict(zip(ROW_COLUMNS, row_columns(self.rows, [schema.field(c) for c in ROW_COLUMNS])))
        sess_cols = (
            dict(zip(SESSION_COLUMNS, zip(*self.sessions))) if self.sessions else {c: () for c in SESSION_COLUMNS}
        )
        session_of_row = repeated(range(len(self.session_rows)), self.session_rows, pa.int32())
        row_cols.update(_derived(row_cols, self.session_rows, n, schema))
        fields, arrays = [], []
        for f in schema:
            name = f.name
            if name in row_cols:
                array = row_cols[name]
            elif name in _DICTIONARY_COLUMNS:
                array = _session_dictionary(sess_cols[name], session_of_row)
                f = f.with_type(array.type)
            elif name in sess_cols:
                array = arrow_array(sess_cols[name], f.type).take(session_of_row)
            elif name in _CONSTANTS:
                array = pa.repeat(pa.scalar(_CONSTANTS[name], f.type), n)
            else:
                array = pa.nulls(n, type=f.type)
            fields.append(f)
            arrays.append(array)
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _derived(row_cols: dict[str, pa.Array], session_rows: list[int], n: int, schema: pa.Schema) -> dict[str, pa.Array]:
    """:data:`DERIVED_COLUMNS` from the row columns and each session's number of rows."""
    # a row's index in its session: its position, less its session's first row's
    starts = list(itertools.accumulate(session_rows, initial=0))[:-1]
    positions = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int32()), n)), pa.scalar(1, pa.int32()))
    index = pc.subtract(positions, repeated(starts, session_rows, pa.int32()))
    part_types = row_cols["part_type"]
    subtypes = pa.array(list(SUBTYPES.values()), pa.string()).take(pc.index_in(part_types, pa.array(list(SUBTYPES))))
    if subtypes.null_count:  # never: every part type the projection makes is in SUBTYPES
        raise ValueError(f"a part type without a subtype: {pc.unique(part_types.filter(subtypes.is_null()))}")
    return {
        "message_index": index.cast(schema.field("message_index").type),
        "part_id": pc.binary_join_element_wise(row_cols["message_id"], ids.PART_SUFFIX, ""),
        "provider_subtype": subtypes,
        "previous_message_id": _previous(row_cols["message_id"], index, schema.field("previous_message_id").type),
        "date": _days(row_cols["message_created_at"]),
    }


def _days(times: pa.Array) -> pa.Array:
    """Each row's ``date``: the UTC day of its ``message_created_at`` (never NULL, never before 2000),
    named once per distinct day (:func:`ms_day`) and spread over the rows by Arrow."""
    days = pc.divide(times.cast(pa.int64()), DAY_MS)
    distinct = pc.unique(days)
    names = pa.array([ms_day(day * DAY_MS) for day in distinct.to_pylist()], pa.string())
    return names.take(pc.index_in(days, distinct))


#: the bytes a JSON string escapes (``json.encoder.encode_basestring``, raw non-ASCII: a quote, a
#: backslash, a control character) are the bytes not in this; in UTF-8 no byte of another character is one
_UNESCAPED = bytes(b for b in range(256) if b >= 0x20 and b not in b'"\\')


def _previous(message_ids: pa.Array, index: pa.Array, typ: pa.DataType) -> pa.Array:
    """Each row's ``previous_message_id``: ``[]`` for its session's first row (``index`` 0), else
    the ``message_id`` of the row before it as a one-string JSON array."""
    n = len(message_ids)
    before = pa.concat_arrays([pa.array([""], pa.string()), message_ids.slice(0, max(n - 1, 0))]) if n else message_ids
    if n and _escapes(message_ids):  # an id to escape (a hostile session id)
        quoted = pa.array([f"[{quote(v)}]" for v in before.to_pylist()], pa.string())
    else:  # a JSON string is the text in quotes
        quoted = pc.binary_join_element_wise('["', before, '"]', "")
    previous = pc.if_else(pc.equal(index, 0), pa.scalar("[]", pa.string()), quoted)
    return pa.ExtensionArray.from_storage(typ, previous) if isinstance(typ, pa.BaseExtensionType) else previous


def _escapes(texts: pa.Array) -> bool:
    """Whether a text of ``texts`` holds a character a JSON string escapes: a byte left in their
    buffer once every other byte is deleted (a C pass over the bytes, a few times faster than a
    regex match per value). The buffer may hold more than these texts (a slice): then at worst
    the caller quotes each one, which is right for any text."""
    return bool(texts.buffers()[2].to_pybytes().translate(None, _UNESCAPED))


#: session-constant text columns kept as dictionaries (one value per session): all but
#: ``session_id``, the file's first sort key (compared as plain text), and the start, a time
_DICTIONARY_COLUMNS = frozenset(SESSION_COLUMNS) - {"session_id", "conversation_started_at"}


def _session_dictionary(values: Sequence[str | None], session_of_row: pa.Array) -> pa.DictionaryArray:
    """Per-session text values, as a per-row dictionary array (nulls in the indices). Arrow
    converts the session's values straight to a dictionary array (each value's index in the
    order it first appears, as a Python dict would number them); the take repeats its indices
    over the rows, the dictionary kept."""
    return pa.array(values, _SESSION_DICTIONARY).take(session_of_row)


_SESSION_DICTIONARY = pa.dictionary(pa.int32(), pa.string())


def project_session(item: SessionInput, out: GatewayColumns, ctx: ProjectionContext, tally: ErrorTally) -> int:
    """Append the session's canonical rows to ``out``: its header's columns, its messages'
    parts, its end row; return how many (none for a session with no sane time at all).

    Generations (SPEC D15) above 1 mark the ids: ``hermes-<sid>.g<n>`` for a session,
    ``<mid>.g<n>`` in a message's ids (:mod:`hermes_assets.lib.basics.ids`).
    """
    header = session_header(item, ctx, tally)
    if header is None:
        return 0
    out.sessions.append(header.columns)
    index = append_parts(item, header, out.rows, ctx.now_s, tally)
    end = end_row(item, header, ctx.now_s, tally)
    if end is not None:
        out.rows.append(end)
        index += 1
    out.session_rows.append(index)
    return index
