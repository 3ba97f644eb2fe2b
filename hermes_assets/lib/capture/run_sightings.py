"""A capture run's sightings: made with each day, written after each day's files.

Each staged day carries its sightings as rows of ``hermes_secret_sightings``
(:func:`staged_rows`, on the worker that built the day: the day's rows give
each its channel and time). The write step merges them into this host's file of
the day once the day's datasets are in place (:class:`Writer`), with what the
run saw in the stored files (the pass over stored files, and the markers they
held already: :mod:`~hermes_assets.lib.redaction.stored_markers`), which the
day's files just written give their channel, time and flag. A first capture's
file is encoded on the worker too (:mod:`~hermes_assets.lib.capture.steps`), and put
in place as it is when the merge would keep its rows as they are and add none
(:func:`~hermes_assets.lib.redaction.sighting_files.write_day`). A day the run only
saw in stored files is written last; then the host's stamp says its stored
markers are in its sightings. A run that does not redact makes none and leaves
the files as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from hermes_assets.lib.basics.schemas import MESSAGES, SESSIONS, SIGHTINGS, empty_table
from hermes_assets.lib.redaction import sighting_files, stored_markers
from hermes_assets.lib.redaction.sightings import Sighting
from hermes_assets.lib.warehouse.datasets import Warehouse, WriteResult

if TYPE_CHECKING:
    from hermes_assets.lib.capture.day_rows import DayRows
    from hermes_assets.lib.capture.staged_run import ProjectedRun, StagedDay


def staged_rows(rows: DayRows, host: str, stores: dict[str, str]) -> pa.Table:
    """The day's sightings as rows of the dataset (``stores``: store label -> path)."""
    if not rows.sightings:
        return empty_table(sighting_files.SCHEMA)
    sessions = rows.table(SESSIONS).select(sighting_files.SESSION_COLUMNS)
    messages = rows.table(MESSAGES).select(sighting_files.MESSAGE_COLUMNS)
    return sighting_files.rows(rows.day, host, rows.sightings, sessions, messages, stores)


class Writer:
    """Writes the run's sightings, day by day (:meth:`day`, on the thread that put the day's files in
    place: days on several threads at once), then those of the days only seen in stored files
    (:meth:`finish`)."""

    def __init__(self, run: ProjectedRun, warehouse: Warehouse, failed: set[str]):
        self.run, self.warehouse, self.failed = run, warehouse, failed
        stored = run.files_redacted.by_day if run.files_redacted is not None else {}
        self.stored: dict[str, list[Sighting]] = {
            day: [*stored.get(day, []), *(run.stored_markers or {}).get(day, [])]
            for day in {*stored, *(run.stored_markers or {})}
        }
        days = {staged.day for staged in run.days}
        self.have = warehouse.existing(SIGHTINGS, days | set(self.stored))
        self.written: list[WriteResult] = []
        self.stores = run.plan.labels()

    def day(self, staged: StagedDay) -> WriteResult | None:
        """The staged day's sightings (after its files are in place): what was written, None when
        the day has none to write. Days may be written at once, each on its own thread; the caller
        hands the results back in the run's order (:meth:`written_day`)."""
        return self._write(staged.day, staged)

    def written_day(self, result: WriteResult | None) -> None:
        """A day's result of :meth:`day`, in the run's order of days."""
        if result is not None:
            self.written.append(result)

    def finish(self) -> list[WriteResult]:
        for day in sorted(set(self.stored) - {staged.day for staged in self.run.days}):
            self.written_day(self._write(day, None))
        if self.run.stored_markers is not None:  # this host's sightings hold its stored files' markers now
            stored_markers.stamp(self.warehouse)
        return self.written

    def _write(self, day: str, staged: StagedDay | None) -> WriteResult | None:
        stored = self.stored.get(day, [])
        new = staged.sighting_rows.table() if staged is not None and staged.sighting_rows is not None else None
        if self.run.redaction_version is None or not (stored or day in self.have or (new is not None and new.num_rows)):
            return None
        facts = self.run.plan.facts(day, staged.generations, skip=self.failed) if staged is not None else []
        read_at = self.run.plan.read_at if staged is not None else None
        encoded = staged.sightings_file if staged is not None else None
        return sighting_files.write_day(self.warehouse, day, new, stored, facts, read_at, self.stores, encoded=encoded)
