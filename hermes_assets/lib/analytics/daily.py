"""Every analytics dataset (SPEC §11), a day at a time, from the warehouse to the warehouse.

Each dataset is a pure function of one partition day of the captured datasets
(:func:`compute_day`), in a module of its own:

* ``hermes_daily_usage`` (:mod:`.usage`): per model, sessions, messages, tool
  calls, API calls, tokens and costs;
* ``hermes_daily_tools`` (:mod:`.tools`): per tool name, calls, results, error
  results and sessions;
* what Hermes's own report (``hermes insights``) answers besides:
  ``hermes_daily_channels`` (:mod:`.channels`), ``hermes_daily_skills``
  (:mod:`.skills`), ``hermes_activity`` (:mod:`.activity`) and
  ``hermes_top_sessions`` (:mod:`.top_sessions`).

The day is the partition day (the day the sessions started, SPEC §2), and
rows flagged ``source_deleted`` (D13) are left out: these tables describe what
the store holds now. So are copies (rows with ``copy_of``, D20): a logical
message, tool call or tool result counts once, however many generations
Hermes keeps of it (Hermes's own counts, in the columns named ``hermes_*`` and
in the skills, take every stored row, as its report does). A session's figures
are defined once (:mod:`.day_sessions`), for every dataset that counts them.
Each function returns the table and the day's totals (the numbers a
materialization shows and the Dagster UI plots); none holds a name, only counts.

Here, the day's one file of each: read once for every dataset, computed, and
replaced until it is known to be computed from the inputs as they are
(:func:`write_current_day`; several datasets of a day at once, their inputs
checked once after all their writes: :func:`write_current_datasets`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from hermes_assets.lib.analytics import activity, channels, day_sessions, skills, tools, top_sessions, usage
from hermes_assets.lib.analytics.live_rows import DayFigures, tool_parts
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.datasets import Warehouse, WriteResult
from hermes_assets.lib.warehouse.loading import DatasetDays

log = get_logger()

USAGE, TOOLS, CHANNELS, SKILLS, ACTIVITY, TOP_SESSIONS = (
    usage.USAGE,
    tools.TOOLS,
    channels.CHANNELS,
    skills.SKILLS,
    activity.ACTIVITY,
    top_sessions.TOP_SESSIONS,
)
ANALYTICS = tuple(schemas.ANALYTICS)

#: the columns each asset reads of each captured dataset (the IO manager reads nothing else)
DATASET_INPUTS: dict[str, dict[str, list[str]]] = {
    USAGE: usage.INPUTS,
    TOOLS: tools.INPUTS,
    CHANNELS: day_sessions.INPUTS,
    SKILLS: skills.INPUTS,
    ACTIVITY: day_sessions.INPUTS,
    TOP_SESSIONS: day_sessions.INPUTS,
}

#: every column an analytics day reads, per captured dataset (every analytics dataset of a day from one read)
INPUTS = {
    name: sorted({column for inputs in DATASET_INPUTS.values() for column in inputs.get(name, [])})
    for name in (SESSIONS, MESSAGES, GATEWAY)
}


def inputs_for(datasets: Iterable[str]) -> dict[str, list[str]]:
    """The columns the analytics ``datasets`` read of each captured dataset (those they read at all),
    sorted as in :data:`INPUTS`: a day is read once for all of them."""
    wanted = [DATASET_INPUTS[dataset] for dataset in datasets]
    return {
        name: sorted({column for inputs in wanted for column in inputs.get(name, [])})
        for name in INPUTS
        if any(name in inputs for inputs in wanted)
    }


#: the datasets computed from the day's sessions (:func:`~hermes_assets.lib.analytics.day_sessions.day_sessions`)
_OF_SESSIONS: dict[str, Callable[[str, list[day_sessions.Session]], DayFigures]] = {
    USAGE: usage.per_model,
    CHANNELS: channels.daily_channels,
    ACTIVITY: activity.activity,
    TOP_SESSIONS: top_sessions.top_sessions,
}


def compute_day(dataset: str, day: str, tables: dict[str, pa.Table]) -> DayFigures:
    """One analytics day from the day's tables of its inputs (``dataset name -> table``)."""
    return compute_days([dataset], day, tables)[dataset]


