"""The first two steps of a capture run: where each session lives, and what policy says of it.

1. :func:`plan_capture` scans each store's ``sessions`` table once and places
   every session on its UTC day (SPEC §2) -> :class:`CapturePlan`;
2. :func:`apply_usage_policy` classifies the sessions of the run's days, with
   their ancestors, before any row is built (SPEC §7, D9) -> a classified plan
   and :class:`PolicyCounts`.

Stores fail alone (SPEC §8, D18): a store that cannot be read is recorded in
its :class:`StorePlan` as a :class:`StoreFailure`, never raised here; its rows
in the warehouse stay untouched and the run fails naming it at the end.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import cached_property

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.errors import StoreFailure
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.plan import policy
from hermes_assets.lib.plan.generations import Generations
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.store_identity import store_identity
from hermes_assets.lib.source.stores import Store

log = get_logger()

# statuses of a store in a run
READ = "read"
MISSING = "missing"  # not installed (discovery): nothing to read, its rows untouched
FAILED = "failed"  # a store-level error: its rows untouched, the run fails naming it


@dataclass
class StoreFacts:
    """What one store holds now, for deciding the fate of previously written rows.

    ``sessions`` maps every sid in the store (any day) to its day. The others cover
    the sessions of the day being written: ``sessions_now`` the generation (D15) of
    each, ``messages_now`` the generation of each of their messages by (sid, mid),
    ``ignored`` those the usage policy ignores.
    """

    path: str
    path_hash: str
    sessions: dict[str, str | None]
    sessions_now: dict[str, int] = field(default_factory=dict)
    messages_now: dict[tuple[str, int], int] = field(default_factory=dict)
    ignored: set[str] = field(default_factory=set)


@dataclass
class StorePlan:
    """One store's sessions, placed on days and (after policy) classified."""

    store: Store
    status: str = READ
    failure: StoreFailure | None = None
    #: sid -> day (None when the session has no sane time at all), every session of the store
    days: dict[str, str | None] = field(default_factory=dict)
    #: sid -> the id as SQLite stores it, where that is not the same string (old integer ids)
    raw_ids: dict[str, object] = field(default_factory=dict)
    #: sid -> (scope path, parent sid), for the sessions of the run's days and their ancestors
    scopes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    #: sid -> policy class, for the sessions of the run's days (after apply_usage_policy)
    classes: dict[str, str] = field(default_factory=dict)
    #: the store's identity, by what it holds (None: no session yet, or not read;
    #: :mod:`hermes_assets.lib.source.store_identity`)
    identity: str | None = None

    @cached_property
    def _by_day(self) -> dict[str | None, list[str]]:
        """day -> its sids, sorted (built once per process, on first use)."""
        by_day: dict[str | None, list[str]] = {}
        for sid, d in self.days.items():
            by_day.setdefault(d, []).append(sid)
        for sids in by_day.values():
            sids.sort()
        return by_day

    def sessions_on(self, day: str) -> list[str]:
        return self._by_day.get(day, [])

    def kept_on(self, day: str) -> list[str]:
        return [sid for sid in self.sessions_on(day) if self.classes.get(sid, policy.FULL) != policy.IGNORE]

    def ignored_on(self, day: str) -> set[str]:
        return {sid for sid in self.sessions_on(day) if self.classes.get(sid) == policy.IGNORE}

    @cached_property
    def parents(self) -> dict[str, str | None]:
        """sid -> parent sid, for the sessions of the run's days and their ancestors."""
        return {sid: parent for sid, (_, parent) in self.scopes.items()}

    def ancestors_off(self, sids: list[str]) -> list[str]:
        """The ancestors of ``sids`` that are not among them (sessions of other days, D20),
        each once; a parent id the store does not hold is left out (and a cycle ends the walk)."""
        within, seen, out = set(sids), set(), []
        for sid in sids:
            parent = self.scopes.get(sid, (None, None))[1]
            while parent and parent in self.days and parent not in seen:
                seen.add(parent)
                if parent not in within:
                    out.append(parent)
                parent = self.scopes.get(parent, (None, None))[1]
        return out


@dataclass(frozen=True)
class PolicyCounts:
    """What :func:`apply_usage_policy` decided, for the op's metadata."""

    sessions: int = 0
    full: int = 0
    local_only: int = 0
    ignored: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    warnings_by_kind: dict[str, int] = field(default_factory=dict)
    samples: tuple[dict, ...] = ()

    @property
    def kept(self) -> int:
        return self.full + self.local_only

    @property
    def errors(self) -> int:
        return sum(self.errors_by_kind.values())


