"""The sensor's cursor: what it remembers of each store between ticks (SPEC §8), typed and versioned.

Dagster keeps the cursor as a string; this module is its one reader and
writer. Version 4, as JSON (keys sorted, no spaces, so an unchanged cursor is
the same text)::

    {"version": 4,
     "stores": {"<path>": {"label", "files", "max_mid", "seq", "rotation": {"tick", "hot", "share"},
                           "usage": [max rowid, max last_seen, [[rowid, last_seen], ...]],
                           "days": {"<day>": [tier 1, tier 2, stamp, captured]}}},
     "pending": {"<day>": "<h>"},
     "attempts": {"<day>": {"run_key", "fingerprints", "requested_at", "failures", "retry_at", "error"}},
     "failing": ["<day>", ...],
     "covered": [["<first day>", "<last day>"], ...]}

- per store: the files' identity (``[inode, size, mtime_ns]`` of the db and
  its ``-wal``), the ``messages`` and ``session_model_usage`` marks, the
  rotation, and per UTC day the two
  fingerprints of :mod:`hermes_assets.lib.changes.fingerprint`, the rotation tick of
  the tier-2 digest and the fingerprint last **captured** (the one a run that
  succeeded was asked for; ``null`` before any);
- ``pending``: changed days that are not partitions yet;
- ``attempts``: per day, the capture requested and not yet known to have
  succeeded (:mod:`hermes_assets.lib.changes.attempts`): its run key, the day's
  fingerprint in each store when it was requested, and its failures;
- ``failing``: the days last reported failing by the ``days_captured`` check;
- ``covered``: the days the sensor has requested a capture of, for any reason, as spans of
  consecutive days (:class:`Spans`): a partition day outside them that no store holds a session
  on is requested once, as a day without sessions (:mod:`hermes_assets.lib.changes.watch`).

The sensor keeps this text in the Dagster instance and shows a summary of it as the cursor
(``hermes_assets/defs/sensor_cursor.py``): with one entry per day and store it grows with the
history. A version 3 cursor (the same without ``covered``) is migrated, everything kept: its
partition days with no session are requested once, as a first start would. Older cursors are
reset, with one warning: their fingerprints cannot be compared with these (version 3 watches more
columns and tables), so every day of every store is requested once, which also writes the new
columns into days captured before; days pending are kept. A cursor of an unknown version, or one
that is not JSON, is reset the same way.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from hermes_assets.lib.basics.logs import get_logger

log = get_logger()

CURSOR_VERSION = 4
#: the version before ``covered``: migrated, everything kept
MIGRATED_VERSION = 3

#: the identity of a store's files: ``{"db": [ino, size, mtime_ns], "wal": [...] | None}``
FileIdentity = dict


@dataclass
class DayMark:
    """One day of one store: its fingerprints now, and the one last captured."""

    tier1: str
    tier2: str | None
    stamp: int  # the rotation tick at which tier 2 was computed
    captured: str | None = None  # :attr:`fingerprint` when a run that succeeded was requested

    @property
    def fingerprint(self) -> str:
        return self.tier1 + (self.tier2 or "")

    def to_json(self) -> list:
        return [self.tier1, self.tier2, self.stamp, self.captured]

    @classmethod
    def from_json(cls, value: list) -> DayMark:
        tier1, tier2, stamp, *rest = value
        return cls(tier1, tier2, stamp, rest[0] if rest else None)


@dataclass
class Rotation:
    """The tier-2 rotation of one store: its tick counter, how many more ticks it runs, days per tick."""

    tick: int = 0
    hot: int = 0
    share: int = 0


@dataclass
class StoreState:
    """What the cursor knows of one store."""

    label: str
    files: FileIdentity | None
    max_mid: int | None
    seq: int | None
    days: dict[str, DayMark] = field(default_factory=dict)
    rotation: Rotation = field(default_factory=Rotation)
    #: ``session_model_usage`` marks: ``[max rowid, max last_seen, [[rowid, last_seen] of the last
    #: seconds]]`` (:func:`~hermes_assets.lib.changes.usage_marks.usage_changes`); None: no table
    usage: list | None = None

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "files": self.files,
            "max_mid": self.max_mid,
            "seq": self.seq,
            "days": {d: m.to_json() for d, m in self.days.items()},
            "rotation": {"tick": self.rotation.tick, "hot": self.rotation.hot, "share": self.rotation.share},
            "usage": self.usage,
        }

    @classmethod
    def from_json(cls, value: dict) -> StoreState:
        return cls(
            label=value.get("label", ""),
            files=value.get("files"),
            max_mid=value.get("max_mid"),
            seq=value.get("seq"),
            days={d: DayMark.from_json(m) for d, m in (value.get("days") or {}).items()},
            rotation=Rotation(**(value.get("rotation") or {})),
            usage=value.get("usage"),
        )


@dataclass
class Attempt:
    """The capture of one day, requested and not yet known to have succeeded."""

    run_key: str
    #: store path -> the day's fingerprint in that store when it was requested (stores that hold the day)
    fingerprints: dict[str, str]
    requested_at: float
    #: runs of this day that failed (or were canceled, or lost) in a row
    failures: int = 0
    #: the run failed: when to request the day again (None while the run is in flight)
    retry_at: float | None = None
    #: how the last run ended, when it did not succeed ("failed", "canceled", "lost")
    error: str | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, value: dict) -> Attempt:
        return cls(**value)


@dataclass
class Spans:
    """A set of UTC days kept as sorted spans of consecutive days (``[[first, last], ...]``): a
    history of a thousand days the sensor has covered is one span, not a thousand entries."""

    spans: list[list[str]] = field(default_factory=list)

    def __contains__(self, day: str) -> bool:
        return any(first <= day <= last for first, last in self.spans)

    def add(self, days: Iterable[str]) -> None:
        """Add ``days`` (ISO dates), merging spans that touch."""
        merged = sorted(
            [dt.date.fromisoformat(a), dt.date.fromisoformat(b)] for a, b in [*self.spans, *([d, d] for d in days)]
        )
        out: list[list[dt.date]] = []
        for first, last in merged:
            if out and first <= out[-1][1] + dt.timedelta(days=1):
                out[-1][1] = max(out[-1][1], last)
            else:
                out.append([first, last])
        self.spans = [[a.isoformat(), b.isoformat()] for a, b in out]

    def days(self) -> int:
        """How many days the spans hold."""
        return sum((dt.date.fromisoformat(b) - dt.date.fromisoformat(a)).days + 1 for a, b in self.spans)


@dataclass
class Cursor:
    """The whole cursor: every store the sensor has read, and the days it is waiting for."""

    stores: dict[str, StoreState] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    failing: list[str] = field(default_factory=list)
    #: the days a capture was requested of, for any reason (a partition day outside them with no
    #: session in any store is requested once, as a day without sessions)
    covered: Spans = field(default_factory=Spans)
    #: not read from a cursor of this version (none yet, reset): to be written out
    reset: bool = field(default=False, compare=False)

    def dump(self) -> str:
        return json.dumps(
            {
                "version": CURSOR_VERSION,
                "stores": {p: s.to_json() for p, s in self.stores.items()},
                "pending": self.pending,
                "attempts": {d: a.to_json() for d, a in self.attempts.items()},
                "failing": self.failing,
                "covered": self.covered.spans,
            },
            sort_keys=True,
            separators=(",", ":"),
        )


def load_cursor(text: str | None) -> Cursor:
    """The cursor of ``text``; an absent one is empty, an old one migrated, a broken one reset."""
    if not text:
        return Cursor(reset=True)
    try:
        raw = json.loads(text)
    except ValueError:
        return _reset("not JSON")
    version = raw.get("version") if isinstance(raw, dict) else None
    try:
        if version in (CURSOR_VERSION, MIGRATED_VERSION):  # version 3: the same, without ``covered``
            return Cursor(
                stores={p: StoreState.from_json(s) for p, s in raw.get("stores", {}).items()},
                pending=dict(raw.get("pending") or {}),
                attempts={d: Attempt.from_json(a) for d, a in (raw.get("attempts") or {}).items()},
                failing=list(raw.get("failing") or []),
                covered=Spans([[str(a), str(b)] for a, b in raw.get("covered") or []]),
                reset=version != CURSOR_VERSION,  # written out in this version
            )
        if version in (1, 2):
            log.warning(
                "hermes.sensor.cursor_reset",
                from_version=version,
                stores=len(raw.get("stores") or {}),
                reason=f"fingerprints of cursor version {version} are not comparable with version "
                f"{CURSOR_VERSION}'s (more columns and tables watched): every day is requested once",
            )
            return Cursor(pending=dict(raw.get("pending") or {}), reset=True)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a cursor edited or cut short
        return _reset(f"version {version} but malformed ({type(exc).__name__}: {exc})")
    return _reset(f"unknown cursor version {version!r}")


def _reset(reason: str) -> Cursor:
    log.warning("hermes.sensor.cursor_reset", reason=f"{reason}: every day of every store is requested once")
    return Cursor(reset=True)
