"""What Hermes shows of a row, and what a canonical row says of it (SPEC D20, D21).

Hermes v0.22 marks rows for its transcript: ``display_kind`` (``hidden``,
``skill_invocation``, ``notification``, ``async_delegation_complete`` ...) and
``display_metadata`` (reactions, a skill's typed command, ``model_only``: a
row Hermes feeds the model but never shows, scaffolding rather than something
a person typed). The raw dataset carries the columns as they are; a canonical
part carries ``attributes.hermes.display_kind`` and ``model_only: true``, next
to the row's ``message_uid`` and its D20 marks (``copy_of``,
``superseded: true``). Role stays as stored.
"""

from __future__ import annotations

import json

from hermes_assets.lib.source.jsonutil import is_json, quote

#: Hermes's ``MODEL_ONLY_DISPLAY_METADATA_KEY``
MODEL_ONLY = "model_only"


def model_only(display_metadata: object) -> bool:
    """Whether Hermes keeps this row out of every display (its ``_is_model_only_row``):
    a truthy ``model_only`` in the metadata object. A cell that is not a JSON object says no."""
    if not isinstance(display_metadata, str) or MODEL_ONLY not in display_metadata:
        return False
    try:  # read as Hermes reads it (Python's own json.loads), not by our stricter jsonutil.loads
        meta = json.loads(display_metadata)
    except (ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and bool(meta.get(MODEL_ONLY))


def hermes_fragment(msg: dict, mark: tuple[str | None, bool] | None) -> str:
    """The row's own ``attributes.hermes`` members, as JSON members (``"k":v,...``), or
    ``""`` when it has none (a row of a store written before schema 23 never has any).
    Built as text: it runs once per message of every schema-31 store."""
    out = ""
    uid = msg.get("message_uid")
    if uid and isinstance(uid, str):
        out = '"message_uid":' + quote(uid)
    if mark is not None:
        copy_of, superseded = mark
        if copy_of is not None:
            out += (',"copy_of":' if out else '"copy_of":') + quote(copy_of)
        if superseded:
            out += ',"superseded":true' if out else '"superseded":true'
    kind = msg.get("display_kind")
    if kind and isinstance(kind, str):
        out += (',"display_kind":' if out else '"display_kind":') + quote(kind)
    meta = msg.get("display_metadata")
    if meta is not None and model_only(meta):
        out += ',"model_only":true' if out else '"model_only":true'
    return out


def with_fragment(attrs: str, fragment: str) -> str:
    """``attrs`` (compact JSON whose ``hermes`` object is never empty) with ``fragment``'s
    members first in its ``hermes`` object. ``"hermes":{`` cannot occur inside a JSON
    string (its quotes would be escaped), so its first occurrence is the key itself."""
    return attrs.replace('"hermes":{', '"hermes":{' + fragment + ",", 1)


def json_cell(value: object) -> str | None:
    """A JSON TEXT cell as the JSON column keeps it: the text when it is JSON (strict: no
    NaN), else None (the caller counts it: SPEC §9)."""
    return value if isinstance(value, str) and is_json(value) else None