@dataclass
class CapturePlan:
    """The run's days and every store's sessions, placed on days (and classified)."""

    days: list[str]
    stores: list[StorePlan]
    #: when the stores were read for this plan, and the clock of the sanity window (SPEC §5.1)
    read_at: float = 0.0
    #: (store label, sid, day or None) of sessions outside the partition range
    out_of_range: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: SQL statements the plan ran, by what they read
    statements: dict[str, int] = field(default_factory=dict)
    policy: PolicyCounts | None = None
    #: store path -> table -> the columns this contract does not name (D22), stores with some only
    unknown_columns: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    #: how the stores are opened again to read the days (the busy budget, SPEC §1)
    readers: ReaderFactory = field(default_factory=ReaderFactory)

    def scoped_by_host(self) -> CapturePlan:
        """The same plan, each store's ids scoped by its host (``<host>:<sid>``,
        ``<host>/<label>:<sid>``: :func:`hermes_assets.lib.basics.ids.host_scope`), for a host that
        shares its warehouse's unscoped ids with none (:meth:`Warehouse.adopt_legacy`)."""
        stores = [replace(sp, store=sp.store.scoped_by_host()) for sp in self.stores]
        return replace(self, stores=stores)

    def for_write(self) -> CapturePlan:
        """The same plan without what only the projection reads (each session's scope and parent):
        what the write step is handed, stored by Dagster between the two steps (a third of the
        plan's bytes on the 1M store, 3.2 MB)."""
        return replace(self, stores=[replace(sp, scopes={}) for sp in self.stores])

    def sessions_in_range(self) -> int:
        wanted = set(self.days)
        return sum(1 for sp in self.stores for d in sp.days.values() if d in wanted)

    def readable(self) -> list[StorePlan]:
        return [sp for sp in self.stores if sp.status == READ]

    def labels(self) -> dict[str, str]:
        """Each store's label -> its path (labels are unique in a run, :mod:`~hermes_assets.lib.source.stores`)."""
        return {sp.store.label: sp.store.path for sp in self.stores}

    def nothing_to_capture(self) -> str | None:
        """Why this run captures nothing where a user would expect rows, else None.

        A range that holds no partition (a start after its end), or stores that
        were read but hold no session on the days asked. Not when no store exists
        (Hermes not installed: the idle case, SPEC R9) nor when a store failed
        (the run fails naming it)."""
        if not self.days:
            return "the run's partition range holds no partition (is its start after its end?)"
        if self.readable() and not self.failures() and not self.sessions_in_range():
            span = self.days[0] if len(self.days) == 1 else f"{self.days[0]}...{self.days[-1]}"
            return f"the Hermes store(s) hold no session on the {len(self.days)} day(s) asked ({span})"
        return None

    def failures(self) -> list[StoreFailure]:
        return [sp.failure for sp in self.stores if sp.failure is not None]

    def identities(self) -> dict[str, str]:
        """Store path -> its identity, for the stores read that hold a session."""
        return {sp.store.path: sp.identity for sp in self.stores if sp.identity is not None}

    def facts(
        self, day: str, generations: dict[str, Generations], skip: AbstractSet[str] = frozenset()
    ) -> list[StoreFacts]:
        """What retention needs to judge the day's previously written rows (SPEC §6), for
        every store read (and not in ``skip``)."""
        empty = Generations()
        return [
            StoreFacts(
                sp.store.path,
                sp.store.path_hash,
                sp.days,
                sessions_now=generations.get(sp.store.path, empty).sessions,
                messages_now=generations.get(sp.store.path, empty).messages,
                ignored=sp.ignored_on(day),
            )
            for sp in self.readable()
            if sp.store.path not in skip
        ]