def compute_days(
    datasets: list[str], day: str, tables: dict[str, pa.Table], usage_by_model: Mapping[str, Any] | None = None
) -> dict[str, DayFigures]:
    """Several analytics of one day from the same tables (``dataset name -> table``), the day's
    sessions built once for every dataset that counts them. ``usage_by_model``: the sessions'
    ``usage_by_model`` cells decoded already (text -> entries: a capture's projection holds them)."""
    out: dict[str, DayFigures] = {}
    found: list[day_sessions.Session] | None = None
    parts: pa.Table | None = None  # the day's tool parts, for the tools and the sessions' tool calls
    for dataset in datasets:
        if dataset == SKILLS:
            out[dataset] = skills.daily_skills(day, tables[MESSAGES])
            continue
        if dataset in (TOOLS, *_OF_SESSIONS) and parts is None:
            parts = tool_parts(tables[GATEWAY])
        if dataset == TOOLS:
            out[dataset] = tools.tools_of(day, parts, tables[MESSAGES])
        elif dataset in _OF_SESSIONS:
            if found is None:
                found = day_sessions.sessions_of(tables[SESSIONS], tables[MESSAGES], parts, usage_by_model)
            out[dataset] = _OF_SESSIONS[dataset](day, found)
        else:
            raise KeyError(f"{dataset!r} is not an analytics dataset ({', '.join(ANALYTICS)})")
    return out


#: how many times a day is computed again when its file or its inputs changed while it was
#: computed (another host wrote that day meanwhile) before the run gives up on it
RECOMPUTE_LIMIT = 8


@dataclass
class DayInputs:
    """One day of an analytics dataset's inputs, as read, and the stamps of their files taken
    before the read (:meth:`Warehouse.day_stamp`: on an object store each file's version)."""

    tables: dict[str, pa.Table]
    stamps: dict[str, tuple]


def inputs_of(dataset: str) -> list[str]:
    """The captured datasets ``dataset`` is computed from."""
    return [name for name in INPUTS if name in DATASET_INPUTS[dataset]]


def read_day(warehouse: Warehouse, day: str, read: Callable[[], dict[str, pa.Table]]) -> DayInputs:
    """The day's inputs (``read``), their files' stamps taken first."""
    stamps = {name: warehouse.day_stamp(name, day) for name in INPUTS}
    return DayInputs(read(), stamps)


def write_current_day(
    warehouse: Warehouse,
    dataset: str,
    day: str,
    read: Callable[[], dict[str, pa.Table]],
    *,
    first_attempt: int = 1,
) -> tuple[WriteResult, DayFigures]:
    """Compute one analytics day from every host's files (``read``: the day's input tables)
    and replace its file, until the file is known to be computed from the inputs as they are.

    Every host that captures a day computes its analytics (SPEC §11), over all hosts'
    files, and several may write the day's one file at once. Each attempt reads the
    file's version first, then the inputs (their files' stamps first), computes, and
    replaces the file only if it is still that version (a conditional write:
    :meth:`Warehouse.replace_day`); after its write it checks that the inputs' files are
    still the ones read. A write that lost the race, or whose inputs moved, computes
    again. So the file written last was computed after the previous one was written and
    from the inputs as they stood after it was written: it equals a recomputation over
    every host's files. ``first_attempt``: the number of the first attempt made here (those
    before it made by :func:`write_current_datasets`, from figures already computed).
    """
    names = inputs_of(dataset)
    for attempt in range(first_attempt, RECOMPUTE_LIMIT + 1):
        current = warehouse.read_versioned(dataset, day)
        got = read_day(warehouse, day, read)
        stamps, figures = got.stamps, compute_day(dataset, day, got.tables)
        result = warehouse.replace_day(dataset, day, figures.table, current)
        if result is not None and all(warehouse.day_stamp(name, day) == stamps[name] for name in names):
            return result, figures
        log.info(
            "hermes.analytics.recomputed",
            dataset=dataset,
            day=day,
            attempt=attempt,
            reason="inputs_moved" if result is not None else "file_replaced",
        )
    raise RuntimeError(
        f"{dataset} {day}: its file or its inputs changed during each of {RECOMPUTE_LIMIT} computations "
        "(other hosts writing this day): the next run computes it again"
    )


