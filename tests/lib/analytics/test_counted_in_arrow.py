"""The analytics' faster ways give what the row-by-row reading gives, on any cells.

A day's figures are written byte for byte as before; each faster way is held to
the plain reading it replaced, written out here row by row:

* :func:`~hermes_assets.lib.source.jsonutil.python_loads` (the C scanner straight)
  against :func:`json.loads`: the same value, or an error where it raises one;
* :func:`~hermes_assets.lib.analytics.hermes_tool_calls.hermes_calls` (calls counted
  in Arrow) against Hermes's reading of each row: per session, the larger of the
  named ``tool`` rows and the calls the assistant rows' JSON names, added over sessions;
* :func:`~hermes_assets.lib.analytics.live_rows.count_by` (a day of one host's store
  by Arrow's hash count) against the rows counted in Python;
* :func:`~hermes_assets.lib.analytics.day_sessions.sessions_of` (sessions built from
  columns) against each row as ``to_pylist`` gives it and
  :func:`~hermes_assets.lib.analytics.day_sessions.model_shares`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_assets.lib.analytics import daily, day_sessions, hermes_tool_calls
from hermes_assets.lib.analytics.captured_days import figures_of
from hermes_assets.lib.analytics.day_sessions import TOKENS, model_name, model_shares, sessions_of
from hermes_assets.lib.analytics.live_rows import count_by
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.source.jsonutil import python_loads

# -- python_loads: json.loads's values and errors ------------------------------------------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
)
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
)
#: JSON as writers write it (compact or spaced), around it what is not JSON or not only JSON
_JSON_TEXT = st.builds(
    lambda value, spaced, before, after: (
        before + json.dumps(value, separators=(", ", ": ") if spaced else (",", ":")) + after
    ),
    _VALUES,
    st.booleans(),
    st.sampled_from(["", " ", "\n", "\ufeff", "x"]),
    st.sampled_from(["", " ", "\t\n", "x", ",", "]", " 1", '"']),
)
_ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "NaN",
        "[NaN, Infinity, -Infinity]",
        "[Inf]",
        "[-NaN]",
        '"\\ud800"',
        '"\\udc00\\ud800"',
        '"a\x01"',
        "[1,]",
        "[01]",
        "[1.]",
        "{'a': 1}",
        '{"a": 1, "a": 2}',
        "[" * 5000 + "]" * 5000,
        "[" * 50 + "]" * 50,
        "123456789012345678901234567890",
        "1e400",
    ]
)


def _outcome(read, text: str):
    try:
        return "value", repr(read(text))  # repr: NaN equals itself, -0.0 is not 0.0, 1 is not 1.0 nor True
    except (ValueError, RecursionError) as exc:
        return "error", type(exc).__name__


@settings(max_examples=400, deadline=None)
@given(text=_JSON_TEXT | _ODD_TEXT | st.text(max_size=12))
def test_python_loads_is_json_loads(text):
    assert _outcome(python_loads, text) == _outcome(json.loads, text)
    assert _outcome(python_loads, text.encode("utf-8", "surrogatepass")) == _outcome(
        json.loads, text.encode("utf-8", "surrogatepass")
    )


# -- hermes_calls: Hermes's reading, row by row ---------------------------------------------------

_NAMES = st.sampled_from(["terminal", "read_file", "terminal", "", "é", "skill_view"])


def _call(name) -> dict:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}


#: what an assistant row's ``tool_calls`` may hold: Hermes's calls (duplicate names, blank names),
#: and what names none (the legacy flat shape, calls that are not objects, a function that is not one,
#: text that is not JSON or not a list)
_CALL = st.one_of(
    _NAMES.map(_call),
    _NAMES.map(lambda n: {"name": n, "arguments": {}}),
    st.just({"function": None}),
    st.just({"function": "terminal"}),
    st.just({"function": {"arguments": "{}"}}),
    st.just({"function": {"name": None}}),
    st.just(5),
    st.just(None),
)
_TOOL_CALLS = st.one_of(
    st.none(),
    st.lists(_CALL, max_size=4).map(json.dumps),
    st.lists(_NAMES.map(_call), min_size=1, max_size=3).map(lambda calls: json.dumps(calls, indent=1)),
    st.sampled_from(
        ["", "[not json", "null", "{}", '"terminal"', "[]", "[" * 3000 + "]" * 3000, '[{"function": {"name": NaN}}]']
    ),
)
_ROW = st.fixed_dictionaries(
    {
        "host": st.sampled_from(["box", "box", "other"]),
        "store": st.sampled_from(["/h/state.db", "/h/state.db", "/g/state.db"]),
        "session_id": st.sampled_from(["s1", "s2", "s3", None]),
        "role": st.sampled_from(["assistant", "assistant", "tool", "user", None]),
        "tool_name": st.none() | _NAMES,
        "tool_calls": _TOOL_CALLS,
        "source_deleted": st.booleans(),
    }
)
#: the columns hermes_calls reads, typed as the dataset types them
_MESSAGES = pa.schema([schemas.schema_of(MESSAGES).field(name) for name in hermes_tool_calls.INPUTS])


def _message(role: str, tool_name: str | None = None, tool_calls: str | None = None) -> dict:
    """A row of one session's messages (host ``box``, store ``/h``, session ``s1``), not deleted."""
    return {
        "host": "box",
        "store": "/h",
        "session_id": "s1",
        "role": role,
        "tool_name": tool_name,
        "tool_calls": tool_calls,
        "source_deleted": False,
    }