def plan_capture(
    stores: list[Store],
    days: list[str],
    *,
    user_home: str,
    first_day: str | None = None,
    last_day: str | None = None,
    now_s: float | None = None,
    readers: ReaderFactory | None = None,
    expect_none: bool = False,
) -> CapturePlan:
    """Place every session of every store on its day (one statement over ``sessions``
    per store). A missing store is a state; a store that cannot be read is a failure
    recorded in its :class:`StorePlan`, never raised here. ``expect_none``: the run was asked
    for days without sessions (the sensor's, so that they read as captured): finding none there
    is what it expects, said at info, not as a warning."""
    read_at = time.time() if now_s is None else now_s
    wanted = set(days)
    readers = readers or ReaderFactory()
    plan = CapturePlan(days=sorted(wanted), stores=[], read_at=read_at, readers=readers)
    statements: Counter = Counter()
    for store in stores:
        sp = StorePlan(store)
        plan.stores.append(sp)
        try:
            with readers.open(store, read_at) as reader:
                index = reader.session_index(wanted)
                unknown = reader.unknown_columns()
                sp.identity = store_identity(reader)
                statements.update(reader.statements)
        except (FileNotFoundError, errors.StoreAbsent) as exc:  # not installed, vanished, or not created yet
            if store.explicit and not store.exists():
                _fail(sp, store.missing_error())
            else:
                sp.status = MISSING
                log.info(
                    "hermes.store.missing",
                    path=store.path,
                    store=store.label,
                    reason=str(exc) if isinstance(exc, errors.StoreAbsent) else "no file",
                )
            continue
        except errors.STORE_ERRORS as exc:
            _fail(sp, exc)
            continue
        if unknown:  # D22: once per store and run; the cells are kept in extra_columns
            plan.unknown_columns[store.path] = unknown
            log.warning(
                "hermes.store.unknown_columns",
                path=store.path,
                store=store.label,
                error_kind=errors.UNKNOWN_COLUMNS,
                **{f"{table}_columns": names for table, names in unknown.items()},
            )
        for sid, entry in index.items():
            sp.days[sid] = entry.day
            if entry.raw_id != sid:
                sp.raw_ids[sid] = entry.raw_id
            if entry.day is None or (first_day and entry.day < first_day) or (last_day and entry.day > last_day):
                plan.out_of_range.append((store.label, sid, entry.day))
        # scopes of the run's sessions and of all their ancestors
        todo = [sid for sid, entry in index.items() if entry.day in wanted]
        while todo:
            sid = todo.pop()
            if sid in sp.scopes or sid not in index:
                continue
            entry = index[sid]
            sp.scopes[sid] = (policy.scope_path(entry.source, entry.cwd, user_home), entry.parent)
            if entry.parent:
                todo.append(entry.parent)
    plan.statements = dict(statements)
    for label, sid, day in plan.out_of_range:
        log.warning(
            "hermes.capture.out_of_range_session",
            store=label,
            session_id=sid,
            day=day,
            error_kind=errors.OUT_OF_RANGE_SESSION,
        )
    log.info(
        "hermes.capture.plan",
        days=len(plan.days),
        stores=len(plan.stores),
        stores_failed=len(plan.failures()),
        sessions=plan.sessions_in_range(),
        out_of_range=len(plan.out_of_range),
    )
    reason = plan.nothing_to_capture()
    if reason:
        (log.info if expect_none else log.warning)(
            "hermes.capture.nothing_to_capture", days=len(plan.days), reason=reason
        )
    return plan


def _fail(sp: StorePlan, exc: Exception) -> None:
    sp.status = FAILED
    sp.failure = StoreFailure.of(sp.store.path, sp.store.label, exc)
    log.error("hermes.store.unreadable", path=sp.store.path, store=sp.store.label, error_kind=sp.failure.error_kind)


def apply_usage_policy(plan: CapturePlan, resolver: policy.PolicyResolver) -> CapturePlan:
    """Classify the run's sessions (SPEC §7); a new plan with ``classes`` and ``policy`` counts.

    The machine-local list was read when ``resolver`` was made: a broken one has
    already raised :class:`errors.PolicyListUnreadable` (the run fails).
    """
    wanted = set(plan.days)
    stores = []
    counts: Counter = Counter()
    for sp in plan.stores:
        classes = resolver.classify_sessions(sp.scopes)
        classes = {sid: cls for sid, cls in classes.items() if sp.days.get(sid) in wanted}
        counts.update(classes.values())
        stores.append(replace(sp, classes=classes))
    problems = Counter(w["event"] for w in resolver.warnings)
    result = PolicyCounts(
        sessions=sum(counts.values()),
        full=counts[policy.FULL],
        local_only=counts[policy.LOCAL_ONLY],
        ignored=counts[policy.IGNORE],
        errors_by_kind={k: n for k, n in sorted(problems.items()) if k not in errors.WARNING_KINDS},
        warnings_by_kind={k: n for k, n in sorted(problems.items()) if k in errors.WARNING_KINDS},
        samples=tuple(resolver.warnings[:10]),
    )
    log.info(
        "hermes.capture.policy",
        sessions=result.sessions,
        kept=result.kept,
        local_only=result.local_only,
        ignored=result.ignored,
        errors=result.errors,
    )
    return replace(plan, stores=stores, policy=result)
