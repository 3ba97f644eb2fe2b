"""The session-end row (:mod:`hermes_assets.lib.projection.end_row`, SPEC §5.2, D4)."""

from __future__ import annotations

import json

import pyarrow as pa

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.projection.end_row import end_row
from hermes_assets.lib.projection.gateway import ROW_COLUMNS, GatewayColumns, project_session
from hermes_assets.lib.projection.header import SessionInput, session_header
from tests.lib.projection.bundles import NOW_S, T0, bundle, message

CTX = ProjectionContext(user_home="/home/u", now_s=NOW_S, git=NoGit())


def _end(b, tally=None):
    """The session's end row as its table holds it (its index and ``part_id`` are built there)."""
    tally = tally if tally is not None else ErrorTally()
    out = GatewayColumns()
    project_session(SessionInput(b), out, CTX, tally)
    table = out.to_table()
    at = table.schema.get_field_index("message_created_at")  # as epoch ms, what the row tuple holds
    rows = table.set_column(at, "message_created_at", table[at].cast(pa.int64())).to_pylist()
    return rows[-1] if rows and rows[-1]["part_type"] == "status" else None


def test_a_session_not_ended_has_no_end_row():
    assert _end(bundle(message(1))) is None
    assert _end(bundle(message(1), ended_at=0)) is None


def test_the_end_row_carries_the_current_totals():
    row = _end(
        bundle(
            message(1),
            ended_at=T0 + 60,
            end_reason="user_exit",
            estimated_cost_usd=0.5,
            api_call_count=2.0,
            input_tokens=10.0,
            output_tokens=3,
        )
    )
    assert (row["message_id"], row["part_id"], row["role"], row["part_type"]) == (
        "hermes-s-session_end",
        "hermes-s-session_end#0",
        "system",
        "status",
    )
    assert (row["message_index"], row["previous_message_id"], row["message_created_at"]) == (
        1,  # after the message's one part
        '["hermes-s-1-0"]',
        int((T0 + 60) * 1000),
    )
    assert row["provider_subtype"] == "status" and row["provider_uuid"] is None
    attrs = json.loads(row["attributes"])
    assert attrs["hermes"] == {
        "session_end": True,
        "end_reason": "user_exit",
        "estimated_cost_usd": 0.5,
        "api_call_count": 2,
        "source": "cli",
    }
    assert attrs["usage"]["input_tokens"] == 10 and '"input_tokens":10,' in row["attributes"]


def test_an_insane_end_time_is_counted_and_falls_back_to_the_start():
    tally = ErrorTally()
    row = _end(bundle(message(1), ended_at="soon"), tally)
    assert row["message_created_at"] == int(T0 * 1000)
    assert tally.counts[errors.BAD_TIMESTAMP] == 1


def test_the_per_model_usage_is_the_session_rows_text_in_its_place():
    """The end row holds ``usage_by_model`` as the session row's cell has it (encoded once per
    session, put in place of a stand-in), in its place among the members, even when a cell
    before it spells the stand-in."""
    b = bundle(message(1), ended_at=T0 + 60, end_reason='x","usage_by_model":0,"y', api_call_count=1)
    b.usage = [
        {"session_id": "s", "model": "m2", "first_seen": T0 + 5, "input_tokens": 4.0, "cost": 0.25},
        {"session_id": "s", "model": "m1", "first_seen": T0, "input_tokens": 7, "cost": None},
    ]
    item = SessionInput(b)
    header = session_header(item, CTX, ErrorTally())
    row = dict(zip(ROW_COLUMNS, end_row(item, header, NOW_S, ErrorTally())))
    models = [
        {"model": "m1", "first_seen": int(T0), "input_tokens": 7, "cost": None},  # integral floats as integers
        {"model": "m2", "first_seen": int(T0) + 5, "input_tokens": 4, "cost": 0.25},
    ]
    attrs = json.loads(row["attributes"])
    assert list(attrs["hermes"]) == ["session_end", "end_reason", "api_call_count", "usage_by_model", "source"]
    assert attrs["hermes"]["end_reason"] == 'x","usage_by_model":0,"y'
    assert attrs["hermes"]["usage_by_model"] == models
    assert item.usage_by_model_json() == json.dumps(models, separators=(",", ":"))
    assert '"usage_by_model":' + item.usage_by_model_json() + ',"source":"cli"}' in row["attributes"]
