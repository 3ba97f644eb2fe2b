"""One day of every store, read once, redacted, projected: the rows of all three datasets.

:func:`project_day` reads the day's kept sessions of each store in one short
read transaction (with their ancestors of other days, D20), redacts their
cells (:mod:`~hermes_assets.lib.redaction`), and builds the sessions, messages
and canonical rows from that one read with the projection
(:mod:`~hermes_assets.lib.projection`), so the three datasets always agree. A store that fails here fails alone (SPEC §8, D18):
it is recorded, and the other stores' rows are built.
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from hermes_assets.lib.basics import errors, schemas
from hermes_assets.lib.basics.errors import ErrorTally, StoreFailure
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.plan import policy
from hermes_assets.lib.plan.capture_plan import CapturePlan
from hermes_assets.lib.plan.generations import Births, Generations
from hermes_assets.lib.projection import copies, gateway, raw
from hermes_assets.lib.projection.context import ProjectionContext
from hermes_assets.lib.projection.header import SessionInput
from hermes_assets.lib.redaction import session_cells
from hermes_assets.lib.redaction.redactor import RedactionConfig, redactor_for
from hermes_assets.lib.redaction.sightings import Sighting

log = get_logger()

#: what reading a store's day may raise: the store is recorded as failed (or gone), the others go on
_READ_ERRORS: tuple[type[Exception], ...] = (FileNotFoundError, errors.StoreAbsent, *errors.STORE_ERRORS)


@dataclass
class DayRows:
    """One day's rows of the three datasets, built from one read of each store."""

    day: str
    #: dataset -> store path -> that store's rows of the day
    tables: dict[str, dict[str, pa.Table]]
    tallies: dict[str, ErrorTally]
    generations: dict[str, Generations]
    failures: list[StoreFailure]
    statements: Counter
    #: every bad cell of the day once, as ``(error_kind, session id, mid, column)``
    cells: set
    #: dataset -> secrets redacted from the cells its rows are built from, by kind
    secrets: dict[str, Counter] = field(default_factory=dict)
    #: where each secret redacted from the day's cells was (never a value)
    sightings: list[Sighting] = field(default_factory=list)
    #: the sessions' ``usage_by_model`` cells and the entries each encodes (text -> entries), when
    #: asked (:func:`project_day`): what the day's analytics read of them, not decoded again
    usage_by_model: dict[str, list[dict]] = field(default_factory=dict)

    def table(self, dataset: str) -> pa.Table:
        """All stores' rows of one dataset (the schema's empty table when none: built without
        pyarrow's conversion of Python values, which imports pandas, :func:`schemas.empty_table`)."""
        tables = list(self.tables[dataset].values())
        return pa.concat_tables(tables) if tables else schemas.empty_table(schemas.DATASETS[dataset].schema)


def project_day(
    plan: CapturePlan,
    day: str,
    ctx: ProjectionContext,
    *,
    births: dict[str, Births] | None = None,
    redaction: RedactionConfig | None = None,
    record_ids: bool = True,
    usage_by_model: bool = False,
) -> DayRows:
    """Read the day's kept sessions of every store (one read transaction per store), redact
    their cells and build the rows of all three datasets from that read.

    ``births``: per store, what the day's files already captured:
    a reused id with another birth gets the next generation (D15).
    ``redaction``: how secrets are redacted from each session's cells before its rows are
    built (None: not at all). ``record_ids``: whether the day's :class:`Generations` hold every
    id's generation (what retention reads when the day has a file; False: their counts alone).
    ``usage_by_model``: whether the day keeps its sessions' ``usage_by_model`` entries by their cell
    (:attr:`DayRows.usage_by_model`, for its analytics).
    """
    with _gc_paused():
        return _project_day(plan, day, ctx, births or {}, redaction, record_ids, usage_by_model)


