"""The Arrow helpers the analytics count with give what Arrow's plainer ways give, on any values.

Each replaces a slower way of getting the same thing (a day's figures are computed
from them, byte for byte as before): a literal screen searched by RE2
(:func:`~hermes_assets.lib.analytics.live_rows.holds`) against ``match_substring``,
a column of UTC times built from its integers and a JSON column's text from its storage
(:func:`~hermes_assets.lib.analytics.day_sessions.as_pylist`) against ``to_pylist``,
the counts of one key by Arrow's hash count
(:func:`~hermes_assets.lib.analytics.live_rows.count_by`) against the rows counted
in Python, the error screen as one alternation
(:func:`~hermes_assets.lib.analytics.tool_errors.maybe_error`) against its words searched
one at a time, which never clears a result Hermes calls an error.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_assets.lib.analytics.day_sessions import as_pylist
from hermes_assets.lib.analytics.live_rows import count_by, holds
from hermes_assets.lib.analytics.tool_errors import hermes_marks_error, maybe_error

#: text that often holds the literals searched, their pieces, and characters special to a regex
_PIECES = ['"copy_of":', "message", "success", "skill_", "mess", "age", ".", "*", "\\", "(", "é", "\n", " "]
_TEXT = st.lists(st.sampled_from(_PIECES) | st.text(max_size=3), max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(cells=st.lists(st.none() | _TEXT, max_size=12), literal=st.sampled_from(_PIECES) | st.text(min_size=1))
def test_holds_is_match_substring(cells, literal):
    column = pa.chunked_array([pa.array(cells, pa.string())])
    assert holds(column, literal).equals(pc.match_substring(column, literal))


# a day of times and far from it, either side of the epoch, to the unit of each column
_MICROS = st.integers(min_value=-62_135_596_800_000_000, max_value=253_402_300_799_999_999)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.none() | _MICROS, max_size=12), unit=st.sampled_from(["s", "ms", "us"]))
def test_utc_times_as_to_pylist(values, unit):
    per = {"s": 1_000_000, "ms": 1_000, "us": 1}[unit]
    column = pa.chunked_array([pa.array([None if v is None else v // per for v in values], pa.timestamp(unit, "UTC"))])
    got, want = as_pylist(column), column.to_pylist()
    assert got == want
    assert [None if v is None else (v.tzinfo, v.utcoffset()) for v in got] == [
        None if v is None else (v.tzinfo, v.utcoffset()) for v in want
    ]


def test_other_columns_as_to_pylist():
    local = pa.chunked_array([pa.array([0, None], pa.timestamp("ms", "Europe/Paris"))])
    naive = pa.chunked_array([pa.array([0, None], pa.timestamp("ms"))])
    text = pa.chunked_array([["a", None], ["b"]])
    json = pa.chunked_array([pa.array(['[{"model":"m"}]', None], pa.json_()), pa.array(["[]"], pa.json_())])
    for column in (local, naive, text, json):
        assert as_pylist(column) == column.to_pylist()
    assert as_pylist(naive)[0] == dt.datetime(1970, 1, 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.sampled_from(["s1", "s2", "", "é"]), max_size=20), st.integers(1, 3))
def test_count_by_one_key_counts_each_value(values, chunks):
    size = len(values) // chunks + 1
    column = pa.chunked_array(
        [pa.array(values[i : i + size], pa.string()) for i in range(0, len(values), size)]
        or [pa.array([], pa.string())]
    )
    table = pa.table({"session_id": column})
    assert count_by(table, ["session_id"]) == {(v,): n for v, n in Counter(values).items()}


def test_count_by_several_keys_counts_each_combination():
    table = pa.table({"host": ["a", "a", "b", None, None], "sid": ["x", "x", "x", None, "y"]})
    assert count_by(table, ["host", "sid"]) == {("a", "x"): 2, ("b", "x"): 1, (None, None): 1, (None, "y"): 1}


#: tool results made of what Hermes's rule looks at, in any case, as JSON or as text
_RESULT_PIECES = [
    '{"error": "x"}',
    '{"success": false, "message": "m"}',
    '{"exit_code": 1}',
    '{"exit_code": 0}',
    '{"\\u0065rror": "x"}',
    "Error: ",
    "ERROR",
    "Failed",
    '"failed"',
    "message",
    "success",
    "exit_code",
    "\\u",
    "İ",
    "ſ",
    "K",
    "plain",
]
_RESULT = st.lists(st.sampled_from(_RESULT_PIECES) | st.text(max_size=3), max_size=4).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    cells=st.lists(st.none() | _RESULT, max_size=10),
    tool=st.sampled_from(["terminal", "memory", "write_file", "patch", "read_file", None]),
)
def test_error_screen_is_the_one_pass_screen_and_keeps_every_error(cells, tool):
    column = pa.chunked_array([pa.array(cells, pa.string())])
    got = maybe_error(column, pa.array([tool] * len(cells), pa.string()))
    if tool != "terminal":
        # the screen as a substring search of each word: the same rows
        words = [pc.match_substring(column, word, ignore_case=True) for word in ("error", "failed")]
        words += [pc.match_substring(column, word) for word in ("\\u", "message")]
        assert got.equals(pc.fill_null(functools.reduce(pc.or_, words), False).combine_chunks())
    # and it never clears a result Hermes calls an error
    for kept, content in zip(got.to_pylist(), cells):
        assert kept or not hermes_marks_error(tool, content)


#: a terminal result's pieces: its exit code as JSON spells it (any number, spacing, or key twice)
_TERMINAL_PIECES = [
    '{"exit_code"',
    '{"exit\\u005fcode": 3}',
    '"exit_code"',
    ": ",
    ":",
    " ",
    "\n",
    "\t",
    "0",
    "1",
    "-",
    ".",
    "e",
    "}",
    ",",
    "]",
]
_TERMINAL = st.lists(st.sampled_from(_TERMINAL_PIECES) | st.sampled_from(_RESULT_PIECES), max_size=8).map("".join)


@settings(max_examples=400, deadline=None)
@given(cells=st.lists(st.none() | _TERMINAL, max_size=10), among=st.lists(st.booleans(), min_size=10, max_size=10))
def test_terminal_screen_keeps_every_error(cells, among):
    tools = pa.array(["terminal"] * len(cells), pa.string())
    rows = pa.array(among[: len(cells)], pa.bool_())
    got = maybe_error(pa.chunked_array([pa.array(cells, pa.string())]), tools, rows).to_pylist()
    for kept, content, asked in zip(got, cells, among):
        assert not kept or asked  # only the rows asked
        assert kept or not asked or not hermes_marks_error("terminal", content)


def test_terminal_screen_leaves_the_code_0_to_arrow():
    cells = ['{"output": "ok", "exit_code": 0}', '{"exit_code":0 }', '{"exit_code": 0.0}', '{"exit_code": 2}']
    got = maybe_error(pa.array(cells, pa.string()), pa.array(["terminal"] * 4, pa.string()))
    assert got.to_pylist() == [False, False, True, True]
