"""Hermes's time cells as instants and days: the one parser (SPEC §5.1, §2).

Hermes stores times as REAL epoch seconds (UTC, microseconds). They become
integer milliseconds as ``floor(x * 1000 + 0.5)`` (round half up, HypAware's
rule; Python's ``round()`` rounds half to even and gives other instants). A
cell stored as TEXT is read when it is a finite decimal number or an ISO-8601
instant (``YYYY-MM-DD[T ]HH:MM:SS[.f{1,9}][Z|±HH:MM]``, no zone = UTC); any
other value is not a time. An instant is *sane* between 2000-01-01 and a day
after "now": anything else is a bad timestamp (SPEC §9).

Every place that turns a time cell into an instant or a day uses this module:
the projection, the raw datasets, the day placement of sessions and the
sensor. The rounding has three forms, one per engine that runs it:
:func:`round_ms` (Python), :func:`round_ms_array` (Arrow, a column at a time)
and :func:`round_ms_sql` (SQLite, the sensor's day placement); the tests hold
the other two against :func:`round_ms`. Nothing here reads the store.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

DAY_MS = 86_400_000
#: the earliest sane instant: 2000-01-01T00:00:00Z, in seconds
SANE_MIN_S = 946_684_800.0
#: how far past "now" an instant may lie and still be sane (clock skew between writers)
SANE_AHEAD_S = 86_400.0

_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(Z|[+-]\d{2}:\d{2})?"
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def round_ms(seconds: float) -> int:
    """Epoch seconds as integer ms, rounded half up: ``floor(x * 1000 + 0.5)`` (SPEC §5.1)."""
    return int((seconds * 1000 + 0.5) // 1)


def round_ms_array(seconds: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """:func:`round_ms` of a float64 column, as float64 (NULL stays NULL)."""
    return pc.floor(pc.add(pc.multiply(seconds, 1000.0), 0.5))


def round_ms_sql(seconds: str) -> str:
    """:func:`round_ms` as a SQLite expression over the SQL expression ``seconds`` (an INTEGER
    or REAL value; NULL stays NULL). SQLite has no ``floor`` (it is an optional build), and
    ``CAST(... AS INTEGER)`` truncates toward zero: one less below zero where it cut a fraction.
    Exact wherever the ms fit in 64 bits (SQLite's CAST clamps beyond them)."""
    v = f"({seconds} * 1000.0 + 0.5)"
    return f"(CAST({v} AS INTEGER) - ({v} < CAST({v} AS INTEGER)))"


def sane_interior_s(now_s: float) -> tuple[float, float]:
    """The sane window (SPEC §2) of a run whose clock reads ``now_s``, in seconds, less one second
    at each edge: a number inside it is sane however it rounds."""
    return (SANE_MIN_S + 1, now_s + SANE_AHEAD_S - 1)


def day_number_sql(seconds: str) -> str:
    """A SQLite expression: the UTC day number (``ms // DAY_MS``) of the SQL expression ``seconds``
    when it is a number inside :func:`sane_interior_s` (bound as the parameters ``?1`` and ``?2``),
    rounded by :func:`round_ms_sql`; else NULL (NULL, text, out of the window or on its edges:
    placed in Python)."""
    return f"(CASE WHEN {seconds} BETWEEN ?1 AND ?2 THEN {round_ms_sql(seconds)} / {DAY_MS} END)"


def epoch_ms(value: object) -> int | None:
    """A time cell (REAL/INTEGER seconds, or TEXT per SPEC §5.1) as epoch ms; None if it is not a time."""
    if type(value) is float:  # exact types: a bool is not a time
        return round_ms(value) if math.isfinite(value) else None
    if type(value) is int:
        return round_ms(value)
    if type(value) is bytes:  # the sensor reads cells as bytes
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        return _text_ms(value.strip())
    return None


def _text_ms(text: str) -> int | None:
    if _DECIMAL.fullmatch(text):
        return epoch_ms(float(text))  # "1e999" is inf: not a time
    match = _ISO.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        base = dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=dt.UTC)
    except ValueError:  # 2026-02-30, 25:00 ...
        return None
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        offset = dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
        if offset >= dt.timedelta(hours=24):
            return None
        base -= sign * offset
    nanos = int((fraction or "").ljust(9, "0"))
    whole_s = (base - _EPOCH) // dt.timedelta(seconds=1)
    return (whole_s * 1_000_000_000 + nanos + 500_000) // 1_000_000


def upper_ms(now_s: float) -> int:
    """The last sane instant for a run whose clock reads ``now_s``."""
    return int((now_s + SANE_AHEAD_S) * 1000)


def sane_ms(ms: int | None, now_s: float) -> bool:
    return ms is not None and SANE_MIN_S * 1000 <= ms <= upper_ms(now_s)


def sane_instant(value: object, now_s: float) -> int | None:
    """``epoch_ms(value)`` when it is sane, else None."""
    ms = epoch_ms(value)
    return ms if sane_ms(ms, now_s) else None


def ms_day(ms: int) -> str:
    """The UTC day (``YYYY-MM-DD``) of an instant."""
    return (_EPOCH + dt.timedelta(milliseconds=ms)).strftime("%Y-%m-%d")


def day_start_ms(day: str) -> int:
    return int(dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=dt.UTC).timestamp()) * 1000


def session_start_ms(started_at: object, message_times: Iterable[object], ended_at: object, now_s: float) -> int | None:
    """When a session started, for its day (SPEC §2): ``started_at`` when sane, else the
    earliest sane message timestamp, else a sane ``ended_at``; None when none is sane."""
    ms = sane_instant(started_at, now_s)
    if ms is not None:
        return ms
    earliest = None
    for cell in message_times:
        ms = sane_instant(cell, now_s)
        if ms is not None and (earliest is None or ms < earliest):
            earliest = ms
    if earliest is not None:
        return earliest
    return sane_instant(ended_at, now_s)


class DayNames:
    """``ms -> day`` with one ``strftime`` per distinct day (the slow part on hot paths)."""

    __slots__ = ("_names",)

    def __init__(self) -> None:
        self._names: dict[int, str] = {}

    def __call__(self, ms: int) -> str:
        key = ms // DAY_MS
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = ms_day(ms)
        return name
