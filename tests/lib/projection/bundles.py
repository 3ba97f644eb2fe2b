"""Hand-made sessions for the projection's unit tests: a :class:`SessionBundle` as the reader
gives it (cells as Hermes stores them), without a store."""

from __future__ import annotations

from hermes_assets.lib.basics.hermes_tables import MESSAGE_COLUMNS, SESSION_COLUMNS
from hermes_assets.lib.source.state_db import SessionBundle
from hermes_assets.lib.source.stores import Store

T0 = 1780304400.0  # 2026-06-01T09:00:00Z
NOW_S = 1790000000.0


def message(mid: int, role: str = "user", content="hi", **cells) -> dict:
    msg = {name: default for name, _, default in MESSAGE_COLUMNS}
    msg.update(id=mid, session_id="s", role=role, content=content, timestamp=T0 + mid, active=1)
    msg.update(cells)
    return msg


def bundle(*messages: dict, sid: str = "s", store: Store | None = None, **session) -> SessionBundle:
    row = {name: default for name, _, default in SESSION_COLUMNS}
    row.update(id=sid, source="cli", started_at=T0)
    row.update(session)
    for m in messages:
        m["session_id"] = sid
    return SessionBundle(store or Store("/h/.hermes/state.db"), sid, "2026-06-01", row, list(messages), [])
