"""One session's canonical rows (:func:`hermes_assets.lib.projection.gateway.project_session`):
header, parts and end row put together, ids and their chain (SPEC §5.2, D15)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_assets.lib.basics import ids, schemas
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.projection import arrays
from hermes_assets.lib.projection.arrays import arrow_array, row_columns
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.projection.gateway import GatewayColumns, project_session
from hermes_assets.lib.projection.header import SessionInput
from hermes_assets.lib.source.stores import Store
from tests.lib.projection.bundles import NOW_S, T0, bundle, message

CTX = ProjectionContext(user_home="/home/u", now_s=NOW_S, git=NoGit())


def _rows(item: SessionInput) -> list[dict]:
    out = GatewayColumns()
    n = project_session(item, out, CTX, ErrorTally())
    table = out.to_table()
    assert table.num_rows == n == out.session_rows[-1]
    return table.to_pylist()


@pytest.mark.parametrize("sid", ["s", 'we"ird\\sid', "ünï-cødé.g2", "a:b-c"])
def test_the_ids_chain_whatever_the_sid(sid):
    """previous_message_id is JSON naming the previous part, however the sid must be escaped."""
    store = Store("/h/profiles/team/state.db", label="team/x", profile="team")
    calls = json.dumps([{"id": "c1", "function": {"name": "ls", "arguments": "{}"}}])
    b = bundle(
        message(1, "user", "hello"),
        message(2, "assistant", "", tool_calls=calls, reasoning="think"),
        message(3, "tool", "out", tool_call_id="c1"),
        sid=sid,
        store=store,
        ended_at=T0 + 10,
    )
    rows = _rows(SessionInput(b, generation=2, message_generations={1: 1, 2: 3, 3: 1}))
    session = ids.session_id("team/x", sid, 2)
    assert [r["message_id"] for r in rows] == [
        ids.message_id(session, 1, 1, 0),
        ids.message_id(session, 2, 3, 0),
        ids.message_id(session, 2, 3, 1),
        ids.message_id(session, 3, 1, 0),
        ids.end_row_id(session),
    ]
    assert all(r["part_id"] == ids.part_id(r["message_id"]) for r in rows)
    assert [json.loads(r["previous_message_id"]) for r in rows] == [[]] + [[r["message_id"]] for r in rows[:-1]]
    assert [r["message_index"] for r in rows] == list(range(5))
    assert {r["session_id"] for r in rows} == {session}
    assert [r["part_type"] for r in rows] == ["text", "reasoning", "tool_call", "tool_result", "status"]
    assert rows[3]["tool_name"] == "ls"  # named by the earlier call of the session


def test_a_session_with_no_sane_time_yields_no_row():
    b = bundle(message(1, timestamp=None), started_at=None)
    out = GatewayColumns()
    assert project_session(SessionInput(b), out, CTX, ErrorTally()) == 0
    assert out.to_table().num_rows == 0 and out.sessions == []


def test_the_columns_built_by_arrow_follow_each_session_and_part():
    """``message_index`` (from 0 in each session), ``part_id`` and ``provider_subtype`` are made
    from the other columns when the table is built: sessions one after another, one with no row
    between them, one whose only row is its end row, unicode ids."""
    calls = json.dumps([{"id": "c1", "function": {"name": "ls", "arguments": "{}"}}])
    sessions = [
        bundle(message(1, "user", "hi"), message(2, "assistant", "", tool_calls=calls, reasoning="r"), sid="ä"),
        bundle(message(1, timestamp=None), sid="none", started_at=None),  # no sane time: no row
        bundle(sid="ended", ended_at=T0 + 5),  # its end row alone
        bundle(message(1, "tool", "out", tool_call_id="c1"), message(2, "assistant", "done"), sid="z", ended_at=T0 + 9),
    ]
    out = GatewayColumns()
    counts = [project_session(SessionInput(b), out, CTX, ErrorTally()) for b in sessions]
    assert counts == [3, 0, 1, 3] and out.session_rows == [3, 1, 3]
    rows = out.to_table().to_pylist()
    assert [r["message_index"] for r in rows] == [0, 1, 2, 0, 0, 1, 2]
    assert [r["part_id"] for r in rows] == [r["message_id"] + "#0" for r in rows]
    assert [(r["part_type"], r["provider_subtype"]) for r in rows] == [
        ("text", "text"),
        ("reasoning", "thinking"),
        ("tool_call", "tool_use"),
        ("status", "status"),
        ("tool_result", "tool_result"),
        ("text", "text"),
        ("status", "status"),
    ]
    empty = GatewayColumns().to_table()
    assert empty.num_rows == 0 and empty.schema.names == schemas.AI_GATEWAY_MESSAGES.names


#: a session: its id (any text: quotes, backslashes, control characters, non-ASCII), how many
#: messages it has (a tool call and its result among them), whether it ended
_SESSIONS = st.lists(
    st.tuples(st.text(max_size=8), st.integers(0, 4), st.booleans(), st.integers(1, 3)), min_size=0, max_size=5
)


@settings(max_examples=200, deadline=None, database=None)
@given(_SESSIONS)
def test_previous_message_ids_built_by_arrow_are_the_row_by_row_chain(sessions):
    """``previous_message_id`` (made by Arrow from the ``message_id`` column when the table is
    built) is, row by row, ``[]`` for a session's first row, else the JSON array of the row
    before's ``message_id`` (escaped as :func:`json.dumps` does, raw non-ASCII), across sessions
    one after another."""
    calls = json.dumps([{"id": "c1", "function": {"name": "ls", "arguments": "{}"}}])
    kinds = [("user", "hi", {}), ("assistant", "", {"tool_calls": calls, "reasoning": "r"}), ("tool", "out", {})]
    out = GatewayColumns()
    for n, (sid, messages, ended, generation) in enumerate(sessions):
        msgs = [message(m, kinds[m % 3][0], kinds[m % 3][1], **kinds[m % 3][2]) for m in range(1, messages + 1)]
        b = bundle(*msgs, sid=f"{sid}{n}", ended_at=T0 + 60 if ended else None)
        project_session(SessionInput(b, generation=generation), out, CTX, ErrorTally())
    rows = out.to_table().to_pylist()
    want, index = [], 0
    for i, row in enumerate(rows):
        index = index + 1 if i and row["session_id"] == rows[i - 1]["session_id"] else 0
        want.append("[]" if index == 0 else "[" + json.dumps(rows[i - 1]["message_id"], ensure_ascii=False) + "]")
    assert [r["previous_message_id"] for r in rows] == want
    assert len(rows) == sum(out.session_rows)


def test_rows_become_the_same_columns_as_column_lists(monkeypatch):
    """:func:`row_columns` (one conversion of the row tuples by Arrow) builds exactly the arrays
    :func:`arrow_array` makes of each column, JSON and time columns included; and so it does
    when Arrow returns the rows in chunks (text past 2 GiB)."""
    schema = schemas.AI_GATEWAY_MESSAGES
    fields = [schema.field(c) for c in ("message_id", "message_index", "message_created_at", "tool_args")]
    fields.append(schema.field("is_compact_summary"))
    rows = [("a", 0, 1780304400000, '{"x":1}', True), ("b", 1, None, None, None), ("ç", 2, 0, "[]", None)]
    want = [arrow_array(values, f.type) for values, f in zip(zip(*rows), fields)]

    def same(got):
        return [(a.type, a.to_pylist()) for a in got] == [(a.type, a.to_pylist()) for a in want] and all(
            a.equals(b) for a, b in zip(got, want)
        )

    assert same(row_columns(rows, fields))
    assert [len(a) for a in row_columns([], fields)] == [0] * len(fields)
    convert = pa.array

    def chunked(values, type=None):
        array = convert(values, type=type)
        return pa.chunked_array([array]) if pa.types.is_struct(array.type) else array

    monkeypatch.setattr(arrays.pa, "array", chunked)
    assert same(row_columns(rows, fields))
