"""Which columns a store has, read before any row is (SPEC D20, D22).

The reader asks two things of a store's columns: whether a Hermes of schema 23
or later has opened it (its ``messages`` then carry the identity columns that
group copies of one logical message), and which ``sessions``/``messages``
columns this contract does not name (kept per row in ``extra_columns``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from hermes_assets.lib.basics.hermes_tables import V23_MESSAGE_COLUMNS

#: the ``messages`` columns the copy grouping reads, in the order of an ancestor row
IDENTITY_COLUMNS = (
    "id",
    "session_id",
    "role",
    "content",
    "timestamp",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "active",
    "message_uid",
    "display_identity",
)

#: the tables whose unknown columns are kept
EXTRA_COLUMN_TABLES = ("sessions", "messages")


def copies_apply(message_columns: Collection[str]) -> bool:
    """Whether a store with these ``messages`` columns has been opened by a Hermes of schema 23+."""
    return not V23_MESSAGE_COLUMNS.isdisjoint(message_columns)


def unknown(present: set[str], known: Iterable[tuple[str, *tuple[object, ...]]]) -> list[str]:
    """The columns of a table this contract does not name, sorted (``known``: its (name, ...) tuples)."""
    names = {column[0] for column in known}
    return sorted(c for c in present if c not in names)
