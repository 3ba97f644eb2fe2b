"""Asset checks: what must hold in every written partition (SPEC §2, §5, §6).

The checks on the files (``key_unique`` of each dataset, the gateway's
``required_columns_not_null`` and ``date_matches_message_created_at``) are
evaluated by the capture's own write step, right after it put the run's days
in place: no step of their own, each written file read once for all of them
(:func:`written_figures`). Their specs are declared on the capture's assets
with the assets' daily partitions (:func:`write_check_specs`), and the step
reports one evaluation per check and per day of the run
(:func:`day_evaluations`), each naming its partition and the materialization
of that day it judged. So after a ranged run (a backfill, a sensor's ranged
run) the UI, ``dg`` and GraphQL show each check passed or failed on each day,
as after a one-day run: Dagster plans a check on every partition of the run,
and a day with no evaluation of its own would show as skipped. A day with no
rows (no file) passes, with ``rows_checked`` 0. A failing day names the rows
that break the check in its metadata (how many, and the first
:data:`SAMPLE_ROWS` of them by their key).

The checks about the stores themselves (sessions outside the partition range,
stores that cannot be read) are reported by the capture's plan: it already
knows, and they are about the run, not a day.
"""

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from hermes_assets.defs.tags import PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG, TRIGGER_TAG, WILL_RETRY_TAG
from hermes_assets.lib import schemas
from hermes_assets.lib.changes import attempts
from hermes_assets.lib.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.datasets import Warehouse

KEY_UNIQUE = "key_unique"
REQUIRED_NOT_NULL = "required_columns_not_null"
DATE_MATCHES = "date_matches_message_created_at"
#: (dataset, check name) of every check the write step evaluates
WRITE_CHECKS = (
    (GATEWAY, KEY_UNIQUE),
    (GATEWAY, REQUIRED_NOT_NULL),
    (GATEWAY, DATE_MATCHES),
    (SESSIONS, KEY_UNIQUE),
    (MESSAGES, KEY_UNIQUE),
)
#: the rows a failing day names in its metadata (the count is always whole)
SAMPLE_ROWS = 20


def _keys(dataset: str) -> list[str]:
    return list(schemas.DATASETS[dataset].key)