def write_current_datasets(
    warehouse: Warehouse,
    datasets: Iterable[str],
    day: str,
    read: Callable[[], dict[str, pa.Table]],
    stamps: dict[str, tuple],
    figures: dict[str, DayFigures],
) -> dict[str, tuple[WriteResult, DayFigures] | Exception]:
    """Several analytics of one day, each written as :func:`write_current_day` writes it, from
    ``figures``: computed from the day's inputs when their files had ``stamps`` (taken before
    they were read, or by the capture that wrote them). The inputs' stamps are taken once after
    every dataset's file is written (not once per dataset, before and after its write): a
    dataset whose write lost the race, or whose inputs moved, is computed again
    (:func:`write_current_day`). -> dataset -> its result and figures, or the error that
    stopped it (the others are written all the same)."""
    out: dict[str, tuple[WriteResult, DayFigures] | Exception] = {}
    written: dict[str, WriteResult] = {}
    for dataset in datasets:
        try:
            result = warehouse.replace_day(dataset, day, figures[dataset].table, warehouse.read_versioned(dataset, day))
        except Exception as exc:  # a full disk, a folder that cannot be made: this dataset alone
            out[dataset] = exc
            continue
        if result is not None:
            written[dataset] = result
    names = [name for name in INPUTS if any(name in inputs_of(dataset) for dataset in written)]
    now = {name: warehouse.day_stamp(name, day) for name in names}
    for dataset in datasets:
        if dataset in out:
            continue
        result = written.get(dataset)
        if result is not None and all(now[name] == stamps.get(name) for name in inputs_of(dataset)):
            out[dataset] = (result, figures[dataset])
            continue
        log.info(
            "hermes.analytics.recomputed",
            dataset=dataset,
            day=day,
            attempt=1,
            reason="inputs_moved" if result is not None else "file_replaced",
        )
        try:
            out[dataset] = write_current_day(warehouse, dataset, day, read, first_attempt=2)
        except Exception as exc:
            out[dataset] = exc
    return out


def rebuild_days(warehouse: Warehouse, days: list[str]) -> dict[str, list[tuple[WriteResult, DayFigures]]]:
    """Recompute, straight from the warehouse, the analytics files among ``days``
    (the purge job's way to take purged rows out of the figures too); a day
    with no analytics file is left to the assets. Each day's inputs are read once."""
    present = {dataset: warehouse.existing(dataset, days) for dataset in ANALYTICS}
    inputs = {name: DatasetDays(warehouse, name, [], columns) for name, columns in INPUTS.items()}
    out: dict[str, list[tuple[WriteResult, DayFigures]]] = {dataset: [] for dataset in ANALYTICS}
    for day in sorted(set(days)):
        wanted = [dataset for dataset in ANALYTICS if day in present[dataset]]
        if wanted:
            read = functools.partial(read_inputs, inputs, day)
            first = read_day(warehouse, day, read)  # read once for every dataset; again only when they moved
            figures = compute_days(wanted, day, first.tables)
            written = write_current_datasets(warehouse, wanted, day, read, first.stamps, figures)
            for dataset in wanted:
                got = written[dataset]
                if isinstance(got, Exception):
                    raise got
                out[dataset].append(got)
    return out


def read_inputs(inputs: dict[str, DatasetDays], day: str) -> dict[str, pa.Table]:
    """One day of each input (the columns each reads)."""
    return {name: d.read(day) for name, d in inputs.items()}
