"""A content cell's text in both datasets that hold it: the builders take a plain text cell as its
own text without calling :func:`content_text`; every cell must come out as ``content_text``
says (its text, the envelope's JSON, the problems counted), whatever it holds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.projection import raw
from hermes_assets.lib.projection.content import ENVELOPE, OVERSIZED_CHARS, content_text
from hermes_assets.lib.projection.header import SessionInput
from hermes_assets.lib.projection.parts import message_parts
from hermes_assets.lib.source.jsonutil import dumps
from hermes_assets.lib.source.text_cells import BadText
from tests.lib.projection.bundles import NOW_S, bundle, message

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
#: what a content cell can hold: text (plain, non-ASCII, an envelope good or bad, an inline data
#: URI), a cell repaired from bad UTF-8, a BLOB or a number in the TEXT column, nothing at all
CELLS = st.one_of(
    st.none(),
    _TEXT,
    _TEXT.map(lambda t: ENVELOPE + t),
    st.lists(_TEXT, max_size=3).map(lambda items: ENVELOPE + dumps([{"type": "text", "text": t} for t in items])),
    _TEXT.map(lambda t: f"see data:image/png;base64,iVBORw0KGgo= {t}"),
    _TEXT.map(BadText),
    _TEXT.map(lambda t: BadText(ENVELOPE + dumps([t]))),
    _TEXT.map(lambda t: BadText(f"data:;base64,QUJD {t}")),
    st.binary(max_size=20),
    st.integers(),
    st.sampled_from(["", " ", "données ✓", "[CONTEXT SUMMARY]: x", ENVELOPE, ENVELOPE + "{nope"]),
)


def _expected(cells: list, roles: list[str]) -> tuple[list, list, list, dict]:
    """The raw columns, each message's body part text and the tallies, cell by cell through
    :func:`content_text` (what the builders did for every cell before)."""
    texts, envelopes, bodies = [], [], []
    tally_raw, tally_parts = ErrorTally(), ErrorTally()
    for mid, (cell, role) in enumerate(zip(cells, roles, strict=True), start=1):
        text, envelope = content_text(cell, tally_raw, "s", mid, {})
        texts.append(text)
        envelopes.append(None if envelope is None else dumps(envelope, normalized=True))
        if role == "tool":
            body, _ = content_text(cell, tally_parts, "s", mid, {})
            bodies.append("" if body is None else body)
        elif cell and isinstance(cell, str):
            bodies.append(content_text(cell, tally_parts, "s", mid, {})[0])
        else:
            bodies.append(None)
    return texts, envelopes, bodies, {"raw": tally_raw.as_dict(), "parts": tally_parts.as_dict()}


def _built(cells: list, roles: list[str], parts_first: bool = False) -> tuple[list, list, list, dict]:
    """The content columns and the parts' bodies the builders make of ``cells``; ``parts_first``: as a
    capture builds a session, its canonical parts first, then its raw rows, through one
    :class:`SessionInput` (the cells the parts found plain are told to the raw rows)."""
    msgs = [message(mid, role=role, content=cell) for mid, (cell, role) in enumerate(zip(cells, roles), start=1)]
    item = SessionInput(bundle(*msgs))
    tally_raw, tally_parts = ErrorTally(), ErrorTally()
    out = raw.messages_columns(NOW_S, tally_raw)
    if not parts_first:
        raw.message_rows(item, out)
    shared = (item.decoded, item.plain) if parts_first else ({},)
    bodies = []
    for msg, role in zip(msgs, roles, strict=True):
        body = [p for p in message_parts(msg, role, {}, tally_parts, "s", *shared) if p[0] in ("text", "tool_result")]
        bodies.append(body[0][1] if body else None)
    if parts_first:
        raw.message_rows(item, out)
    texts, envelopes = out.derived["content_text"], out.derived["content_json"]
    return texts, envelopes, bodies, {"raw": tally_raw.as_dict(), "parts": tally_parts.as_dict()}


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(CELLS, st.sampled_from(["user", "assistant", "tool"])), min_size=1, max_size=8))
def test_every_content_cell_comes_out_as_content_text_says(cells_and_roles):
    cells = [c for c, _ in cells_and_roles]
    roles = [r for _, r in cells_and_roles]
    expected, built = _expected(cells, roles), _built(cells, roles)
    assert built == expected
    # the same objects: a repaired cell stays the BadText it was (its bad_text count follows it)
    for text, cell in zip(built[0], cells, strict=True):
        if isinstance(cell, str) and text == cell:
            assert type(text) is type(cell)


@pytest.mark.parametrize("cell", ["x" * (OVERSIZED_CHARS + 1), ENVELOPE + dumps(["y" * OVERSIZED_CHARS])])
def test_an_oversized_cell_is_counted_by_both_builders(cell):
    for role in ("user", "tool"):
        assert _built([cell], [role]) == _expected([cell], [role])
        assert _built([cell], [role])[3]["raw"] == {"oversized_cell": 1}


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(CELLS, st.sampled_from(["user", "assistant", "tool"])), min_size=1, max_size=8))
def test_every_content_cell_comes_out_as_content_text_says_when_the_parts_looked_first(cells_and_roles):
    cells = [c for c, _ in cells_and_roles]
    roles = [r for _, r in cells_and_roles]
    assert _built(cells, roles, parts_first=True) == _expected(cells, roles)


def test_the_raw_rows_trust_a_plain_cell_only_when_it_is_the_same_cell():
    """``plain`` names a cell by its message id: a message whose cell is another object (the
    same id, another cell) is looked at again, never taken as its own text."""
    envelope = ENVELOPE + dumps([{"type": "text", "text": "a"}, "b"])
    uri = "data:;base64,QUJD x"
    item = SessionInput(bundle(message(1, content=envelope), message(2, content=uri)))
    item.plain.update({1: "a\nb", 2: "".join(list(uri))})  # equal text, other objects
    assert item.plain[2] == uri and item.plain[2] is not uri
    out = raw.messages_columns(NOW_S, ErrorTally())
    raw.message_rows(item, out)
    assert out.derived["content_text"] == ["a\nb", "data:application/octet-stream;base64,<stripped> x"]
    assert out.derived["content_json"] == [dumps([{"type": "text", "text": "a"}, "b"]), None]
