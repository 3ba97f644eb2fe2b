"""Asset checks: what must hold in every written partition (SPEC §2, §5, §6).

The checks on the files (``key_unique`` of each dataset, the gateway's
``required_columns_not_null`` and ``date_matches_message_created_at``) are
evaluated by the capture's own write step, right after it put the run's days
in place (:func:`written_checks`): no step of their own, each written file
read once for all of them. Their specs are declared on the capture's assets
(:func:`write_check_specs`), so a failure shows on the asset in the UI, in
``dg`` and in GraphQL as any check's does. The checks about the stores
themselves (sessions outside the partition range, stores that cannot be read)
are reported by the capture's plan: it already knows.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.defs.partitions import daily_partitions
from hermes_assets.lib import schemas
from hermes_assets.lib.changes import attempts
from hermes_assets.lib.changes.cursor import load_cursor
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


def _keys(dataset: str) -> list[str]:
    return list(schemas.DATASETS[dataset].key)


def write_check_specs() -> list[dg.AssetCheckSpec]:
    """The specs of the checks the write step evaluates, declared on the capture's assets."""
    descriptions = {
        KEY_UNIQUE: lambda ds: f"Within each partition, ({', '.join(_keys(ds))}) identifies one row: no duplicates.",
        REQUIRED_NOT_NULL: lambda ds: "Required columns of ai_gateway_messages (SPEC §5.1, marked *) are never null.",
        DATE_MATCHES: lambda ds: "Every row's `date` is the UTC day of its `message_created_at`.",
    }
    return [
        dg.AssetCheckSpec(name, asset=dataset, description=descriptions[name](dataset), partitions_def=daily_partitions)
        for dataset, name in WRITE_CHECKS
    ]


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


def day_figures(dataset: str, table: pa.Table) -> DayFigures:
    """The checks' figures of one day's table (the columns :func:`_columns` names)."""
    keys = _keys(dataset)
    distinct = table.select(keys).group_by(keys).aggregate([]).num_rows
    figures = DayFigures(rows=table.num_rows, duplicates=table.num_rows - distinct)
    if dataset == GATEWAY:
        figures.nulls = {
            name: table.column(name).null_count
            for name in schemas.REQUIRED_GATEWAY_COLUMNS
            if table.column(name).null_count
        }
        days = pc.strftime(table.column("message_created_at"), format="%Y-%m-%d")
        figures.mismatched = pc.sum(pc.not_equal(days, table.column("date"))).as_py() or 0
    return figures


def _columns(dataset: str) -> list[str]:
    if dataset == GATEWAY:
        return list(schemas.REQUIRED_GATEWAY_COLUMNS)  # the key, `date` and `message_created_at` among them
    return _keys(dataset)


def _read_figures(warehouse: Warehouse, dataset: str, day: str) -> DayFigures | None:
    columns = _columns(dataset)
    # `store` repeats one long path per row: keep it dictionary-encoded
    table = warehouse.read_own(dataset, day, columns=columns, read_dictionary=["store"] if "store" in columns else None)
    return None if table is None else day_figures(dataset, table)


def written_checks(warehouse: Warehouse, days: dict[str, list[str]], *, workers: int = 2) -> list[dg.AssetCheckResult]:
    """The write step's check results: ``days`` maps each dataset to the days the run wrote
    (or left as they were); each of those files is read once, only the columns the checks
    need, on ``workers`` threads.

    This reads back what was just written (the merge happens inside the library's
    write); a hook that hands each day's final table to the checks before it is
    encoded would spare that read.
    """
    jobs = [(dataset, day) for dataset in CAPTURE_DATASETS for day in days.get(dataset, [])]
    with ThreadPoolExecutor(max(1, min(workers, len(jobs)))) as pool:
        read = list(pool.map(lambda job: _read_figures(warehouse, *job), jobs))
    figures: dict[str, dict[str, DayFigures]] = {dataset: {} for dataset in CAPTURE_DATASETS}
    for (dataset, day), found in zip(jobs, read):
        if found is not None:
            figures[dataset][day] = found
    return check_results(figures)


