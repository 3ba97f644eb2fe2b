"""JSON as the datasets write and read it (SPEC §5.5), :mod:`hermes_assets.lib.source.jsonutil`."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_assets.lib.source import jsonutil

values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(blacklist_categories=("Cs",))),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), inner, max_size=4),
    ),
    max_leaves=20,
)


def test_numbers_non_ascii_and_separators():
    assert jsonutil.dumps({"a": 0.0, "b": [1.5, 2.0], "c": "é"}) == '{"a":0,"b":[1.5,2],"c":"é"}'
    assert jsonutil.loads('{"a": 3.0, "b": 1e2, "c": 0.5}') == {"a": 3, "b": 100, "c": 0.5}
    assert type(jsonutil.loads("3.0")) is int


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "1e999"])
def test_non_finite_numbers_are_not_json(text):
    with pytest.raises(ValueError):
        jsonutil.loads(text)


def test_an_escaped_lone_surrogate_becomes_a_replacement_character():
    assert jsonutil.loads('{"\\ud800k": ["\\udfff"]}') == {"\ufffdk": ["\ufffd"]}


def test_is_json_is_strict_about_constants_only():
    assert jsonutil.is_json('{"a": [1, 2.5]}') and jsonutil.is_json("1e999")
    assert not jsonutil.is_json("NaN") and not jsonutil.is_json("{") and not jsonutil.is_json("")


@pytest.mark.parametrize("text", ["abc123", "a-b", 'q"uote', "é", "back\\slash", "", "new\nline"])
def test_quote_is_json_string_encoding(text):
    assert jsonutil.quote(text) == json.dumps(text, ensure_ascii=False)


@settings(max_examples=300, deadline=None)
@given(values)
def test_what_dumps_writes_loads_reads_back_and_writes_the_same(value):
    text = jsonutil.dumps(value)
    back = jsonutil.loads(text)
    assert jsonutil.dumps(back, normalized=True) == text
    assert back == json.loads(text, parse_float=lambda s: (lambda f: int(f) if f.is_integer() else f)(float(s)))


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_an_integral_float_is_written_as_an_integer(x):
    text = jsonutil.dumps(x)
    assert ("." in text or "e" in text) == (not x.is_integer())
    assert math.isclose(float(text), x) or float(text) == x