def hermes_calls_row_by_row(rows: list[dict]) -> dict:
    """Hermes's report's count, each stored row read in Python (the reading the Arrow count replaced)."""
    named: Counter = Counter()
    called: Counter = Counter()
    for row in rows:
        if row["source_deleted"]:
            continue
        key = (row["host"], row["store"], row["session_id"])
        if row["role"] == "tool" and row["tool_name"] is not None:
            named[(*key, row["tool_name"])] += 1
        if row["role"] == "assistant" and row["tool_calls"] is not None:
            try:
                calls = json.loads(row["tool_calls"])
            except (ValueError, RecursionError):
                calls = None
            for call in calls if isinstance(calls, list) else []:
                function = call.get("function", {}) if isinstance(call, dict) else None
                if isinstance(function, dict) and function.get("name"):
                    called[(*key, function["name"])] += 1
    out: Counter = Counter()
    for key in named.keys() | called.keys():
        out[key[3]] += max(named[key], called[key])
    return dict(out)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_ROW, max_size=14), one_store=st.booleans())
def test_hermes_calls_counted_in_arrow_are_the_rows_read_one_by_one(rows, one_store):
    if one_store:  # a day of one host's store (the usual day): the counts by session alone
        rows = [{**row, "host": "box", "store": "/h/state.db"} for row in rows]
    table = pa.Table.from_pylist(rows, schema=_MESSAGES)
    assert hermes_tool_calls.hermes_calls(table) == hermes_calls_row_by_row(rows)


def test_hermes_calls_of_a_day_without_messages_or_calls():
    assert hermes_tool_calls.hermes_calls(_MESSAGES.empty_table()) == {}
    rows = [_message("user")]
    assert hermes_tool_calls.hermes_calls(pa.Table.from_pylist(rows, schema=_MESSAGES)) == {}


def test_a_name_that_is_not_text_is_counted_as_it_is():
    """Not Hermes's writing: counted as the row-by-row reading counts it (the Arrow count takes text)."""
    rows = [
        _message(
            "assistant",
            tool_calls=json.dumps([{"function": {"name": 5}}, _call("terminal"), {"function": {"name": True}}]),
        ),
        _message("tool", tool_name="terminal"),
    ]
    got = hermes_tool_calls.hermes_calls(pa.Table.from_pylist(rows, schema=_MESSAGES))
    assert got == hermes_calls_row_by_row(rows) == {5: 1, "terminal": 1, True: 1}