def check_results(figures: dict[str, dict[str, DayFigures]]) -> list[dg.AssetCheckResult]:
    """One result per check of :data:`WRITE_CHECKS`, from each dataset's figures by day:
    how many rows were checked, how many violate the check, and on which days."""
    results = []
    for dataset, name in WRITE_CHECKS:
        metadata: dict[str, Any]
        by_day = figures.get(dataset, {})
        rows = sum(f.rows for f in by_day.values())
        if name == KEY_UNIQUE:
            bad = {day: f.duplicates for day, f in by_day.items() if f.duplicates}
            metadata = {"duplicate_rows": sum(bad.values()), "days_with_duplicates": sorted(bad)}
        elif name == REQUIRED_NOT_NULL:
            nulls: dict[str, int] = {}
            for f in by_day.values():
                for column, n in f.nulls.items():
                    nulls[column] = nulls.get(column, 0) + n
            bad = {day: sum(f.nulls.values()) for day, f in by_day.items() if f.nulls}
            metadata = {"null_counts": dict(sorted(nulls.items())), "days_with_nulls": sorted(bad)}
        else:
            bad = {day: f.mismatched for day, f in by_day.items() if f.mismatched}
            metadata = {"mismatched_rows": sum(bad.values()), "days_with_mismatches": sorted(bad)}
        results.append(
            dg.AssetCheckResult(
                asset_key=dataset,
                check_name=name,
                passed=not bad,
                metadata={"rows_checked": rows, "days_checked": len(by_day), **metadata},
            )
        )
    return results


# --------------------------------------------------------------------------
# days_captured: reported by the sensor
# --------------------------------------------------------------------------

DAYS_CAPTURED = "days_captured"
DAYS_CAPTURED_CHECK = dg.AssetCheckKey(dg.AssetKey(GATEWAY), DAYS_CAPTURED)
SENSOR_NAME = "hermes_state_sensor"


def days_captured_evaluation(failing: list[str], open_attempts: dict) -> dg.AssetCheckEvaluation:
    """The check's result for the sensor to report: failed while some day's runs keep failing."""
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(GATEWAY),
        check_name=DAYS_CAPTURED,
        passed=not failing,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=_days_captured_metadata(failing, open_attempts),
        description=(
            f"the capture of {', '.join(failing)} failed {attempts.FAILING_AFTER} or more times in a "
            "row; the sensor requests it again with backoff"
        )
        if failing
        else None,
    )


def _days_captured_metadata(failing: list[str], open_attempts: dict) -> dict:
    return {
        "days_failing": failing,
        "failed_runs_in_a_row": {d: open_attempts[d].failures for d in failing},
        "last_outcome": {d: open_attempts[d].error or "" for d in failing},
        "days_in_flight": len(open_attempts),
    }


@dg.asset_check(
    asset=GATEWAY,
    name=DAYS_CAPTURED,
    description="Every day the sensor requested is captured: a day whose capture runs failed "
    f"{attempts.FAILING_AFTER} or more times in a row (a full disk, a read-only warehouse ...) is named "
    "here until a run of it succeeds. The sensor reports it whenever that set of days changes; "
    "executed by hand, it reads the sensor's cursor.",
)
def days_captured(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    cursor = load_cursor(_sensor_cursor(context.instance))
    failing = attempts.failing(cursor)
    return dg.AssetCheckResult(
        passed=not failing,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=_days_captured_metadata(failing, cursor.attempts),
    )


def _sensor_cursor(instance: dg.DagsterInstance) -> str | None:
    if instance.schedule_storage is None:  # an ephemeral instance: no sensor has ever run in it
        return None
    for state in instance.all_instigator_state():  # schedules and sensors: few
        cursor = getattr(state.instigator_data, "cursor", None)  # a schedule's data has none
        if state.instigator_name == SENSOR_NAME and cursor:
            return cursor
    return None