@contextlib.contextmanager
def _gc_paused():
    """No cyclic GC while a day is built: its rows are hundreds of thousands of live
    tuples and dicts that every full collection would scan, for nothing (they hold
    no cycles); they are freed by reference counting when the day is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _project_day(
    plan: CapturePlan,
    day: str,
    ctx: ProjectionContext,
    births: dict[str, Births],
    redaction: RedactionConfig | None,
    record_ids: bool = True,
    usage_by_model: bool = False,
) -> DayRows:
    logged: set = set()
    tallies = {ds: ErrorTally(logged=logged) for ds in CAPTURE_DATASETS}
    tables: dict[str, dict[str, pa.Table]] = {ds: {} for ds in CAPTURE_DATASETS}
    generations: dict[str, Generations] = {}
    failures: list[StoreFailure] = []
    statements: Counter = Counter()
    redactor = redactor_for(redaction) if redaction is not None else None
    secrets: dict[str, Counter] = {ds: Counter() for ds in CAPTURE_DATASETS}
    sightings: list[Sighting] = []
    usage: dict[str, list[dict]] = {}
    for sp in plan.readable():
        kept = sp.kept_on(day)
        if not kept:
            continue
        ancestors = sp.ancestors_off(kept)
        try:
            with plan.readers.open(sp.store, plan.read_at) as reader:
                read = reader.read_day_lineage(
                    day,
                    [(sid, sp.raw_ids.get(sid, sid)) for sid in kept],
                    [(sid, sp.raw_ids.get(sid, sid)) for sid in ancestors],
                )
                unknown, selected = reader.unknown_columns(), reader.selected["messages"]
                statements.update(reader.statements)
        except _READ_ERRORS as exc:
            if isinstance(exc, errors.StoreAbsent):  # read at the plan, being created again now
                exc = errors.StoreMissing(str(exc), path=exc.path)
            elif isinstance(exc, FileNotFoundError):
                exc = (
                    sp.store.missing_error()
                    if sp.store.explicit
                    else errors.StoreMissing(
                        f"{sp.store.path} vanished during the run; its rows are kept as they are.", path=sp.store.path
                    )
                )
            failures.append(StoreFailure.of(sp.store.path, sp.store.label, exc))
            log.error(
                "hermes.store.unreadable",
                path=sp.store.path,
                store=sp.store.label,
                day=day,
                error_kind=failures[-1].error_kind,
            )
            continue
        bundles = read.bundles
        marks = (
            copies.mark(((b.sid, b.messages) for b in bundles), read.ancestors, sp.parents, sp.store.scoped)
            if read.grouped
            else {}
        )
        if redactor is not None:  # after the copies are marked: they compare the cells as Hermes stored them
            found = session_cells.redact_bundles(redactor, bundles, store=sp.store.label)
            sightings += found.sightings
            secrets[SESSIONS].update(found.sessions)
            secrets[MESSAGES].update(found.messages)
            secrets[GATEWAY].update(found.sessions)
            secrets[GATEWAY].update(found.messages)
        canonical = gateway.GatewayColumns()
        sessions = raw.sessions_columns(plan.read_at, tallies[SESSIONS], unknown.get("sessions", []))
        messages = raw.messages_columns(
            plan.read_at, tallies[MESSAGES], unknown.get("messages", []), grouped=read.grouped, names=selected
        )
        gens, store_births = Generations(record_ids=record_ids), births.get(sp.store.path) or Births()
        for bundle in bundles:
            session_gen, message_gens = gens.assign(store_births, bundle)
            item = SessionInput(
                bundle,
                policy_class=sp.classes.get(bundle.sid, policy.FULL),
                generation=session_gen,
                message_generations=message_gens,
                marks=marks.get(bundle.sid),
                scope_path=sp.scopes.get(bundle.sid, (None,))[0],
            )
            gateway.project_session(item, canonical, ctx, tallies[GATEWAY])
            raw.session_row(item, sessions)
            if usage_by_model:
                _keep_usage(item, usage)
            raw.message_rows(item, messages)
        for ds, builder in ((GATEWAY, canonical), (SESSIONS, sessions), (MESSAGES, messages)):
            tables[ds][sp.store.path] = builder.to_table()
        generations[sp.store.path] = gens
    return DayRows(day, tables, tallies, generations, failures, statements, logged, secrets, sightings, usage)


def _keep_usage(item: SessionInput, usage: dict[str, list[dict]]) -> None:
    """The session's ``usage_by_model`` cell and the entries it encodes, into ``usage``: the entries
    are what the cell decodes to (their numbers as JSON writes them), read by the day's analytics
    in its place (:func:`~hermes_assets.lib.analytics.day_sessions.usage_entries`)."""
    text = item.usage_by_model_json()
    entries = item.usage_by_model()
    if text is not None and entries is not None:
        usage[text] = entries