# -- count_by: one host's store or several --------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", None]), st.sampled_from(["x", None]), st.sampled_from(["s1", "s2", "", None])
        ),
        max_size=16,
    ),
    lead=st.sampled_from(["mixed", "constant", "all null"]),
)
def test_count_by_several_keys_counts_each_combination_of_any_rows(rows, lead):
    if lead != "mixed":
        fixed = ("a", "x") if lead == "constant" else (None, None)
        rows = [(*fixed, sid) for _, _, sid in rows]
    table = pa.table(
        {
            k: pa.array(list(col), pa.string())
            for k, col in zip(["host", "store", "sid"], zip(*rows) if rows else [[], [], []])
        }
    )
    assert count_by(table, ["host", "store", "sid"]) == dict(Counter(rows))


# -- sessions_of: from columns, as from rows -----------------------------------------------------

_COUNT = st.none() | st.integers(0, 10**12)
_COST = st.none() | st.floats(0, 100, allow_nan=False) | st.just(0.0)
_ENTRY = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["gpt-5", "claude-sonnet-4", "", None]),
        "api_call_count": _COUNT,
        "input_tokens": _COUNT,
        "output_tokens": st.none() | st.integers(0, 1000) | st.floats(0, 1000, allow_nan=False),
        "estimated_cost_usd": _COST,
        "cost_status": st.sampled_from(["", "estimated", None]),
    }
)
_USAGE = st.none() | st.lists(_ENTRY, max_size=3).map(json.dumps) | st.sampled_from(["", "[bad", "{}", "[1, 2]"])
_SESSION = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["s1", "s2", "s3"]),
        "model": st.sampled_from(["gpt-5", "", None]),
        "usage_by_model": _USAGE,
        "api_call_count": _COUNT,
        **{name: _COUNT for name in TOKENS},
        "estimated_cost_usd": _COST,
        "actual_cost_usd": _COST,
        "started_at": st.none() | st.integers(0, 10**9).map(lambda s: dt.datetime.fromtimestamp(s, dt.UTC)),
        "message_count": _COUNT,
        "generation": st.none() | st.integers(1, 3),
        "source_deleted": st.booleans(),
    }
)


def _sessions_table(rows: list[dict]) -> pa.Table:
    base = {name: None for name in day_sessions.INPUTS[SESSIONS]}
    base.update(host="box", store="/h/state.db", store_label="", source_deleted=False)
    fields = {f.name: f for f in schemas.schema_of(SESSIONS)}
    schema = pa.schema([fields[name] for name in day_sessions.INPUTS[SESSIONS]])
    return pa.Table.from_pylist([{**base, **row} for row in rows], schema=schema)


_MESSAGE = st.tuples(st.sampled_from(["s1", "s2", "s4", None]), st.sampled_from(["user", "session_meta", None]))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(_SESSION, max_size=6, unique_by=lambda r: r["id"]), messages=st.lists(_MESSAGE, max_size=10))
def test_sessions_built_from_columns_are_the_rows_read_one_by_one(rows, messages):
    table = _sessions_table(rows)
    stored = pa.table(
        {
            "host": pa.array(["box"] * len(messages), pa.string()),
            "store": pa.array(["/h/state.db"] * len(messages), pa.string()),
            "session_id": pa.array([sid for sid, _ in messages], pa.string()),
            "role": pa.array([role for _, role in messages], pa.string()),
        }
    )
    found = sessions_of(table, stored, _no_parts())
    want = [row for row in table.to_pylist() if not row["source_deleted"]]
    kept = Counter(sid for sid, role in messages if role != "session_meta")
    assert [s.messages for s in found] == [kept[row["id"]] for row in want]
    assert [(s.id, s.model, s.started_at, s.hermes_messages) for s in found] == [
        (row["id"], model_name(row["model"]), row["started_at"], day_sessions._int(row["message_count"]))
        for row in want
    ]
    assert [s.counters for s in found] == [{name: day_sessions._int(row[name]) for name in TOKENS} for row in want]
    assert [repr(s.shares) for s in found] == [repr(model_shares(row)) for row in want]


def _no_parts() -> pa.Table:
    return pa.table({"session_id": pa.array([], pa.string()), "part_type": pa.array([], pa.string())})