def write_check_specs(partitions: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    """The specs of the checks the write step evaluates, declared on the capture's assets (on their partitions)."""
    descriptions = {
        KEY_UNIQUE: lambda ds: f"Within each partition, ({', '.join(_keys(ds))}) identifies one row: no duplicates.",
        REQUIRED_NOT_NULL: lambda ds: "Required columns of ai_gateway_messages (SPEC §5.1, marked *) are never null.",
        DATE_MATCHES: lambda ds: "Every row's `date` is the UTC day of its `message_created_at`.",
    }
    return [
        dg.AssetCheckSpec(name, asset=dataset, description=descriptions[name](dataset), partitions_def=partitions)
        for dataset, name in WRITE_CHECKS
    ]


def check_key(dataset: str, name: str) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(dg.AssetKey(dataset), name)


def check_output(dataset: str, name: str) -> str:
    """The output of the capture graph that carries a check's result (Dagster's naming)."""
    return f"{dataset}_{name}"


@dataclass
class DayFigures:
    """What one written partition file shows the checks."""

    rows: int = 0
    duplicates: int = 0
    #: required column -> rows where it is null (gateway)
    nulls: dict[str, int] = field(default_factory=dict)
    #: rows whose `date` is not the day of their `message_created_at` (gateway)
    mismatched: int = 0
    #: check name -> the first rows that break it (their key and what is wrong), when some do
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def day_figures(dataset: str, table: pa.Table) -> DayFigures:
    """The checks' figures of one day's table (the columns :func:`_columns` names)."""
    keys = _keys(dataset)
    groups = table.select(keys).group_by(keys).aggregate([([], "count_all")])
    figures = DayFigures(rows=table.num_rows, duplicates=table.num_rows - groups.num_rows)
    if figures.duplicates:
        repeated = groups.filter(pc.greater(groups.column("count_all"), 1)).slice(0, SAMPLE_ROWS)
        figures.samples[KEY_UNIQUE] = [
            {**{k: row[k] for k in keys}, "copies": row["count_all"]} for row in repeated.to_pylist()
        ]
    if dataset == GATEWAY:
        figures.nulls = {
            name: table.column(name).null_count
            for name in schemas.REQUIRED_GATEWAY_COLUMNS
            if table.column(name).null_count
        }
        days = pc.strftime(table.column("message_created_at"), format="%Y-%m-%d")
        mismatched = pc.fill_null(pc.not_equal(days, table.column("date")), False)
        figures.mismatched = pc.sum(mismatched).as_py() or 0
        if figures.nulls:
            figures.samples[REQUIRED_NOT_NULL] = _null_rows(table, keys, list(figures.nulls))
        if figures.mismatched:
            bad = table.filter(mismatched).slice(0, SAMPLE_ROWS)
            figures.samples[DATE_MATCHES] = [
                {**{k: row[k] for k in keys}, "date": row["date"], "message_created_at": str(row["message_created_at"])}
                for row in bad.select([*keys, "date", "message_created_at"]).to_pylist()
            ]
    return figures


def _null_rows(table: pa.Table, keys: list[str], columns: list[str]) -> list[dict[str, Any]]:
    """The first rows with a null required column: their key and which columns are null."""
    mask = pc.is_null(table.column(columns[0]))
    for name in columns[1:]:
        mask = pc.or_(mask, pc.is_null(table.column(name)))
    rows = table.filter(mask).slice(0, SAMPLE_ROWS).to_pylist()
    return [{**{k: row[k] for k in keys}, "null_columns": [c for c in columns if row[c] is None]} for row in rows]


def _columns(dataset: str) -> list[str]:
    if dataset == GATEWAY:
        return list(schemas.REQUIRED_GATEWAY_COLUMNS)  # the key, `date` and `message_created_at` among them
    return _keys(dataset)


def _read_figures(warehouse: Warehouse, dataset: str, day: str) -> DayFigures:
    columns = _columns(dataset)
    # `store` repeats one long path per row: keep it dictionary-encoded
    table = warehouse.read_own(dataset, day, columns=columns, read_dictionary=["store"] if "store" in columns else None)
    return DayFigures() if table is None else day_figures(dataset, table)


def written_figures(
    warehouse: Warehouse, days: Mapping[str, Mapping[str, int]], *, workers: int = 2
) -> dict[str, dict[str, DayFigures]]:
    """The checks' figures of each day of a run: ``days`` maps each dataset to the run's days and
    the rows each day's file holds after the write (0: no file). Each file with rows is read once,
    only the columns the checks need, on ``workers`` threads; a day without rows has empty figures.

    This reads back what was just written (the merge happens inside the library's
    write); a hook that hands each day's final table to the checks before it is
    encoded would spare that read.
    """
    figures: dict[str, dict[str, DayFigures]] = {
        dataset: {day: DayFigures() for day in days.get(dataset, {})} for dataset in CAPTURE_DATASETS
    }
    jobs = [(dataset, day) for dataset in CAPTURE_DATASETS for day, rows in days.get(dataset, {}).items() if rows]
    with ThreadPoolExecutor(max(1, min(workers, len(jobs)))) as pool:
        read = list(pool.map(lambda job: _read_figures(warehouse, *job), jobs))
    for (dataset, day), found in zip(jobs, read):
        figures[dataset][day] = found
    return figures


def day_result(dataset: str, name: str, figures: DayFigures) -> tuple[bool, dict[str, Any]]:
    """Whether one day passes one check, and the metadata its evaluation shows."""
    metadata: dict[str, Any] = {"rows_checked": figures.rows}
    if name == KEY_UNIQUE:
        passed = not figures.duplicates
        metadata["duplicate_rows"] = figures.duplicates
    elif name == REQUIRED_NOT_NULL:
        passed = not figures.nulls
        metadata["null_counts"] = dict(sorted(figures.nulls.items()))
    else:
        passed = not figures.mismatched
        metadata["mismatched_rows"] = figures.mismatched
    if not passed:
        metadata["rows"] = figures.samples.get(name, [])
    return passed, metadata


def day_evaluations(
    figures: Mapping[str, Mapping[str, DayFigures]],
    *,
    targets: Mapping[str, Mapping[str, AssetCheckEvaluationTargetMaterializationData]] | None = None,
    selected: Collection[dg.AssetCheckKey] | None = None,
) -> list[dg.AssetCheckEvaluation]:
    """One evaluation per check of :data:`WRITE_CHECKS` (those in ``selected``, when given) and
    per day of each dataset's ``figures``, on that day's partition; ``targets`` names, per dataset
    and day, the materialization each judged."""
    evaluations = []
    for dataset, name in WRITE_CHECKS:
        if selected is not None and check_key(dataset, name) not in selected:
            continue
        for day, found in sorted(figures.get(dataset, {}).items()):
            passed, metadata = day_result(dataset, name, found)
            evaluations.append(
                dg.AssetCheckEvaluation(
                    asset_key=dg.AssetKey(dataset),
                    check_name=name,
                    passed=passed,
                    metadata=metadata,
                    severity=dg.AssetCheckSeverity.ERROR,
                    blocking=False,
                    partition=day,
                    target_materialization_data=(targets or {}).get(dataset, {}).get(day),
                )
            )
    return evaluations


def materializations(
    instance: dg.DagsterInstance, days: Mapping[str, Iterable[str]]
) -> dict[str, dict[str, AssetCheckEvaluationTargetMaterializationData]]:
    """The latest materialization of each dataset's ``days`` (those of the run that just wrote
    them): one query per dataset, for the evaluations to name what they judged."""
    found: dict[str, dict[str, AssetCheckEvaluationTargetMaterializationData]] = {}
    for dataset, wanted in days.items():
        partitions = sorted(set(wanted))
        if not partitions:
            continue
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(dataset), asset_partitions=partitions),
            limit=len(partitions),
        ).records  # newest first: this run's, one per day
        by_day = found.setdefault(dataset, {})
        for record in records:
            if record.partition_key is not None and record.partition_key not in by_day:
                by_day[record.partition_key] = AssetCheckEvaluationTargetMaterializationData(
                    run_id=record.run_id, storage_id=record.storage_id, timestamp=record.timestamp
                )
    return found


