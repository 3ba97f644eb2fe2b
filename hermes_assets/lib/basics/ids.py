"""Every id the datasets carry, built and parsed here and nowhere else (SPEC §1, §5.2, §6).

* The *scoped sid* keeps two stores' sessions apart: ``sid``, or ``<label>:<sid>``
  for a store with a label (§1); on a host whose label is set (several hosts, one
  warehouse) the host leads the label: ``<host>:<sid>``, ``<host>/<label>:<sid>``.
* A canonical ``session_id`` is ``hermes-<scoped sid>``, with ``.g<n>`` after it for
  the n-th session that reused the id in one day file (a restored store, D15);
  ``parent_thread_id`` names the parent the same way (generation 1).
* A part's ``message_id`` is ``<session_id>-<mid>[.g<n>]-<k>`` (``k``: the part's
  position in its message, ``.g<n>``: the message's generation), its ``part_id``
  the message id and ``#0``. The session-end row is ``<session_id>-session_end``.
* ``copy_of`` (D20) names the first row of a logical message: ``<scoped sid>-<mid>``.

Generation 1 adds nothing, so a store that was never restored keeps the ids
HypAware gives. Parsing reads a row's ids back with the scoped sid it already
knows (a canonical row's attributes carry it): a sid may hold any character,
``-``, ``:`` and ``.g2`` included, so an id alone is not always unambiguous.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

PREFIX = "hermes-"
#: the last part of the session-end row's ids
END_ROW = "session_end"
#: a part id is its message id and this (a canonical row holds one part: ``part_index`` 0)
PART_SUFFIX = "#0"
#: what a generation above 1 adds to an id (the digits are the generation)
_GENERATION = re.compile(r"\.g([0-9]+)")
#: the same, at the end of a column of ids (Arrow's regex dialect)
_GENERATION_AT_END = r"\.g[0-9]+$"


def scoped_sid(label: str | None, sid: str) -> str:
    """``sid``, or ``<label>:<sid>`` for a store with a label (SPEC §1)."""
    return f"{label}:{sid}" if label else sid


def host_scope(host: str | None, store_label: str) -> str:
    """The label that scopes a store's ids on a host (the store's ``label``, then :func:`scoped_sid`).

    ``host`` is None on a host whose label was not set: one host, its ids as they always
    were. A host whose label is set is one of several writing one warehouse, and its label
    joins the scope: ``<host>`` for its default store, ``<host>/<store label>`` for the
    others, so two hosts whose Hermes session ids collide keep both sessions apart.
    """
    if not host:
        return store_label
    return f"{host}/{store_label}" if store_label else host


def suffix(generation: int) -> str:
    """What a generation adds to an id: nothing for the first, ``.g<n>`` after (D15)."""
    return "" if generation <= 1 else f".g{generation}"


def generation_of(tail: str) -> int:
    """The generation an id's tail says: ``""`` -> 1, ``".g2"`` -> 2 (the reverse of :func:`suffix`)."""
    match = _GENERATION.fullmatch(tail)
    return int(match.group(1)) if match else 1


def session_id(label: str | None, sid: str, generation: int = 1) -> str:
    """A session's canonical ``session_id``: ``hermes-<scoped sid>[.g<n>]`` (SPEC §1, D15)."""
    return PREFIX + scoped_sid(label, sid) + suffix(generation)


def canonical(session: str) -> str:
    """A session as a user names it (a raw or scoped sid, or a canonical id) -> its canonical id."""
    return session if session.startswith(PREFIX) else PREFIX + session


def message_prefix(session: str) -> str:
    """What every part id of a session starts with (``session``: its canonical id)."""
    return session + "-"


def part_stem(prefix: str, mid: int, generation: int = 1) -> str:
    """What the ids of message ``mid``'s parts start with (``prefix``: the session's
    :func:`message_prefix`): part ``k``'s ``message_id`` is the stem and ``k``. One call
    per message on the projection's hot path, so no call inside."""
    return f"{prefix}{mid}-" if generation <= 1 else f"{prefix}{mid}.g{generation}-"


def message_id(session: str, mid: int, generation: int, k: int) -> str:
    """The ``message_id`` of part ``k`` of message ``mid`` (SPEC §5.2, D15)."""
    return f"{part_stem(message_prefix(session), mid, generation)}{k}"


def part_id(message: str) -> str:
    """The ``part_id`` of a canonical row, from its ``message_id``."""
    return message + PART_SUFFIX


def end_row_id(session: str) -> str:
    """The ``message_id`` of a session's end row (SPEC §5.2)."""
    return message_prefix(session) + END_ROW


def is_end_row(message: str) -> bool:
    return message.endswith("-" + END_ROW)


def copy_of(scoped: str, mid: int) -> str:
    """``copy_of`` of a copy: the first row of its logical message (D20)."""
    return f"{scoped}-{mid}"


def session_generation(session: str, label: str | None, sid: str) -> int:
    """The generation a canonical ``session_id`` says, for the session ``label``/``sid``
    (1 when the id is not one of that session's)."""
    base = session_id(label, sid)
    return generation_of(session[len(base) :]) if session.startswith(base) else 1


def message_generation(message: str, session: str, mid: int) -> int:
    """The generation of message ``mid`` that a part's ``message_id`` says (``session``: the
    row's ``session_id``): ``<session>-<mid>[.g<n>]-<k>``."""
    mid_text = message[len(session) + 1 :].rpartition("-")[0]
    return generation_of(mid_text[len(str(mid)) :])


def without_generation(sessions: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A column of canonical ``session_id``s with any ``.g<n>`` taken off the end: the id of
    the session's first generation, for a sid that does not itself end like one."""
    return pc.replace_substring_regex(sessions, pattern=_GENERATION_AT_END, replacement="")
