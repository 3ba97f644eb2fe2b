"""``python -m hermes_assets.secrets check``: did a key you hold pass through Hermes, and where?

The key is read from stdin, never from the command line (an argument stays in
the shell's history and in every process listing): pipe it from a file
(``python -m hermes_assets.secrets check < key.txt``) or run the command and
paste it (not shown). Its markers are computed with the warehouse's redaction
key, the way a capture makes them
(:func:`hermes_assets.lib.redaction.key_check.markers`), and looked up in the
sightings of every host of the warehouse. The answer names the marker, the
kind, the provider's prefix and last four characters, and each session it was
seen in: host, store, channel, days, fields, and whether it is still in
Hermes's store. The key is never printed, logged or written; nothing is written
anywhere.

Exit status: 0 the key was seen, 1 it was not, 2 a mistake (a key given on the
command line, no key on stdin, a bad setting, no redaction key, no warehouse).
The settings are the capture's (``HERMES_ASSETS_WAREHOUSE``,
``HERMES_ASSETS_REDACTION_KEY``, ``DAGSTER_HOME``): run it where Dagster runs.
"""

from __future__ import annotations

import getpass
import os
import sys
from typing import TextIO

from hermes_assets.defs import settings
from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.redaction import key_check, sighting_files, sources
from hermes_assets.lib.warehouse.datasets import Warehouse

EXIT_SEEN, EXIT_NOT_SEEN, EXIT_MISTAKE = 0, 1, 2
USAGE = "usage: python -m hermes_assets.secrets check < key.txt   (or run it and paste the key: it is not shown)"
PROMPT = "paste the key (it is not shown), then Enter: "


class Mistake(Exception):
    """A one-line refusal (exit status 2)."""


def main(argv: list[str], stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    stdin, out = stdin or sys.stdin, out or sys.stdout
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE, file=out)
        return EXIT_SEEN
    try:
        if argv[:1] != ["check"]:
            raise Mistake(USAGE)
        if argv[1:]:  # never echoed: it may be the key
            raise Mistake(
                "check reads the key from stdin, never from the command line (an argument stays in your shell's "
                "history and in the process list): python -m hermes_assets.secrets check < key.txt"
            )
        return check(_read_key(stdin), out)
    except Mistake as exc:
        print(f"hermes_assets.secrets: {exc}", file=sys.stderr)
        return EXIT_MISTAKE


def _read_key(stdin: TextIO) -> str:
    text = getpass.getpass(PROMPT) if stdin.isatty() else stdin.read()
    if not text.strip():
        raise Mistake("no key on stdin: python -m hermes_assets.secrets check < key.txt")
    return text


def check(text: str, out: TextIO) -> int:
    """Look ``text`` up in the warehouse the settings name; print where it was seen."""
    try:
        loaded = settings.load()
    except ConfigurationError as exc:
        raise Mistake(str(exc)) from None
    key = _warehouse_key(loaded.redaction_key)
    warehouse = Warehouse(loaded.warehouse, spool=loaded.spool, host=loaded.host)
    if warehouse.storage.local and not os.path.isdir(warehouse.root):
        raise Mistake(
            f"no warehouse at {warehouse.root}: set HERMES_ASSETS_WAREHOUSE (or DAGSTER_HOME) as Dagster has it"
        )
    sightings = sighting_files.read_all(warehouse)
    kinds = sorted(set(sightings.column("kind").to_pylist()))
    seen = key_check.places(sightings, key_check.markers(key, text, kinds))
    if not seen.places:
        secrets = len(set(sightings.column("marker").to_pylist()))
        hosts = sorted(set(sightings.column("host").to_pylist()))
        print(
            f"not seen: no marker of this key is among the {secrets} secret(s) the warehouse {warehouse.uri} saw "
            f"(hosts: {', '.join(hosts) or 'none'}). A host that captures with another redaction key names the same "
            "key with other markers: docs/redaction.md says how to share one key.",
            file=out,
        )
        return EXIT_NOT_SEEN
    _report(seen, out)
    return EXIT_SEEN


def _warehouse_key(path: str | None) -> bytes:
    """The markers' key, read (never created: nothing is written)."""
    if not path:
        raise Mistake("no redaction key: set HERMES_ASSETS_REDACTION_KEY (or DAGSTER_HOME) as Dagster has it")
    try:
        with open(path, "rb") as f:
            key = f.read()
    except OSError as exc:
        raise Mistake(
            f"no redaction key at {path} ({exc.strerror or exc}): set HERMES_ASSETS_REDACTION_KEY (or DAGSTER_HOME) "
            "as Dagster has it"
        ) from None
    problem = sources.key_too_short(len(key))
    if problem:
        raise Mistake(f"the redaction key {path} {problem}")
    return key


def _report(seen: key_check.Seen, out: TextIO) -> None:
    kinds = ", ".join(
        f"{kind} {prefix}…{last4}" if last4 else f"{kind} {prefix}".rstrip() for kind, prefix, last4 in seen.recognised
    )
    state = "STILL IN Hermes's store: rotate it" if seen.still_in_store else "only in rows Hermes has deleted since"
    sessions = len(seen.places)
    print(f"seen: {', '.join(seen.markers)} ({kinds}) in {sessions} session(s); {state}", file=out)
    rows = [("host", "store", "session", "channel", "days", "messages", "in store", "fields")]
    for p in seen.places:
        days = p.days[0] if len(p.days) == 1 else f"{p.days[0]}..{p.days[-1]}"
        rows.append(
            (
                p.host,
                p.store,
                p.session_id,
                p.channel or "",
                days,
                str(p.messages),
                "yes" if p.still_in_store else "no",
                ", ".join(p.fields),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1], file=out)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
