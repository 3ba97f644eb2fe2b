"""Each message expanded into its parts (:mod:`hermes_assets.lib.projection.parts`, SPEC §5.2, §5.3)."""

from __future__ import annotations

import json

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.projection.parts import message_parts
from tests.lib.projection.bundles import message


def _types(msg, call_names=None, tally=None):
    parts = message_parts(msg, msg["role"], {} if call_names is None else call_names, tally or ErrorTally(), "s", {})
    return [(p[0], p[1]) for p in parts]


def test_reasoning_then_tool_calls_then_the_body():
    calls = json.dumps([{"id": "a", "name": "x"}, {"call_id": "b", "function": {"name": "y"}}])
    names: dict = {}
    msg = message(1, "assistant", "answer", reasoning="why", tool_calls=calls)
    assert _types(msg, names) == [("reasoning", "why"), ("tool_call", None), ("tool_call", None), ("text", "answer")]
    assert names == {"a": "x", "b": "y"}


def test_reasoning_content_stands_in_only_when_reasoning_is_empty_and_it_is_not_blank():
    assert _types(message(1, "assistant", None, reasoning="", reasoning_content="r")) == [("reasoning", "r")]
    assert _types(message(1, "assistant", None, reasoning_content="  ")) == []


def test_a_tool_message_always_has_its_result():
    assert _types(message(1, "tool", None, tool_call_id="c")) == [("tool_result", "")]


def test_a_message_with_nothing_to_show_has_no_part():
    assert _types(message(1, "session_meta", None)) == []
    assert _types(message(1, "user", "")) == []


def test_malformed_tool_calls_are_counted_and_yield_no_part():
    tally = ErrorTally()
    assert _types(message(1, "assistant", "ok", tool_calls="{not json"), tally=tally) == [("text", "ok")]
    assert dict(tally.counts) == {errors.BAD_TOOL_CALLS: 1}
