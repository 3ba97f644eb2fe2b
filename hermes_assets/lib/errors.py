"""The typed errors of hermes_assets.

Every failure the project reports has an ``error_kind`` (SPEC §9). Store-level
kinds fail a run and change no partition file; cell-level kinds are counted
(see :class:`ErrorTally`) and never raised.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# Cell-level kinds (counted, never raised).
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
# Store level, once per store and run (D22): columns of a newer Hermes, kept in ``extra_columns``.
UNKNOWN_COLUMNS = "unknown_columns"
# Policy level (the session is ignored, counted).
HYPIGNORE_UNREADABLE = "hypignore_unreadable"
BAD_CLASS_TOKEN = "bad_class_token"

#: kinds that are warnings: counted and logged, but the data is kept whole.
WARNING_KINDS = frozenset({OVERSIZED_CELL, "store_replaced", BAD_CLASS_TOKEN, SYSTEM_PROMPT_MISSING, UNKNOWN_COLUMNS})


def error_count(by_kind: dict[str, int]) -> int:
    """Errors proper in counts by ``error_kind`` (the warnings of :data:`WARNING_KINDS` excluded)."""
    return sum(n for kind, n in by_kind.items() if kind not in WARNING_KINDS)


class HermesAssetsError(Exception):
    """Base class: a failure with a stable ``error_kind`` string."""

    error_kind = "error"

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class StoreMissing(HermesAssetsError):
    """Not a failure but a state (SPEC R9): no store, or one Hermes has created but
    not yet given its tables. Callers treat it as "nothing to capture yet"."""

    error_kind = "store_missing"


class StoreBusy(HermesAssetsError):
    """The store stayed locked past the retry budget, or a writer is mid-transaction."""

    error_kind = "store_busy"


class StoreCorrupt(HermesAssetsError):
    """SQLite reports the file as malformed or not a database."""

    error_kind = "store_corrupt"


class StoreReplaced(HermesAssetsError):
    """The file changed identity under us (new inode, ids went backwards)."""

    error_kind = "store_replaced"


class NotAHermesStore(HermesAssetsError):
    """A SQLite file without the ``sessions`` and ``messages`` tables."""

    error_kind = "not_a_hermes_store"


class PolicyListUnreadable(HermesAssetsError):
    """The machine-local usage-policy list exists but cannot be read or parsed."""

    error_kind = "policy_list_unreadable"


class ConfigurationError(HermesAssetsError):
    """A setting (environment variable) that cannot be honoured."""

    error_kind = "configuration_error"


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


def by_kind(error_kind: str) -> type[HermesAssetsError]:
    """The exception class of a store- or configuration-level ``error_kind``."""
    for cls in (
        StoreMissing,
        StoreBusy,
        StoreCorrupt,
        StoreReplaced,
        NotAHermesStore,
        PolicyListUnreadable,
        ConfigurationError,
    ):
        if cls.error_kind == error_kind:
            return cls
    return HermesAssetsError


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
            from hermes_assets.lib.logs import get_logger

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
