"""TEXT cells decoded one by one (:mod:`hermes_assets.lib.source.text_cells`, SPEC §1 "Text")."""

from __future__ import annotations

from hermes_assets.lib.source.text_cells import BadText, as_text, bad_cells, bad_text_count, decode_text, text_or_none


def test_valid_utf8_is_plain_text_and_a_bad_cell_is_repaired_and_marked():
    before = bad_text_count()
    assert type(decode_text("é".encode())) is str
    bad = decode_text(b"ok \xff")
    assert bad == "ok \ufffd" and type(bad) is BadText
    assert bad_text_count() == before + 1


def test_bad_cells_name_each_repaired_cell_where_it_lands():
    selected = {"sessions": ["id", "title", "system_prompt"], "messages": ["id", "session_id", "content"]}
    unknown = {"sessions": ["mood"], "messages": []}
    sessions = [("s1", BadText("t\ufffd"), "p", BadText("m\ufffd")), ("s2", "fine", "p", "ok")]
    resolved = {"s1": {"system_prompt": "p"}, "s2": {"system_prompt": BadText("from the table\ufffd")}}
    messages = [(7, "s1", BadText("c\ufffd")), (8, "s2", "fine")]
    assert bad_cells(sessions, messages, resolved, selected, unknown) == {
        "s1": [("sessions", "title", None), ("sessions", "mood", None), ("messages", "content", 7)],
        "s2": [("sessions", "system_prompt", None)],  # the prompt its hash resolved to (D19)
    }


def test_cells_as_text():
    assert as_text(b"a\xff") == "a\ufffd" and as_text(3) == 3 and as_text(None) is None
    assert text_or_none(None) is None and text_or_none(5) == "5" and text_or_none("x") == "x"
