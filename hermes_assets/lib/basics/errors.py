"""The typed errors of hermes_assets, and the one list of their kinds (SPEC §9).

Every failure the project reports has an ``error_kind``. :data:`KINDS` names
each one once, with its level (store, policy, cell, run), whether it is an
error or a warning, and the exception that carries it when it is raised;
every other list of kinds derives from it. Store-level errors fail a run and
change no partition file; cell- and policy-level kinds are counted (see
:class:`ErrorTally`) and never raised. A warning is counted and logged, and
the data is kept whole.

A store that is not there is one of two things (SPEC §1): Hermes not
installed, or a store Hermes is still creating, is the idle case
(:class:`StoreAbsent`, never an error); a file named in ``HERMES_STATE_DB``
that does not exist is a configuration mistake (:class:`StoreMissing`,
``store_missing``): a typo must never look like success.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

ERROR, WARNING = "error", "warning"
#: where a kind arises: a whole store (fails the run), the usage policy, one cell, the run's set-up
STORE, POLICY, CELL, RUN = "store", "policy", "cell", "run"

# Store level (a store that cannot be read: the run fails naming it, its rows untouched).
STORE_BUSY = "store_busy"
STORE_CORRUPT = "store_corrupt"
STORE_REPLACED = "store_replaced"
STORE_MISSING = "store_missing"
NOT_A_HERMES_STORE = "not_a_hermes_store"
# Store level, once per store and run (D22): columns of a newer Hermes, kept in ``extra_columns``.
UNKNOWN_COLUMNS = "unknown_columns"
# Run level: the run cannot start.
POLICY_LIST_UNREADABLE = "policy_list_unreadable"
CONFIGURATION_ERROR = "configuration_error"
#: another host owns this host's label, or captures one of its stores (several hosts, one warehouse)
HOST_CONFLICT = "host_conflict"
# Policy level (the session is ignored, counted).
HYPIGNORE_UNREADABLE = "hypignore_unreadable"
BAD_CLASS_TOKEN = "bad_class_token"
# Cell level (counted, never raised).
BAD_TOOL_CALLS = "bad_tool_calls"
BAD_TIMESTAMP = "bad_timestamp"
BAD_TEXT = "bad_text"
BAD_ENVELOPE = "bad_envelope"
OVERSIZED_CELL = "oversized_cell"
OUT_OF_RANGE_SESSION = "out_of_range_session"
#: a cell of the wrong type for its column (TEXT in an INTEGER column ...): NULL in the raw datasets
BAD_VALUE = "bad_value"
#: D19: a ``system_prompt_hash`` that names no ``system_prompts`` row (the prompt reads as NULL)
SYSTEM_PROMPT_MISSING = "system_prompt_missing"


class HermesAssetsError(Exception):
    """Base class: a failure with a stable ``error_kind`` string."""

    error_kind = "error"

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class StoreAbsent(Exception):
    """Not a failure but a state (SPEC R9): no store (Hermes not installed), or one Hermes
    has created but not yet given its tables. Callers treat it as "nothing to capture yet"."""

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class StoreMissing(HermesAssetsError):
    """A store the run must read is not there: a file named in ``HERMES_STATE_DB`` that does
    not exist (a typo), or a store that vanished while a run was reading it."""

    error_kind = STORE_MISSING


class StoreBusy(HermesAssetsError):
    """The store stayed locked past the retry budget, or a writer is mid-transaction."""

    error_kind = STORE_BUSY


class StoreCorrupt(HermesAssetsError):
    """SQLite reports the file as malformed or not a database."""

    error_kind = STORE_CORRUPT


class StoreReplaced(HermesAssetsError):
    """The file changed identity under us (new inode, ids went backwards)."""

    error_kind = STORE_REPLACED


class NotAHermesStore(HermesAssetsError):
    """A SQLite file without the ``sessions`` and ``messages`` tables."""

    error_kind = NOT_A_HERMES_STORE


class PolicyListUnreadable(HermesAssetsError):
    """The machine-local usage-policy list exists but cannot be read or parsed."""

    error_kind = POLICY_LIST_UNREADABLE


class ConfigurationError(HermesAssetsError):
    """A setting (environment variable) that cannot be honoured."""

    error_kind = CONFIGURATION_ERROR


class HostConflict(ConfigurationError):
    """This host cannot write the warehouse as it is set up: its label is another host's,
    or one of its stores is captured by another host (nothing was written)."""

    error_kind = HOST_CONFLICT


@dataclass(frozen=True)
class Kind:
    """One ``error_kind``: where it arises, how severe it is, what raises it (if anything does)."""

    name: str
    level: str
    severity: str
    exception: type[HermesAssetsError] | None = None


#: every error_kind, once (SPEC §9)
KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(STORE_BUSY, STORE, ERROR, StoreBusy),
        Kind(STORE_CORRUPT, STORE, ERROR, StoreCorrupt),
        Kind(STORE_REPLACED, STORE, WARNING, StoreReplaced),
        Kind(STORE_MISSING, STORE, ERROR, StoreMissing),
        Kind(NOT_A_HERMES_STORE, STORE, ERROR, NotAHermesStore),
        Kind(UNKNOWN_COLUMNS, STORE, WARNING),
        Kind(POLICY_LIST_UNREADABLE, RUN, ERROR, PolicyListUnreadable),
        Kind(CONFIGURATION_ERROR, RUN, ERROR, ConfigurationError),
        Kind(HOST_CONFLICT, RUN, ERROR, HostConflict),
        Kind(HYPIGNORE_UNREADABLE, POLICY, ERROR),
        Kind(BAD_CLASS_TOKEN, POLICY, WARNING),
        Kind(BAD_TOOL_CALLS, CELL, ERROR),
        Kind(BAD_TIMESTAMP, CELL, ERROR),
        Kind(BAD_TEXT, CELL, ERROR),
        Kind(BAD_ENVELOPE, CELL, ERROR),
        Kind(OVERSIZED_CELL, CELL, WARNING),
        Kind(OUT_OF_RANGE_SESSION, CELL, ERROR),
        Kind(BAD_VALUE, CELL, ERROR),
        Kind(SYSTEM_PROMPT_MISSING, CELL, WARNING),
    )
}

#: kinds that are warnings: counted and logged, but the data is kept whole.
WARNING_KINDS = frozenset(name for name, kind in KINDS.items() if kind.severity == WARNING)
#: what reading one store can raise: it fails that store alone (SPEC §8, D18)
STORE_ERRORS: tuple[type[HermesAssetsError], ...] = tuple(
    kind.exception for kind in KINDS.values() if kind.level == STORE and kind.exception is not None
)


def error_count(by_kind: dict[str, int]) -> int:
    """Errors proper in counts by ``error_kind`` (the warnings of :data:`WARNING_KINDS` excluded)."""
    return sum(n for kind, n in by_kind.items() if kind not in WARNING_KINDS)


def by_kind(error_kind: str) -> type[HermesAssetsError]:
    """The exception class of a store- or run-level ``error_kind``."""
    kind = KINDS.get(error_kind)
    return kind.exception if kind is not None and kind.exception is not None else HermesAssetsError


@dataclass(frozen=True)
class StoreFailure:
    """One store that could not be read (SPEC §1, §9, D18), by path and ``error_kind``:
    what a run and a sensor tick report of it."""

    path: str
    label: str
    error_kind: str
    message: str

    @classmethod
    def of(cls, path: str, label: str, exc: Exception) -> StoreFailure:
        if isinstance(exc, HermesAssetsError):
            return cls(path, label, exc.error_kind, str(exc))
        return cls(path, label, StoreCorrupt.error_kind, f"{path} cannot be read: {exc}")

    def log_fields(self) -> dict[str, str]:
        """The fields a log event names the store and its failure with."""
        return {"path": self.path, "store": self.label, "error_kind": self.error_kind, "reason": self.message}


@dataclass(frozen=True)
class CellError:
    """One bad cell: what kind, where. Never carries content (SPEC §9)."""

    error_kind: str
    session_id: str | None
    mid: int | None
    column: str | None = None


@dataclass
class ErrorTally:
    """Counts bad cells by kind for one dataset and keeps a few samples (ids only).

    Tallies of several datasets may share ``logged``: a cell that reaches three
    datasets is counted in each but logged once (SPEC §9).
    """

    max_samples: int = 20
    counts: Counter = field(default_factory=Counter)
    samples: list[CellError] = field(default_factory=list)
    logged: set | None = None

    def add(self, error_kind: str, session_id: str | None, mid: int | None, column: str | None = None) -> None:
        """Count one bad cell and log it the first time it is seen (ids only, never content)."""
        key = (error_kind, session_id, mid, column)
        if self.logged is None or key not in self.logged:
            from hermes_assets.lib.basics.logs import get_logger

            get_logger().warning(
                "hermes.project.bad_cell", error_kind=error_kind, session_id=session_id, mid=mid, column=column
            )
            if self.logged is not None:
                self.logged.add(key)
        self.counts[error_kind] += 1
        if len(self.samples) < self.max_samples:
            self.samples.append(CellError(error_kind, session_id, mid, column))

    def merge(self, other: ErrorTally) -> None:
        self.counts.update(other.counts)
        room = self.max_samples - len(self.samples)
        if room > 0:
            self.samples.extend(other.samples[:room])

    @property
    def errors(self) -> int:
        """Cell errors proper (warnings such as ``oversized_cell`` excluded)."""
        return error_count(self.counts)

    @property
    def warnings(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind in WARNING_KINDS)

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))

    def sample_dicts(self) -> list[dict]:
        return [{k: v for k, v in vars(s).items() if v is not None} for s in self.samples]
