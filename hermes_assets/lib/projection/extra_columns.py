"""Columns of a Hermes newer than this contract (SPEC D22).

The datasets name every column of schema 31. A ``sessions`` or ``messages``
column the contract does not name is still read (by name, like the others)
and kept per row in ``extra_columns``: a JSON object ``{name: value}``, a BLOB
as base64, so a newer Hermes loses nothing before the project learns its
columns. Each run reports such columns once per store, as an
``unknown_columns`` warning naming them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

from hermes_assets.lib.source.jsonutil import dumps


def encode(names: list[str], values: Iterable[object]) -> str | None:
    """One row's unknown cells as a JSON object (None when the store has no unknown column)."""
    if not names:
        return None
    return dumps({name: _value(value) for name, value in zip(names, values)}, normalized=True)


def _value(value: object) -> object:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None  # not JSON (SQLite stores no NaN, but an infinity can be written)
        return int(value) if value.is_integer() else value  # SPEC §5.5 "JSON numbers"
    return value
