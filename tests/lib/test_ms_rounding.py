"""One millisecond rounding, three engines (SPEC §5.1): :func:`round_ms` is the rule; its Arrow
form (the raw datasets' time columns) and its SQL form (the sensor's day placement) are held
against it on random floats: ``.5`` boundaries, values just either side of them, large and
negative values, and integers (an INTEGER cell).
"""

from __future__ import annotations

import math
import sqlite3

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hermes_assets.lib.basics.timestamps import epoch_ms, round_ms, round_ms_array, round_ms_sql

#: the ms of every value tested fit in 64 bits (SQLite's CAST clamps beyond them)
LIMIT_S = 9.0e15


def _half(ms: int) -> float:
    """A value whose ms are exactly ``ms + 0.5`` before rounding, when a float can say so."""
    return (ms + 0.5) / 1000


seconds = st.one_of(
    st.floats(min_value=-LIMIT_S, max_value=LIMIT_S, allow_nan=False),
    st.floats(min_value=-1e4, max_value=1e4, allow_nan=False),
    st.floats(min_value=946_684_800.0, max_value=4_102_444_800.0),  # 2000 .. 2100, where Hermes writes
    st.integers(min_value=-(10**12), max_value=10**12).map(_half),
    st.integers(min_value=-(10**12), max_value=10**12).map(lambda ms: math.nextafter(_half(ms), math.inf)),
    st.integers(min_value=-(10**12), max_value=10**12).map(lambda ms: math.nextafter(_half(ms), -math.inf)),
)
EXAMPLES = [0.0, -0.0, 0.0005, -0.0005, 0.0015, -0.0015, 1780304400.1235, -1.0, 1e-12, -1e-12, LIMIT_S, -LIMIT_S]


def _sql(conn: sqlite3.Connection, values: list) -> list:
    conn.execute("DELETE FROM t")
    conn.executemany("INSERT INTO t(x) VALUES (?)", [(v,) for v in values])
    return [r[0] for r in conn.execute(f"SELECT {round_ms_sql('x')} FROM t ORDER BY rowid")]


def test_the_rule_rounds_half_up():
    assert [round_ms(x) for x in (0.0005, 0.0015, -0.0005, -0.0015, 1.2344, 1.2346)] == [1, 2, 0, -1, 1234, 1235]
    assert round_ms(1780304400.123456) == epoch_ms(1780304400.123456) == 1780304400123
    assert round_ms(7) == 7000


@settings(max_examples=2000, deadline=None)
@given(st.lists(seconds, min_size=1, max_size=40))
@example(EXAMPLES)
def test_the_sql_form_is_the_rule(values):
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x)")  # no type affinity: REAL stays REAL, INTEGER stays INTEGER
    assert _sql(conn, values) == [round_ms(v) for v in values]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=-(10**12), max_value=10**12), min_size=1, max_size=20))
def test_the_sql_form_of_an_integer_cell_is_the_rule(values):
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x)")
    assert _sql(conn, values) == [round_ms(v) for v in values]


def test_the_sql_form_keeps_null():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x)")
    assert _sql(conn, [None, 1.5]) == [None, 1500]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.one_of(seconds, st.none()), min_size=1, max_size=40))
@example(EXAMPLES)
def test_the_arrow_form_is_the_rule(values):
    array = round_ms_array(pa.array([None if v is None else float(v) for v in values], pa.float64()))
    assert [None if v is None else int(v) for v in array.to_pylist()] == [
        None if v is None else round_ms(float(v)) for v in values
    ]
