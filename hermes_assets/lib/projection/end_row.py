"""The session-end row (SPEC §5.2, §5.5, D4).

It exists when ``ended_at`` is set (non-zero): role ``system``, part type
``status``, no content, at ``ended_at``, last in the session's part list. It
carries the session's *current* totals: usage, costs, API calls, per-model usage.
"""

from __future__ import annotations

from hermes_assets.lib.basics import errors, ids
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.basics.timestamps import sane_instant
from hermes_assets.lib.projection import display
from hermes_assets.lib.projection.header import SessionHeader, SessionInput
from hermes_assets.lib.source.jsonutil import dumps, normalize

#: the session row's numbers the end row names in ``attributes.hermes``, when not null
END_NUMBERS = ("end_reason", "estimated_cost_usd", "actual_cost_usd", "api_call_count")
#: the session row's totals in the end row's ``attributes.usage`` (Hermes stores input net of cache)
END_USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")

#: ``usage_by_model``'s stand-in while the end row's attributes are encoded; its JSON is then
#: put in its place (:meth:`SessionInput.usage_by_model_json`, encoded once per session). The
#: first ``"usage_by_model":`` of their text is the key itself: inside a JSON string the quotes
#: are escaped, and no key before it has that name.
_MODELS = 0
_MODELS_MEMBER = '"usage_by_model":0'


def end_row(
    item: SessionInput,
    header: SessionHeader,
    now_s: float,
    tally: ErrorTally,
) -> tuple | None:
    """The end row's tuple (``gateway.ROW_COLUMNS`` order), after the session's parts (last of the
    session: its index and its ``previous_message_id`` follow from its place); None when the session has not ended."""
    s = item.bundle.session
    if not s.get("ended_at"):  # unset, or zero
        return None
    ended_ms = sane_instant(s.get("ended_at"), now_s)
    if ended_ms is None:
        tally.add(errors.BAD_TIMESTAMP, header.scoped, None, "ended_at")
        ended_ms = header.start_ms
    end_hermes: dict[str, object] = {"session_end": True}
    for key in END_NUMBERS:
        if s.get(key) is not None:
            end_hermes[key] = normalize(s[key])
    models = item.usage_by_model_json()
    if models:
        end_hermes["usage_by_model"] = _MODELS
    members = dumps(end_hermes, normalized=True)[1:-1]
    if models:  # the session row's text of them, in the place of the stand-in
        members = members.replace(_MODELS_MEMBER, '"usage_by_model":' + models, 1)
    # the header's text (every row's attributes, encoded once per session) with these members
    # first in its ``hermes`` object and the totals after its last member: the text of
    # ``{**header.attrs, "hermes": {**end_hermes, **header.hermes}, "usage": totals}``
    usage = dumps({k: normalize(s.get(k)) for k in END_USAGE}, normalized=True)
    text = display.with_fragment(header.plain_attrs, members)[:-1] + ',"usage":' + usage + "}"
    message_id = ids.end_row_id(header.session_id)
    return (
        message_id,
        None,
        ended_ms,
        "system",
        "status",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        text,
    )
