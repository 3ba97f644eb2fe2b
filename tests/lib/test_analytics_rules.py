"""The rules of the analytics layer that are not plain counting (SPEC §11).

``hermes_daily_tools`` counts an error result the way Hermes shows one: the
project's :func:`hermes_marks_error` must give Hermes's own verdict
(``agent.display._detect_tool_failure`` of the installed hermes-agent) on
every tool result of the small fixture, on the shapes Hermes's tools return,
and on random ones.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_assets.lib.analytics.tool_errors import hermes_marks_error, is_error_result

TOOLS = ["terminal", "memory", "write_file", "patch", "read_file", "web_search", "execute_code", None]


def hermes_verdict(tool_name, content):
    from agent.display import _detect_tool_failure

    return _detect_tool_failure(tool_name, content)[0]


SHAPES = [
    ("read_file", '{"error": "File not found: x.py"}'),  # tools.registry.tool_error
    ("read_file", '{"error": "bad input", "success": false}'),
    ("send_message", '{"success": false, "message": "no such chat"}'),
    ("send_message", '{"success": false}'),
    ("todo", '{"message": "ok"}'),
    ("todo", '{"error": ""}'),
    ("todo", '{"error": null, "items": []}'),
    ("memory", '{"success": false, "error": "the entry would exceed the limit of 2200 chars"}'),
    ("memory", '{"success": true, "entries": ["error"]}'),
    ("terminal", '{"output": "ok", "exit_code": 0, "error": null}'),
    ("terminal", '{"output": "FAILED", "exit_code": 1, "error": null}'),
    ("terminal", '{"output": "", "exit_code": "2", "error": "boom"}'),
    ("terminal", '{"output": "no code"}'),
    ("terminal", "[Tool execution cancelled — terminal was interrupted]"),
    ("terminal", "Error: not JSON"),
    ("write_file", '{"bytes_written": 12, "path": "a.py", "lint": {"error": "E501"}}'),
    ("write_file", '{"error": "permission denied", "path": "/etc/x"}'),
    ("patch", '{"success": true, "diff": "- raise \\"error\\"\\n+ pass"}'),
    ("patch", '{"success": false, "error": "hunk failed"}'),
    ("web_search", '<untrusted_tool_result source="web_search">{"results": []}</untrusted_tool_result>'),
    ("web_search", "Error fetching https://example.com"),
    ("web_extract", '{"status": "failed"}'),
    ("delegate_task", '[{"error": 1}]'),
    (None, '{"output": "x", "exit_code": 1, "error": null}'),
    ("read_file", ""),
    ("read_file", None),
]


@pytest.mark.parametrize(("tool_name", "content"), SHAPES)
def test_the_error_rule_is_hermes_own_on_the_shapes_its_tools_return(tool_name, content):
    assert hermes_marks_error(tool_name, content) == hermes_verdict(tool_name, content)


def test_the_error_rule_is_hermes_own_on_every_tool_result_of_the_small_fixture(fixture_copy):
    conn = sqlite3.connect(f"file:{fixture_copy('small')}?mode=ro", uri=True)
    try:
        results = conn.execute("SELECT tool_name, content FROM messages WHERE role = 'tool'").fetchall()
    finally:
        conn.close()
    verdicts = [hermes_marks_error(name, content) for name, content in results]
    assert verdicts == [hermes_verdict(name, content) for name, content in results]
    assert len(results) == 381 and sum(verdicts) == 31  # failed terminal commands, mostly


_values = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["", "x", "error", "failed"]), st.text(max_size=8)
)
_objects = st.dictionaries(
    st.sampled_from(["error", "success", "message", "exit_code", "bytes_written", "output", "status"]),
    _values,
    max_size=4,
)


@settings(max_examples=400, deadline=None)
@given(
    tool_name=st.sampled_from(TOOLS),
    body=st.one_of(_objects.map(json.dumps), st.text(max_size=40)),
    prefix=st.sampled_from(["", " ", "Error", "\n"]),
)
def test_the_error_rule_is_hermes_own_on_random_results(tool_name, body, prefix):
    content = prefix + body
    try:
        want = hermes_verdict(tool_name, content)
    except TypeError:  # Hermes's own check crashes on a memory result whose "error" is not text
        return
    assert hermes_marks_error(tool_name, content) == want


def test_a_row_that_says_is_error_is_believed():
    ok = '{"output": "fine", "exit_code": 0, "error": null}'
    assert is_error_result(True, "terminal", ok) is True
    assert is_error_result(False, "terminal", '{"exit_code": 1}') is False
    assert is_error_result(None, "terminal", '{"exit_code": 1}') is True


def _gateway(rows):
    import pyarrow as pa

    from hermes_assets.lib.basics import schemas

    attrs_type = schemas.AI_GATEWAY_MESSAGES.field("attributes").type
    return pa.table(
        {
            "session_id": pa.array([r[0] for r in rows], pa.string()),
            "part_type": pa.array([r[1] for r in rows], pa.string()),
            "attributes": pa.ExtensionArray.from_storage(attrs_type, pa.array([r[2] for r in rows], pa.string())),
        }
    )


def test_daily_usage_counts_the_tool_calls_of_a_reused_session_id_under_its_model():
    """A session id Hermes reused after a restore (D15) has canonical rows ``hermes-<sid>.g2``:
    its tool calls count under its model, like any session's."""
    import pyarrow as pa

    from hermes_assets.lib.analytics.usage import INPUTS as USAGE_INPUTS
    from hermes_assets.lib.analytics.usage import daily_usage
    from hermes_assets.lib.basics.schemas import MESSAGES, SESSIONS

    session = {
        "host": "box",
        "store": "/h/state.db",
        "store_label": None,
        "id": "s1",
        "generation": 2,
        "source": "cli",
        "model": "m",
        "title": None,
        "started_at": None,
        "ended_at": None,
        "message_count": 1,
        "tool_call_count": 1,
        "billing_provider": None,
        "billing_base_url": None,
        "cost_status": None,
        "cost_source": None,
        "usage_by_model": None,
        "api_call_count": 1,
        "input_tokens": 10,
        "output_tokens": 2,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "estimated_cost_usd": None,
        "actual_cost_usd": None,
        "source_deleted": False,
    }
    sessions = pa.Table.from_pylist([session])
    assert set(sessions.column_names) == set(USAGE_INPUTS[SESSIONS])
    messages = pa.table(
        {
            "host": ["box"],
            "store": ["/h/state.db"],
            "session_id": ["s1"],
            "role": ["assistant"],
            "source_deleted": [False],
            "copy_of": pa.array([None], pa.string()),
        }
    )
    assert set(messages.column_names) == set(USAGE_INPUTS[MESSAGES])
    gateway = _gateway(
        [("hermes-s1.g2", "tool_call", "{}"), ("hermes-s1.g2", "tool_call", "{}"), ("hermes-s1.g2", "text", "{}")]
    )
    figures = daily_usage("2026-06-01", sessions, messages, gateway)
    assert figures.table.to_pylist()[0]["tool_calls"] == 2
    assert figures.totals["tool_calls"] == 2 and figures.totals["messages"] == 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["s1", "s2", "s3"]),
            st.sampled_from(["tool_call", "tool_result", "text"]),
            st.sampled_from(TOOLS),
            st.sampled_from([None, True, False]),
            st.sampled_from([content for _, content in SHAPES] + ['{"ok": 1}', "plain output", "ERROR!", None]),
        ),
        max_size=30,
    )
)
def test_daily_tools_counts_as_one_pass_over_the_rows_would(parts):
    """The per-tool figures (Arrow: a screen, then Hermes's rule for the results it keeps) equal a
    plain count over the rows, one by one, with the rule asked of every result; a NULL tool last."""
    import pyarrow as pa

    from hermes_assets.lib.analytics.tools import daily_tools
    from hermes_assets.lib.basics import schemas

    attrs_type = schemas.AI_GATEWAY_MESSAGES.field("attributes").type
    gateway = pa.table(
        {
            "session_id": pa.array([p[0] for p in parts], pa.string()),
            "part_type": pa.array([p[1] for p in parts], pa.string()),
            "tool_name": pa.array([p[2] for p in parts], pa.string()),
            "content_text": pa.array([p[4] for p in parts], pa.string()),
            "is_error": pa.array([p[3] for p in parts], pa.bool_()),
            "attributes": pa.ExtensionArray.from_storage(attrs_type, pa.array(["{}"] * len(parts), pa.string())),
        }
    )
    want: dict = {}
    for sid, kind, tool, said, content in parts:
        if kind == "text":
            continue
        row = want.setdefault(tool, {"calls": 0, "results": 0, "error_results": 0, "sessions": set()})
        row["sessions"].add(sid)
        if kind == "tool_call":
            row["calls"] += 1
        else:
            row["results"] += 1
            row["error_results"] += is_error_result(said, tool, content)
    order = sorted(want, key=lambda name: (name is None, name or ""))
    no_messages = schemas.HERMES_MESSAGES.empty_table()  # Hermes's own count of calls: none here
    got = daily_tools("2026-06-01", gateway, no_messages)
    assert got.table.to_pylist() == [
        {
            "day": "2026-06-01",
            "tool_name": name,
            **{k: v for k, v in want[name].items() if k != "sessions"},
            "sessions": len(want[name]["sessions"]),
            "hermes_calls": 0,
        }
        for name in order
    ]
    assert got.totals["sessions"] == len({p[0] for p in parts if p[1] != "text"})
