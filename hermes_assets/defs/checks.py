"""Asset checks: what must hold in every written partition (SPEC §2, §5, §6).

They read the partition files the run wrote. The checks about the stores
themselves (sessions outside the partition range, stores that cannot be read)
are part of the capture graph (``defs/capture.py``): its plan already knows.
"""

import dagster as dg
import pyarrow.compute as pc

from hermes_assets.defs.partitions import daily_partitions
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib import attempts, schemas
from hermes_assets.lib.cursor import load_cursor
from hermes_assets.lib.schemas import GATEWAY, MESSAGES, SESSIONS


def _tables(context, warehouse: HermesWarehouse, dataset: str, columns: list[str]):
    wh = warehouse.open()
    for day in context.partition_keys:
        # `store` repeats one long path per row: keep it dictionary-encoded
        table = wh.read(dataset, day, columns=columns, read_dictionary=["store"] if "store" in columns else None)
        if table is not None:
            yield day, table


def _key_check(dataset: str) -> dg.AssetChecksDefinition:
    keys = list(schemas.DATASETS[dataset].key)

    @dg.asset_check(
        asset=dataset,
        name="key_unique",
        description=f"Within each partition, ({', '.join(keys)}) identifies one row: no duplicates.",
        partitions_def=daily_partitions,
    )
    def key_unique(context: dg.AssetCheckExecutionContext, warehouse: HermesWarehouse) -> dg.AssetCheckResult:
        duplicates, rows, bad_days = 0, 0, []
        for day, table in _tables(context, warehouse, dataset, keys):
            counts = table.group_by(keys).aggregate([([], "count_all")])
            dup = pc.sum(pc.subtract(counts.column("count_all"), 1)).as_py() or 0
            rows += table.num_rows
            if dup:
                duplicates += dup
                bad_days.append(day)
        return dg.AssetCheckResult(
            passed=duplicates == 0,
            metadata={"rows_checked": rows, "duplicate_rows": duplicates, "days_with_duplicates": bad_days},
        )

    return key_unique


key_checks = [_key_check(d) for d in (GATEWAY, SESSIONS, MESSAGES)]


@dg.asset_check(
    asset=GATEWAY,
    description="Required columns of ai_gateway_messages (SPEC §5.1, marked *) are never null.",
    partitions_def=daily_partitions,
)
def required_columns_not_null(
    context: dg.AssetCheckExecutionContext, warehouse: HermesWarehouse
) -> dg.AssetCheckResult:
    nulls: dict[str, int] = {}
    for _, table in _tables(context, warehouse, GATEWAY, list(schemas.REQUIRED_GATEWAY_COLUMNS)):
        for name in table.column_names:
            n = table.column(name).null_count
            if n:
                nulls[name] = nulls.get(name, 0) + n
    return dg.AssetCheckResult(passed=not nulls, metadata={"null_counts": nulls})


@dg.asset_check(
    asset=GATEWAY,
    description="Every row's `date` is the UTC day of its `message_created_at`.",
    partitions_def=daily_partitions,
)
def date_matches_message_created_at(
    context: dg.AssetCheckExecutionContext, warehouse: HermesWarehouse
) -> dg.AssetCheckResult:
    mismatched = 0
    for _, table in _tables(context, warehouse, GATEWAY, ["date", "message_created_at"]):
        days = pc.strftime(table.column("message_created_at"), format="%Y-%m-%d")
        mismatched += pc.sum(pc.not_equal(days, table.column("date"))).as_py() or 0
    return dg.AssetCheckResult(passed=mismatched == 0, metadata={"mismatched_rows": mismatched})


# --------------------------------------------------------------------------
# days_captured: reported by the sensor (issue 23)
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
        if state.instigator_name == SENSOR_NAME and getattr(state.instigator_data, "cursor", None):
            return state.instigator_data.cursor
    return None
