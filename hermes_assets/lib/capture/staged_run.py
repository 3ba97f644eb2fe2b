"""What the projection step hands the write step: each day staged (:class:`StagedDay`, its
datasets' :class:`DatasetDay`) and the run's staged days with what the run learned on the way
(:class:`ProjectedRun`). Plain values: the write step and the run's sightings read them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.errors import StoreFailure
from hermes_assets.lib.basics.ipc import IpcTable
from hermes_assets.lib.plan.capture_plan import CapturePlan
from hermes_assets.lib.plan.generations import Generations
from hermes_assets.lib.redaction import stored_files
from hermes_assets.lib.redaction.sightings import Sighting
from hermes_assets.lib.warehouse.day_merge import PreparedWrite


@dataclass(frozen=True)
class DatasetDay:
    """One dataset's rows of one day, as projected: counts, and per store its staged file:
    Arrow IPC (to be merged with the day's file), or, when the day has no file yet and one
    store has rows, the partition file itself, encoded once (``.parquet``)."""

    rows: int
    errors_by_kind: dict[str, int]
    samples: tuple[dict, ...]
    #: store path -> the staged file of that store's rows of the day
    staged: dict[str, str]
    #: secrets redacted from the cells the day's rows were built from, by kind (never a value)
    secrets_redacted: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return errors.error_count(self.errors_by_kind)


@dataclass(frozen=True)
class StagedDay:
    """One day of the three datasets, staged (files under the run's staging folder, not yet in place)."""

    day: str
    datasets: dict[str, DatasetDay]
    #: store path -> the generations of the day's kept sessions and their messages (retention, SPEC §6)
    generations: dict[str, Generations]
    #: stores that failed while this day was read
    failures: tuple[StoreFailure, ...] = ()
    statements: dict[str, int] = field(default_factory=dict)
    #: the datasets whose file for this day existed when the run looked
    existing: frozenset[str] = frozenset()
    #: dataset -> its file merged already, for the write to put in place (:mod:`~hermes_assets.lib.warehouse.day_merge`)
    prepared: dict[str, PreparedWrite] = field(default_factory=dict)
    #: where each secret redacted from the day's cells was (never a value)
    sightings: tuple[Sighting, ...] = ()
    #: the same as rows of ``hermes_secret_sightings``, with their channel and time (:mod:`~hermes_assets.lib.redaction.sighting_files`)
    sighting_rows: IpcTable | None = None
    #: a first capture's sightings file, encoded already (staged; the write puts it in place when
    #: it still holds: :class:`~hermes_assets.lib.capture.run_sightings.Writer`); None: merged at the write
    sightings_file: str | None = None
    #: what the run's ``day_figures`` made of the day's tables, when they are its files' final
    #: content (:func:`project_rows`); None: not made
    figures: Any = None

    @property
    def rows(self) -> int:
        """The day's rows, in the three datasets."""
        return sum(d.rows for d in self.datasets.values())


@dataclass
class ProjectedRun:
    """The run's staged days: what the write step puts in place."""

    #: the run's plan, as the write step needs it (:meth:`~hermes_assets.lib.plan.capture_plan.CapturePlan.for_write`)
    plan: CapturePlan
    staging: str
    days: list[StagedDay]
    #: what the run's files record (None: the run does not redact)
    redaction_version: str | None = None
    #: files written before (or under an older redaction), redacted again by this run
    files_redacted: stored_files.FilesRedacted | None = None
    #: day -> the markers already in this host's stored files, when its sightings did not hold them yet
    #: (:mod:`~hermes_assets.lib.redaction.stored_markers`; None: they did)
    stored_markers: dict[str, list[Sighting]] | None = None

    def failures(self) -> list[StoreFailure]:
        """Every store that failed, in the plan or on any day (each once)."""
        seen: dict[str, StoreFailure] = {f.path: f for f in self.plan.failures()}
        for staged in self.days:
            for f in staged.failures:
                seen.setdefault(f.path, f)
        return list(seen.values())

    def totals(self, dataset: str) -> tuple[int, Counter, list[dict]]:
        """``(rows, errors by kind, a few samples)`` of one dataset over the run."""
        rows, by_kind, samples = 0, Counter[str](), list[dict]()
        for staged in self.days:
            d = staged.datasets[dataset]
            rows += d.rows
            by_kind.update(d.errors_by_kind)
            samples.extend(d.samples[: max(0, 10 - len(samples))])
        return rows, by_kind, samples

    def secrets_redacted(self, dataset: str) -> Counter:
        """Secrets redacted, by kind, from the cells one dataset's rows were built from."""
        total: Counter = Counter()
        for staged in self.days:
            total.update(staged.datasets[dataset].secrets_redacted)
        return total

    def sightings(self) -> list[Sighting]:
        """Where each secret the run redacted was: in the files redacted again first, then in
        the days' cells, day by day (never a value)."""
        found = list(self.files_redacted.sightings) if self.files_redacted is not None else []
        for staged in self.days:
            found += staged.sightings
        return found

    def reborn(self) -> int:
        """Stored sessions and messages whose id was captured before with another birth (D15)."""
        return sum(g.reborn for staged in self.days for g in staged.generations.values())

    def statements(self) -> Counter:
        total = Counter(self.plan.statements)
        for staged in self.days:
            total.update(staged.statements)
        return total
