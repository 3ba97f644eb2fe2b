"""Run the core library end to end on one store: read it, project all three datasets.

This is what the Dagster assets do per partition, minus policy resolution (every
session is ``full`` unless a test says otherwise) and minus partition files.
Tests assert on the returned tables or on :func:`rows`, a decoded view of them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from hermes_assets.lib import policy, schemas
from hermes_assets.lib.errors import ErrorTally
from hermes_assets.lib.projection import (
    GatewayColumns,
    NoGit,
    ProjectionContext,
    message_rows,
    messages_columns,
    project_session,
    session_row,
    session_scope,
    sessions_columns,
)
from hermes_assets.lib.state_db import Store, StoreReader

#: the fixed "now" of every deterministic projection in the tests (2026-09-21)
NOW_S = 1790000000.0
USER_HOME = "/home/hermes-user"
#: the store path HypAware's parity rows were made with (what source_path_hash hashes)
CANONICAL_STORE_PATH = "/home/hermes-user/.hermes/state.db"

JSON_COLUMNS = frozenset(f.name for f in schemas.AI_GATEWAY_MESSAGES if f.type == schemas.JSON) | {
    "usage_by_model",
    "content_json",
}


def default_ctx(git=None, now_s: float = NOW_S) -> ProjectionContext:
    return ProjectionContext(user_home=USER_HOME, now_s=now_s, git=git if git is not None else NoGit())


@dataclass
class Projection:
    """The three datasets of one store, plus the cell errors seen reading and projecting it."""

    gateway: pa.Table
    sessions: pa.Table
    messages: pa.Table
    reader_tally: ErrorTally
    projection_tally: ErrorTally
    days: dict = field(default_factory=dict)

    @property
    def tally(self) -> ErrorTally:
        merged = ErrorTally(max_samples=1000)
        merged.merge(self.reader_tally)
        merged.merge(self.projection_tally)
        return merged

    def rows(self, session_id: str | None = None) -> list[dict]:
        """Decoded gateway rows (of one ``session_id`` when given), in canonical order."""
        return rows(self.gateway, session_id)

    def session_rows(self, sid: str, label: str = "") -> list[dict]:
        return self.rows("hermes-" + (f"{label}:{sid}" if label else sid))


def project_store(
    path: Path | str,
    *,
    store: Store | None = None,
    as_store: Store | None = None,
    ctx: ProjectionContext | None = None,
    policy_classes: dict | None = None,
    now_s: float = NOW_S,
) -> Projection:
    """Read ``path`` (or ``store``) and project every session of every day.

    ``as_store`` re-labels the bundles before projecting, so a temp copy can be
    projected as if it lived at another path (``CANONICAL_STORE_PATH``): the
    reader opens the real file, the rows name the canonical one.
    Sessions with no sane time at all (day ``None``) are projected too, so the
    projection reports them.
    """
    store = store or Store(str(path))
    ctx = ctx or default_ctx(now_s=now_s)
    policy_classes = policy_classes or {}
    gateway, sessions, messages = GatewayColumns(), sessions_columns(), messages_columns()
    tally = ErrorTally(max_samples=1000)
    with StoreReader(store, now_s=now_s, tally=ErrorTally(max_samples=1000)) as reader:
        days = reader.days()
        order = sorted(days, key=lambda d: (d is None, d or ""))
        for bundle in reader.iter_sessions(order):
            if as_store is not None:
                bundle = dataclasses.replace(bundle, store=as_store)
            cls = policy_classes.get(bundle.sid, policy.FULL)
            project_session(bundle, gateway, ctx, tally, policy_class=cls)
            if bundle.day is not None:
                scope = session_scope(bundle.session, ctx.user_home)
                session_row(bundle, sessions, day=bundle.day, scope_path=scope, policy_class=cls, now_s=now_s)
                message_rows(bundle, messages, day=bundle.day, now_s=now_s)
        reader_tally = reader.tally
    return Projection(
        _sorted(gateway.to_table(), schemas.DATASETS["ai_gateway_messages_hermes"][2]),
        _sorted(sessions.to_table(), schemas.DATASETS["hermes_sessions"][2]),
        _sorted(messages.to_table(), schemas.DATASETS["hermes_messages"][2]),
        reader_tally,
        tally,
        days,
    )


def _sorted(table: pa.Table, keys) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys]) if table.num_rows else table


# --------------------------------------------------------------------------
# decoded rows
# --------------------------------------------------------------------------


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def ms(value: dt.datetime | None) -> int | None:
    """A ``timestamp[ms, UTC]`` value as epoch milliseconds."""
    if value is None:
        return None
    return (value - _EPOCH) // dt.timedelta(milliseconds=1)


def iso(value: dt.datetime | None) -> str | None:
    """``2026-06-01T17:28:18.954Z`` (HypAware's rendering)."""
    if value is None:
        return None
    value = value.astimezone(dt.timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def rows(table: pa.Table, session_id: str | None = None) -> list[dict]:
    """Rows as dicts: JSON columns parsed, timestamps as epoch ms."""
    out = []
    for row in table.to_pylist():
        if session_id is not None and row.get("session_id") != session_id:
            continue
        for name, value in row.items():
            if name in JSON_COLUMNS and isinstance(value, str):
                row[name] = json.loads(value)
            elif isinstance(value, dt.datetime):
                row[name] = ms(value)
        out.append(row)
    return out


def column_text(table: pa.Table, name: str) -> list:
    """The stored text of a column (JSON columns: the JSON text itself)."""
    col = table.column(name)
    if isinstance(col.type, pa.ExtensionType):
        col = pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type)
    return col.to_pylist()