def test_a_day_without_rows_has_figures_and_no_rows():
    empty = {name: schemas.empty_table(schemas.schema_of(name)) for name in (SESSIONS, MESSAGES, GATEWAY)}
    figures = figures_of("2026-06-01", empty)
    assert set(figures) == set(daily.ANALYTICS)
    assert all(f.table.num_rows == 0 for f in figures.values() if f.table.schema.names[0] == "day")
    assert figures[daily.TOOLS].totals["hermes_tool_calls"] == 0


@pytest.mark.parametrize("text", ["[not json", "[" * 3000 + "]" * 3000, '{"function": {"name": "x"}}'])
def test_tool_calls_that_name_no_call_count_none(text):
    rows = [_message("assistant", tool_calls=text)]
    assert hermes_tool_calls.hermes_calls(pa.Table.from_pylist(rows, schema=_MESSAGES)) == {}


_PRICED_ENTRY = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["gpt-5", "claude-sonnet-4", "anthropic/claude-sonnet-4.6", "", None, 5]),
        "billing_provider": st.sampled_from(["openrouter", "anthropic", "", None, ["x"]]),
        "billing_base_url": st.sampled_from(["https://openrouter.ai/api/v1", "", None]),
        "cost_status": st.sampled_from(["", "estimated", None]),
        "cost_source": st.sampled_from(["", "provider", None]),
        "estimated_cost_usd": _COST | st.just(True),
        **{name: _COUNT | st.just(True) | st.floats(0, 10**6, allow_nan=False) for name in day_sessions.TOTAL_TOKENS},
    }
)


@settings(max_examples=300, deadline=None)
@given(entry=_PRICED_ENTRY)
def test_a_usage_rows_share_costs_what_hermes_cost_says(entry):
    """A share prices its row from the counts it read (its tokens among them), as :func:`hermes_cost` does."""
    assert repr(day_sessions._entry_share(entry).hermes_cost_usd) == repr(day_sessions.hermes_cost(entry))


# -- usage entries handed over by the projection: what their cells decode to -------------------------

#: a cell of Hermes's ``session_model_usage`` as SQLite gives it (whole floats, infinities, text, NULL)
_USAGE_CELL = (
    st.none()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.sampled_from([0.0, -0.0, 3.0, 1e16, float("inf")])
    | st.text(max_size=4)
)
_USAGE_ROW = st.fixed_dictionaries(
    {
        "session_id": st.just("s1"),
        "model": st.sampled_from(["claude-sonnet-4", "gpt-5", "", None]) | _USAGE_CELL,
        "billing_provider": st.sampled_from(["anthropic", "openrouter", None]),
        "first_seen": st.none() | st.floats(0, 2e9),
        "cost_status": st.sampled_from(["", "estimated", None]),
        "estimated_cost_usd": _USAGE_CELL,
        "actual_cost_usd": _USAGE_CELL,
        "api_call_count": _USAGE_CELL,
        **{name: _USAGE_CELL for name in TOKENS},
    }
)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_USAGE_ROW, min_size=1, max_size=3), own=st.lists(_COUNT, min_size=6, max_size=6))
def test_usage_entries_the_projection_held_are_those_their_cell_decodes_to(rows, own):
    """A capture hands the figures each session's ``usage_by_model`` entries as the projection built
    them, by their cell's text: the shares are those of the cell decoded, to the type of each number."""
    from hermes_assets.lib.projection.header import usage_by_model
    from hermes_assets.lib.source.jsonutil import dumps

    entries = usage_by_model(rows)
    text = dumps(entries, normalized=True)
    decoded = day_sessions.usage_entries(text)
    assert repr(day_sessions.usage_entries(text, {text: entries})) == repr(decoded)
    args = ("gpt-5", own, 0.5, None)
    # the same shares, or the same error (a count of infinity has no whole part, read either way)
    assert _outcome(day_sessions._model_shares, text, *args, {text: entries}) == _outcome(
        day_sessions._model_shares, text, *args
    )
    # a cell the projection did not hand over is decoded
    assert repr(day_sessions.usage_entries(text, {"[]": []})) == repr(decoded)


def _outcome(function, *args) -> str:
    try:
        return repr(function(*args))
    except Exception as exc:
        return type(exc).__name__
