"""Where each secret was seen: what the redactor reports per marker it writes, never the secret.

A :class:`Sighting` says which marker replaced a secret, in which field of which
session and message, and what lets a person recognise their own key without the
warehouse holding it: the provider's literal prefix (when the rule that found it
has one) and the last four characters, as providers' dashboards show them. The
redactor collects them while it redacts (:class:`Sightings`); the capture carries
them with each staged day.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: the last characters of a secret kept to recognise it, and the shortest secret they are kept for
LAST_CHARS = 4
#: a shorter secret (a password of 8 characters) keeps none: four of eight would say too much
LAST_CHARS_FROM = 16


@dataclass(frozen=True, slots=True)
class Sighting:
    """One secret replaced by its marker: where, and how to recognise it (never the value)."""

    #: the marker written in its place, ``[REDACTED:<kind>:<8 hex>]``
    marker: str
    #: the rule that found it (``github_token``, ``secret_assignment``, ``hermes_env`` ...)
    kind: str
    #: the cell's column: ``<table>.<column>`` as read from Hermes (``messages.tool_calls``),
    #: or ``<dataset>.<column>`` in a stored file (``hermes_messages.content_text``)
    field: str
    #: inside a JSON cell, the path of the string that held it, array indexes as ``[*]``
    #: (``$[*].function.arguments``; a JSON string holding JSON continues the path); ``""``: plain text
    path: str
    session_id: str | None
    #: the message's id (Hermes's ``messages.id``, or the dataset's ``message_id``); None: a session's cell
    message_id: str | None
    #: the store's label (``""`` when the caller did not say)
    store: str
    #: the provider's literal prefix the secret starts with (``ghp_``, ``sk-ant-``); ``""``: its rule has none
    prefix: str
    #: the secret's last four characters (``""`` for a secret shorter than :data:`LAST_CHARS_FROM`)
    last4: str


def recognisable(secret: str) -> str:
    """The last characters of ``secret`` kept in a sighting (none of a short secret)."""
    return secret[-LAST_CHARS:] if len(secret) >= LAST_CHARS_FROM else ""


@dataclass
class Where:
    """The cell the redactor works on: set by the caller before each cell."""

    field: str = ""
    session_id: str | None = None
    message_id: str | None = None
    store: str = ""


@dataclass
class Sightings:
    """The sightings collected by one redactor since the last :meth:`take`, in the order made."""

    items: list[Sighting] = field(default_factory=list)

    def add(self, where: Where, path: str, marker: str, kind: str, prefix: str, secret: str) -> None:
        self.items.append(
            Sighting(
                marker,
                kind,
                where.field,
                path,
                where.session_id,
                where.message_id,
                where.store,
                prefix,
                recognisable(secret),
            )
        )

    def take(self) -> tuple[Sighting, ...]:
        taken, self.items = tuple(self.items), []
        return taken
