"""A session's cells as read, redacted in place before any row is built.

:func:`redact_bundles` takes the sessions of one store's day as the reader returns
them (:class:`~hermes_assets.lib.source.state_db.SessionBundle`): every TEXT cell of
the sessions, their messages and their per-model usage, and the cells of columns
a newer Hermes added, screened in one pass and redacted one by one. Ids, hashes,
enumerations and numbers are kept. What it found comes back as counts per table
and as sightings (:mod:`~hermes_assets.lib.redaction.sightings`).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from hermes_assets.lib.basics import hermes_tables
from hermes_assets.lib.redaction.redactor import Redactor
from hermes_assets.lib.redaction.sightings import Sighting, Where

#: columns never redacted: ids, hashes, enumerations, the scope path (they hold no secret, and
#: their values are the identity of the rows)
KEEP_COLUMNS = frozenset(
    {
        "id",
        "session_id",
        "parent_session_id",
        "system_prompt_hash",
        "source",
        "created_source",
        "user_id",
        "session_key",
        "chat_id",
        "chat_type",
        "thread_id",
        "cwd",
        "role",
        "tool_call_id",
        "tool_name",
        "effect_disposition",
        "finish_reason",
        "platform_message_id",
        "display_kind",
        "message_uid",
        "absorbed_message_uids",
        "tool_call_uids",
        "tool_call_uid",
    }
)


@dataclass
class BundleCounts:
    """Secrets redacted in sessions' cells, by the table they were in, and where each was seen."""

    sessions: Counter = field(default_factory=Counter)
    messages: Counter = field(default_factory=Counter)
    sightings: list[Sighting] = field(default_factory=list)


def _text_columns(columns: tuple[tuple[str, str, object], ...]) -> tuple[str, ...]:
    return tuple(name for name, sql_type, _ in columns if sql_type == "TEXT" and name not in KEEP_COLUMNS)


#: the TEXT columns redacted, per table (a number is never a secret: Hermes declares these TEXT)
SESSION_TEXT = _text_columns(hermes_tables.SESSION_COLUMNS)
MESSAGE_TEXT = _text_columns(hermes_tables.MESSAGE_COLUMNS)
USAGE_TEXT = _text_columns(hermes_tables.USAGE_COLUMNS)


@dataclass(frozen=True)
class _Table:
    """One table's rows gathered for the screen: its name, its text columns, the counts its
    secrets go to, and which of its columns hold the session's and the message's id."""

    name: str
    rows: list[dict]
    columns: tuple[str, ...]
    counts: Counter
    session_key: str
    message_key: str | None


def redact_bundles(redactor: Redactor, bundles: list[Any], *, store: str = "") -> BundleCounts:
    """Redact, in place, every text cell of the sessions as read
    (:class:`~hermes_assets.lib.source.state_db.SessionBundle`): the sessions' cells (the resolved
    system prompt, the title, ``model_config`` ...), their messages', their per-model usage
    and the cells of columns this contract does not name. Ids, hashes, numbers are kept.
    ``store``: the label the sightings carry.

    Every text cell of the sessions is screened in one pass (:meth:`Redactor.screen_column`);
    only the cells it flags are redacted, one by one."""
    counts = BundleCounts()
    redactor.take_counts()
    redactor.take_sightings()
    tables = (
        _Table("sessions", [b.session for b in bundles], SESSION_TEXT, counts.sessions, "id", None),
        _Table(
            "session_model_usage",
            [u for b in bundles for u in b.usage],
            USAGE_TEXT,
            counts.sessions,
            "session_id",
            None,
        ),
        _Table("messages", [m for b in bundles for m in b.messages], MESSAGE_TEXT, counts.messages, "session_id", "id"),
    )
    values: list = []
    #: (first index in ``values``, table, column) of each column gathered
    spans: list[tuple[int, _Table, str]] = []
    for table in tables:
        if not table.rows:
            continue
        first = table.rows[0]
        for name in table.columns:
            if name in first:
                spans.append((len(values), table, name))
                values += map(itemgetter(name), table.rows)
    starts = [span[0] for span in spans]
    for i in redactor.screen_column(values):
        start, table, name = spans[bisect.bisect_right(starts, i) - 1]
        cell = values[i]
        if isinstance(cell, bytes):  # a BLOB in a TEXT column: the text the dataset would hold
            cell = cell.decode("utf-8", "replace")
        elif not isinstance(cell, str):
            continue
        row = table.rows[i - start]
        redactor.where = _where(f"{table.name}.{name}", row, table.session_key, table.message_key, store)
        new = redactor.text(cell, screened=True)
        if new is not cell:
            row[name] = new
            table.counts.update(redactor.take_counts())
    for b in bundles:
        if b.extras:
            redactor.where = _where("sessions.extra_columns", b.session, "id", None, store)
            b.extras = _redact_tuple(b.extras, redactor.text)
            counts.sessions.update(redactor.take_counts())
        if b.message_extras:
            for mid, cells in b.message_extras.items():
                redactor.where = Where("messages.extra_columns", _id(b.session.get("id")), _id(mid), store)
                b.message_extras[mid] = _redact_tuple(cells, redactor.text)
            counts.messages.update(redactor.take_counts())
    redactor.where = Where()
    counts.sightings = list(redactor.take_sightings())
    return counts


def _id(value: Any) -> str | None:
    return None if value is None else str(value)


def _where(column: str, row: dict, session_key: str, message_key: str | None, store: str) -> Where:
    return Where(column, _id(row.get(session_key)), _id(row.get(message_key)) if message_key else None, store)


def redact_bundle(redactor: Redactor, bundle: Any, *, store: str = "") -> BundleCounts:
    """:func:`redact_bundles` of one session."""
    return redact_bundles(redactor, [bundle], store=store)


def _redact_tuple(cells: tuple, text: Callable[[str], str]) -> tuple:
    if not any(isinstance(c, str) for c in cells):
        return cells
    return tuple(text(c) if isinstance(c, str) else c for c in cells)
