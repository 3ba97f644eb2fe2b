"""Generations of reused ids: a restored store loses nothing (SPEC §6, D15).

Hermes's message ids come from an AUTOINCREMENT counter that travels with the
file: after a restore from a backup, or on a fresh store, Hermes hands out ids
it had already used. A message is therefore known by its key *and its birth*
(``role``, ``timestamp`` in ms, its session); a session by its id and its
``started_at``. A stored message whose key matches a captured row but whose
birth differs is another message: it gets the next *generation* (its ids carry
``.g<n>``, :mod:`hermes_assets.lib.basics.ids`), and the captured row stays, flagged ``replaced``.

The generation of a message is 1, or 1 + the highest generation already
captured for the same (store, sid, mid) with a different birth, in that
session's partition file (a session lives in one day: a local decision, no
other partition is read). A NULL or unparseable time matches any time.
Generation 1 keeps the plain ids, so a store that was never restored is
captured exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics.timestamps import epoch_ms
from hermes_assets.lib.source.state_db import SessionBundle

#: session -> [(generation, started_at ms)]; (session, mid) -> [(generation, role, timestamp ms)]
SessionBirths = dict[str, list[tuple[int, int | None]]]
MessageBirths = dict[tuple[str, int], list[tuple[int, str | None, int | None]]]


@dataclass
class Births:
    """What one store's rows already captured in a day's files say of their births."""

    sessions: SessionBirths = field(default_factory=dict)
    messages: MessageBirths = field(default_factory=dict)

    @classmethod
    def from_tables(cls, sessions: pa.Table | None, messages: pa.Table | None, store_path: str) -> Births:
        """From the day's ``hermes_sessions`` (id, generation, started_at) and ``hermes_messages``
        (session_id, id, generation, role, timestamp) rows of one store."""
        births = cls()
        if sessions is not None and sessions.num_rows:
            rows = sessions.filter(pc.equal(sessions.column("store"), store_path))
            for sid, gen, started in zip(
                rows.column("id").to_pylist(), _generations(rows), _ms(rows.column("started_at"))
            ):
                births.sessions.setdefault(sid, []).append((gen, started))
        if messages is not None and messages.num_rows:
            rows = messages.filter(pc.equal(messages.column("store"), store_path))
            for sid, mid, gen, role, ts in zip(
                rows.column("session_id").to_pylist(),
                rows.column("id").to_pylist(),
                _generations(rows),
                rows.column("role").to_pylist(),
                _ms(rows.column("timestamp")),
            ):
                births.messages.setdefault((sid, mid), []).append((gen, role, ts))
        return births


#: the columns :meth:`Births.from_tables` reads
SESSION_BIRTH_COLUMNS = ["store", "id", "generation", "started_at"]
MESSAGE_BIRTH_COLUMNS = ["store", "session_id", "id", "generation", "role", "timestamp"]


@dataclass
class Generations:
    """The generations of one store's sessions and messages of one day, as they are
    projected; what retention needs to judge the rows captured before (SPEC §6)."""

    #: sid -> the generation of the stored session
    sessions: dict[str, int] = field(default_factory=dict)
    #: (sid, mid) -> the generation of the stored message
    messages: dict[tuple[str, int], int] = field(default_factory=dict)
    #: stored messages and sessions whose id was captured before with another birth
    reborn: int = 0
    #: whether :meth:`assign` records each id's generation (``sessions``, ``messages``): only
    #: retention reads them, for a day that has a file; a day without one needs its counts alone
    record_ids: bool = True

    def assign(self, births: Births, bundle: SessionBundle) -> tuple[int, dict[int, int] | None]:
        """The generations of ``bundle`` against what the day's files captured (``births``):
        ``(session generation, mid -> generation or None when every message is generation 1)``."""
        sid = bundle.sid
        session, reborn = _generation(births.sessions.get(sid), (epoch_ms(bundle.session.get("started_at")),))
        self.reborn += reborn
        by_mid: dict[int, int] = {}
        record = self.messages if self.record_ids else {}
        if self.record_ids:
            self.sessions[sid] = session
        if not births.messages:
            if self.record_ids:
                for msg in bundle.messages:
                    record[(sid, msg["id"])] = 1
            return session, None
        for msg in bundle.messages:
            mid = msg["id"]
            gen, reborn = _generation(births.messages.get((sid, mid)), (msg["role"], epoch_ms(msg["timestamp"])))
            record[(sid, mid)] = by_mid[mid] = gen
            self.reborn += reborn
        return session, by_mid


def _generation(
    entries: Sequence[tuple[int, *tuple[object, ...]]] | None, birth: tuple[object, ...]
) -> tuple[int, bool]:
    """``(generation, reborn)``: 1 for a key never captured; the generation of the captured
    row with the same birth; else one more than the highest captured, a generation never
    captured before (``reborn``: the replacement is seen now)."""
    if not entries:
        return 1, False
    same = [entry[0] for entry in entries if _same_birth(entry[1:], birth)]
    if same:
        return max(same), False
    return max(entry[0] for entry in entries) + 1, True


def _same_birth(captured: tuple, stored: tuple) -> bool:
    return all(a is None or b is None or a == b for a, b in zip(captured, stored))


def _generations(table: pa.Table) -> list[int]:
    return pc.fill_null(table.column("generation"), 1).to_pylist()


def _ms(column: pa.ChunkedArray) -> list[int | None]:
    """A ``timestamp[ms]`` column as epoch ms."""
    return pc.cast(column, pa.int64()).to_pylist()
