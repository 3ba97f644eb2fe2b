"""Every id, built and parsed by :mod:`hermes_assets.lib.basics.ids` (SPEC §1, §5.2, §6 D15, D20).

The property tests build ids from awkward sids and labels (colons, dashes, dots,
sids that already end like a generation, unicode, labels with slashes) and read
them back the way retention and the purge do.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_assets.lib.basics import ids

AWKWARD = [
    "s1",
    "a-b-c",
    "x.g2",
    "x.g",
    ".g7",
    "lab:sid",
    "hermes-abc",
    "-",
    "12",
    "20260701_120000_abcdef",
    "ünï-cødé.g3",
    "日本語",
    "a b",
]
sids = st.one_of(st.sampled_from(AWKWARD), st.text(st.characters(blacklist_categories=("Cs",)), min_size=1))
labels = st.one_of(
    st.sampled_from(["", "work", "team/alice", "a:b", "p-1.g2", "ßprofile"]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
)
generations = st.integers(min_value=1, max_value=10**6)
mids = st.integers(min_value=0, max_value=2**63 - 1)


def test_the_ids_of_the_spec():
    assert ids.scoped_sid("", "s1") == "s1"
    assert ids.scoped_sid("work", "s1") == "work:s1"
    assert ids.session_id("", "s1") == "hermes-s1"
    assert ids.session_id("work", "s1", 3) == "hermes-work:s1.g3"
    assert ids.message_id("hermes-s1", 7, 1, 0) == "hermes-s1-7-0"
    assert ids.message_id("hermes-s1.g2", 7, 2, 1) == "hermes-s1.g2-7.g2-1"
    assert ids.part_id("hermes-s1-7-0") == "hermes-s1-7-0#0"
    assert ids.end_row_id("hermes-s1.g2") == "hermes-s1.g2-session_end"
    assert ids.copy_of("work:s1", 4) == "work:s1-4"
    assert ids.canonical("s1") == ids.canonical("hermes-s1") == "hermes-s1"


@settings(max_examples=300, deadline=None)
@given(generations)
def test_a_generation_suffix_reads_back(generation):
    assert ids.generation_of(ids.suffix(generation)) == generation
    assert (ids.suffix(generation) == "") == (generation == 1)


@settings(max_examples=500, deadline=None)
@given(labels, sids, generations)
def test_a_session_id_reads_back_with_its_session(label, sid, generation):
    session = ids.session_id(label, sid, generation)
    assert session.startswith(ids.PREFIX)
    assert ids.session_generation(session, label, sid) == generation
    assert ids.canonical(session) == session
    if not ids.scoped_sid(label, sid).startswith(ids.PREFIX):
        assert ids.canonical(ids.scoped_sid(label, sid)) == ids.session_id(label, sid)


@settings(max_examples=500, deadline=None)
@given(labels, sids, generations, mids, generations, st.integers(min_value=0, max_value=50))
def test_a_part_id_reads_back_with_its_session(label, sid, session_gen, mid, message_gen, k):
    session = ids.session_id(label, sid, session_gen)
    message = ids.message_id(session, mid, message_gen, k)
    assert message.startswith(ids.message_prefix(session))
    assert ids.message_generation(message, session, mid) == message_gen
    assert ids.session_generation(session, label, sid) == session_gen
    assert not ids.is_end_row(message)
    assert ids.part_id(message) == message + "#0"
    assert f"{ids.part_stem(ids.message_prefix(session), mid, message_gen)}{k}" == message
    end = ids.end_row_id(session)
    assert ids.is_end_row(end) and end.startswith(ids.message_prefix(session))


@settings(max_examples=500, deadline=None)
@given(labels, sids, generations)
def test_the_purge_finds_every_generation_of_a_session(label, sid, generation):
    """The purge names a session by its first generation's id and matches a row by its
    ``session_id`` or that id without its ``.g<n>`` (one vectorized pass)."""
    purged = {ids.session_id(label, sid)}
    session = ids.session_id(label, sid, generation)
    (base,) = ids.without_generation(pa.array([session])).to_pylist()
    assert session in purged or base in purged


def test_a_sid_that_ends_like_a_generation_is_read_with_its_own_sid():
    """``hermes-x.g2`` is session ``x.g2`` (generation 1) or ``x`` (generation 2): the id alone
    cannot say, so readers pass the sid they know (a canonical row's ``native_id``)."""
    assert ids.session_id("", "x.g2") == ids.session_id("", "x", 2)
    assert ids.session_generation("hermes-x.g2", "", "x.g2") == 1
    assert ids.session_generation("hermes-x.g2", "", "x") == 2


def test_a_session_id_of_another_session_reads_as_generation_one():
    assert ids.session_generation("hermes-other.g4", "", "s1") == 1
