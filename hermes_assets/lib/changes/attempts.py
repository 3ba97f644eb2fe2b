"""A day is done when its run succeeds: follow each requested capture to its end.

The sensor requests a day when its fingerprint moves (:mod:`hermes_assets.lib.changes.watch`)
and remembers the request as an :class:`~hermes_assets.lib.changes.cursor.Attempt`:
the run key and the day's fingerprint in each store. Each tick asks the
Dagster instance (through the sensor, :func:`follow`'s ``outcomes``) how the
runs of the open attempts ended:

- succeeded: each store's fingerprint of the attempt becomes the day's
  ``captured`` fingerprint, and the attempt is closed;
- failed, canceled, or not known to the instance :data:`LOST_AFTER_S` after it
  was requested (deleted): the day is requested again, with a new run key,
  on the next tick after the first failure, then :data:`BACKOFF_FIRST_S`
  later, doubling up to :data:`BACKOFF_MAX_S` apart: a full disk or a
  read-only warehouse may outlast any fixed number of retries, and a day
  must never be left behind because Hermes wrote nothing more to it;
- still queued or running (a failed run that Dagster's own run retries will
  run again counts as running): nothing yet.

A new change of a day while its run waits in the queue (it has read nothing
yet, so it will capture the change) requests nothing: the attempt takes the
day's new fingerprint. A new change while its run runs replaces the attempt
at once (no backoff: new data), keeping its count of failures. Under a steady
writer this keeps one run per day in the queue, not one per tick. A day whose runs
failed :data:`FAILING_AFTER` times in a row is *failing*: named in each
tick's log and by the ``days_captured`` asset check until a run succeeds.

Backoff, as delay before the n-th request again after n failures:
0 (the next tick), 15 s, 30 s, 60 s, 2 min, 4 min, 8 min, then 10 min.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.changes.cursor import Attempt, Cursor

log = get_logger()

# how a run ended, as the sensor reads it from the instance (absent: the instance has no such run)
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELED = "canceled"
WAITING = "waiting"  # queued or starting: it has read nothing yet
RUNNING = "running"  # started, or failed with one of Dagster's own retries to come

BACKOFF_FIRST_S = 15.0
BACKOFF_MAX_S = 600.0
#: failures in a row after which a day is reported failing
FAILING_AFTER = 3
#: a requested run the instance still does not know after this long was lost (a run deleted by hand):
#: the day is requested again. The daemon creates a sensor's runs before it stores the tick's cursor,
#: so a run is known to the instance from the next tick on.
LOST_AFTER_S = 300.0

#: ``outcomes(run_keys) -> {run_key: SUCCEEDED | FAILED | CANCELED | WAITING | RUNNING}`` (unknown keys left out)
Outcomes = Callable[[list[str]], dict[str, str]]


def backoff_s(failures: int) -> float:
    """Seconds to wait before requesting a day again after ``failures`` failed runs in a row."""
    if failures <= 1:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (failures - 2))


@dataclass
class FollowUp:
    """What one tick learned about the open attempts."""

    succeeded: list[str]  # days captured since the last tick
    failed: list[str]  # days whose run failed since the last tick
    due: list[str]  # failed days whose wait is over: to request again now
    waiting: dict[str, float]  # failed days still waiting: day -> when they are requested again
    running: int  # attempts whose run is queued or running
    queued: set[str] = field(default_factory=set)  # days whose run waits in the queue (has read nothing)


def follow(cursor: Cursor, outcomes: Outcomes | None, now_s: float) -> FollowUp:
    """Update ``cursor``'s attempts (and captured fingerprints) from the runs' outcomes."""
    open_keys = sorted({a.run_key for a in cursor.attempts.values() if a.retry_at is None})
    found = outcomes(open_keys) if (outcomes is not None and open_keys) else {}
    succeeded, failed, running, queued = [], [], 0, set()
    for day, attempt in sorted(cursor.attempts.items()):
        if attempt.retry_at is not None:
            continue  # failed earlier: waiting for its time to be requested again
        status = found.get(attempt.run_key)
        if status is None and outcomes is not None and now_s - attempt.requested_at > LOST_AFTER_S:
            status = "lost"
        if status == SUCCEEDED:
            _captured(cursor, day, attempt)
            del cursor.attempts[day]
            succeeded.append(day)
        elif status in (FAILED, CANCELED, "lost"):
            attempt.failures += 1
            attempt.error = status
            attempt.retry_at = now_s + backoff_s(attempt.failures)
            failed.append(day)
            log.warning(
                "hermes.sensor.capture_failed",
                day=day,
                run_key=attempt.run_key,
                outcome=status,
                failures=attempt.failures,
                retry_in_s=attempt.retry_at - now_s,
            )
        else:
            running += 1
            if status == WAITING:
                queued.add(day)
    due = sorted(d for d, a in cursor.attempts.items() if a.retry_at is not None and a.retry_at <= now_s)
    waiting = {d: a.retry_at for d, a in cursor.attempts.items() if a.retry_at is not None and a.retry_at > now_s}
    return FollowUp(succeeded, failed, due, waiting, running, queued)


def _captured(cursor: Cursor, day: str, attempt: Attempt) -> None:
    for path, fingerprint in attempt.fingerprints.items():
        state = cursor.stores.get(path)
        mark = state.days.get(day) if state else None
        if mark is not None and fingerprint is not None:
            mark.captured = fingerprint


def uncaptured(cursor: Cursor) -> set[str]:
    """Days of some store whose fingerprint is not the one captured, with no attempt open:
    a state no tick should leave (a cursor restored from elsewhere); they are requested."""
    return {
        d
        for state in cursor.stores.values()
        for d, mark in state.days.items()
        if mark.captured != mark.fingerprint and d not in cursor.attempts
    }


def open_attempts(cursor: Cursor, runs: Iterable[tuple[list[str], str]], now_s: float) -> None:
    """Record this tick's runs (``(days, run_key)``): one open attempt per day, failures kept."""
    for days, run_key in runs:
        for day in days:
            old = cursor.attempts.get(day)
            fingerprints = {
                path: state.days[day].fingerprint for path, state in cursor.stores.items() if day in state.days
            }
            cursor.attempts[day] = Attempt(run_key, fingerprints, now_s, failures=old.failures if old else 0)


def refresh(cursor: Cursor, days: Iterable[str]) -> None:
    """The runs of ``days`` wait in the queue: they will capture the days as they are now."""
    for day in days:
        cursor.attempts[day].fingerprints = {
            path: state.days[day].fingerprint for path, state in cursor.stores.items() if day in state.days
        }


def failing(cursor: Cursor) -> list[str]:
    """Days whose capture failed :data:`FAILING_AFTER` times in a row, and has not succeeded since."""
    return sorted(d for d, a in cursor.attempts.items() if a.failures >= FAILING_AFTER)


def retry_hash(attempt: Attempt) -> str:
    """The run-key hash of a day requested again after its attempt failed: never one used before
    (Dagster silently skips a run key it has seen, whatever became of that run)."""
    return hashlib.blake2b(f"{attempt.run_key}\tretry {attempt.failures}".encode(), digest_size=6).hexdigest()
