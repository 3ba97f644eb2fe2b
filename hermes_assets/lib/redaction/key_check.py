"""Whether a key passed through Hermes, and where: its markers under the warehouse's key, looked up.

A person holds a key; the warehouse holds only markers. :func:`markers` makes
the key's markers the way a capture makes them, with the redactor itself and
the warehouse's key: as each kind the sightings hold would name the key
(:meth:`Redactor.marker <hermes_assets.lib.redaction.redactor.Redactor.marker>`),
and as the redactor names what it finds inside the text given (the password of
a URL, a PEM block, the value of ``NAME=value``, a ``.env`` value). :func:`places`
looks them up in every host's sightings
(:mod:`~hermes_assets.lib.redaction.sighting_files`) and says where each was seen.
Nothing is written, and the key stays in memory: only markers leave this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.redaction.redactor import Redactor

#: quotes a pasted key may come in (``"sk-..."``, ``'sk-...'``)
_QUOTES = "\"'`"


def candidates(text: str) -> list[str]:
    """The values ``text`` may be: itself, stripped; without the quotes around it; each of its
    lines, when it has several (a pasted ``.env`` file, a PEM block's lines are harmless)."""
    whole = text.strip()
    found = {whole}
    if len(whole) > 2 and whole[0] == whole[-1] and whole[0] in _QUOTES:
        found.add(whole[1:-1].strip())
    lines = [line.strip() for line in whole.splitlines() if line.strip()]
    if len(lines) > 1:
        found.update(lines)
    return sorted(v for v in found if v)


def markers(key: bytes, text: str, kinds: Iterable[str]) -> set[str]:
    """Every marker a capture under ``key`` would have written for ``text``: each candidate value
    (:func:`candidates`) under each of ``kinds``, and whatever the redactor finds in the text and
    in each candidate, with and without the candidates as ``.env`` values."""
    values = candidates(text)
    if not values:
        return set()
    found: set[str] = set()
    for redactor in (Redactor(key), Redactor(key, values=sorted(values, key=lambda v: (-len(v), v)))):
        for cell in (text, *values):
            redactor.text(cell)
        found.update(s.marker for s in redactor.take_sightings())
        for kind in kinds:
            found.update(redactor.marker(kind, value) for value in values)
    return found


@dataclass(frozen=True)
class Place:
    """One session a key was seen in."""

    host: str
    store: str
    session_id: str
    channel: str | None
    days: tuple[str, ...]
    fields: tuple[str, ...]
    messages: int
    #: some cell of the session that holds it is still in Hermes's store
    still_in_store: bool
    last_seen: object


@dataclass(frozen=True)
class Seen:
    """What the sightings say of a key: its markers found, and the sessions it was seen in."""

    markers: tuple[str, ...]
    #: kind, prefix and last four of each marker found (what a provider's dashboard shows)
    recognised: tuple[tuple[str, str, str], ...]
    places: tuple[Place, ...]

    @property
    def still_in_store(self) -> bool:
        return any(p.still_in_store for p in self.places)


def places(sightings: pa.Table, wanted: set[str]) -> Seen:
    """Where the sightings hold one of the markers ``wanted``: per session, the days, fields and
    messages, and whether it is still in Hermes's store; the newest and still stored first."""
    hits = sightings.filter(pc.is_in(sightings.column("marker"), value_set=pa.array(sorted(wanted), pa.string())))
    sessions: dict[tuple[str, str, str], dict] = {}
    recognised = set()
    for s in hits.to_pylist():
        recognised.add((s["kind"], s["prefix"] or "", s["last4"] or ""))
        key = (s["host"], s["store"] or s["store_label"], s["session_id"])
        acc = sessions.setdefault(
            key, {"channel": s["channel"], "days": set(), "fields": set(), "messages": set(), "in": False, "seen": []}
        )
        acc["days"].add(s["day"])
        acc["fields"].add(s["field"])
        if s["message_id"] is not None:
            acc["messages"].add(s["message_id"])
        acc["in"] |= not s["source_deleted"]
        if s["seen_at"] is not None:
            acc["seen"].append(s["seen_at"])
    found = [
        Place(
            key[0],
            key[1],
            key[2],
            acc["channel"],
            tuple(sorted(acc["days"])),
            tuple(sorted(acc["fields"])),
            len(acc["messages"]),
            acc["in"],
            max(acc["seen"], default=None),
        )
        for key, acc in sessions.items()
    ]
    found.sort(key=lambda p: (p.host, p.store, p.session_id))
    found.sort(key=lambda p: max(p.days), reverse=True)  # the newest first (a stable sort each time)
    found.sort(key=lambda p: not p.still_in_store)  # and those still in Hermes's store before all
    markers_found = tuple(sorted(set(hits.column("marker").to_pylist())))
    return Seen(markers_found, tuple(sorted(recognised)), tuple(found))