# --------------------------------------------------------------------------
# days_captured: reported by the sensor
# --------------------------------------------------------------------------

DAYS_CAPTURED = "days_captured"
DAYS_CAPTURED_CHECK = dg.AssetCheckKey(dg.AssetKey(GATEWAY), DAYS_CAPTURED)
SENSOR_NAME = "hermes_state_sensor"
#: the sensor's runs a check executed by hand reads, newest first: days fail in a row recently
RUNS_READ = 500


def days_captured_evaluation(failing: list[str], open_attempts: dict) -> dg.AssetCheckEvaluation:
    """The check's result for the sensor to report: failed while some day's runs keep failing."""
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(GATEWAY),
        check_name=DAYS_CAPTURED,
        passed=not failing,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=_days_captured_metadata(
            failing,
            {d: open_attempts[d].failures for d in failing},
            {d: open_attempts[d].error or "" for d in failing},
            len(open_attempts),
        ),
        description=(
            f"the capture of {', '.join(failing)} failed {attempts.FAILING_AFTER} or more times in a "
            "row; the sensor requests it again with backoff"
        )
        if failing
        else None,
    )


def _days_captured_metadata(failing: list[str], failures: dict, last: dict, in_flight: int) -> dict:
    return {
        "days_failing": failing,
        "failed_runs_in_a_row": failures,
        "last_outcome": last,
        "days_in_flight": in_flight,
    }


@dataclass
class DayRuns:
    """What the sensor's runs of one day show, newest first, up to the day's latest success."""

    failures: int = 0
    last_outcome: str = ""
    in_flight: bool = False
    done: bool = False


def days_from_runs(runs: Iterable[dg.DagsterRun]) -> dict[str, DayRuns]:
    """Each day's runs read newest first (``runs`` is): its failed or canceled runs since its
    latest success, and whether one is still queued or running. A failed run that Dagster's
    own retries run again is not an outcome: its retry is."""
    out: dict[str, DayRuns] = {}
    for run in runs:
        for day in run_days(run.tags):
            seen = out.setdefault(day, DayRuns())
            if seen.done:
                continue
            if run.status == dg.DagsterRunStatus.SUCCESS:
                seen.done = True
            elif run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
                if run.tags.get(WILL_RETRY_TAG) != "true":
                    seen.failures += 1
                    seen.last_outcome = seen.last_outcome or f"run {run.run_id} {run.status.value.lower()}"
            elif not run.is_finished:
                seen.in_flight = True
    return out


def run_days(tags: Mapping[str, str]) -> list[str]:
    """The days a run captures, from its tags: its partition, or every day of its range."""
    if tags.get(PARTITION_TAG):
        return [tags[PARTITION_TAG]]
    first, last = tags.get(RANGE_START_TAG), tags.get(RANGE_END_TAG)
    if not first or not last:
        return []
    day, end = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    out = []
    while day <= end:
        out.append(day.isoformat())
        day += dt.timedelta(days=1)
    return out


@dg.asset_check(
    asset=GATEWAY,
    name=DAYS_CAPTURED,
    description="Every day the sensor requested is captured: a day whose capture runs failed "
    f"{attempts.FAILING_AFTER} or more times in a row (a full disk, a read-only warehouse ...) is named "
    "here until a run of it succeeds. The sensor reports it whenever that set of days changes; "
    f"executed by hand, it reads the sensor's latest {RUNS_READ} runs.",
)
def days_captured(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    runs = context.instance.get_runs(filters=dg.RunsFilter(tags=TRIGGER_TAG), limit=RUNS_READ)  # newest first
    days = days_from_runs(runs)
    failing = sorted(d for d, r in days.items() if not r.done and r.failures >= attempts.FAILING_AFTER)
    return dg.AssetCheckResult(
        passed=not failing,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=_days_captured_metadata(
            failing,
            {d: days[d].failures for d in failing},
            {d: days[d].last_outcome for d in failing},
            sum(r.in_flight for r in days.values()),
        ),
    )
