"""``ai_gateway_messages_hermes``: the canonical rows, as a graph of ops.

read the day's sessions -> apply usage policy -> project rows -> write partition.
Ops hand each other small values (a plan, staged file paths), never a store.
"""


import os
import shutil

import dagster as dg

from hermes_assets.defs import capture_steps as steps
from hermes_assets.defs.assets import COMMON
from hermes_assets.defs.io_manager import DATASETS_IO_MANAGER
from hermes_assets.defs.partitions import daily_partitions
from hermes_assets.defs.resources import HermesStores, HermesWarehouse, UsagePolicy
from hermes_assets.lib import capture
from hermes_assets.lib.capture import CapturePlan
from hermes_assets.lib.warehouse import GATEWAY


@dg.op(description="Place every Hermes session on its UTC day; keep those of the run's days.")
def read_hermes_sessions(
    context: dg.OpExecutionContext, hermes: HermesStores, usage_policy: UsagePolicy
) -> dg.Output[CapturePlan]:
    plan = steps.plan(context, hermes, usage_policy)
    return dg.Output(plan, metadata=steps.plan_metadata(plan))


@dg.op(description="Classify sessions by usage policy (SPEC §7) before any row is built.")
def apply_usage_policy(context: dg.OpExecutionContext, usage_policy: UsagePolicy, plan: CapturePlan) -> dg.Output[CapturePlan]:
    counts = steps.apply_policy(plan, usage_policy)
    return dg.Output(plan, metadata=counts)


@dg.op(description="Project each day's kept sessions into canonical rows, staged one day at a time "
       "(days in parallel); nothing is in place until the write step.")
def project_rows(
    context: dg.OpExecutionContext,
    hermes: HermesStores,
    warehouse: HermesWarehouse,
    usage_policy: UsagePolicy,
    plan: CapturePlan,
) -> dg.Output[list]:
    wh = warehouse.open()
    staging = steps.staging_dir(wh, context.run_id, GATEWAY)
    os.makedirs(staging, exist_ok=True)
    state = {
        "plan": plan,
        "ctx": usage_policy.projection_context(),
        "datasets": (GATEWAY,),
        "warehouse": wh.uri,
        "staging": staging,
        "busy_timeout_ms": hermes.busy_timeout_ms,
    }
    try:
        staged = list(capture.map_days(capture.stage_day, state, plan.days))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    for item in staged:
        item["facts"] = capture.facts_for_day(plan, item["day"], item.pop("mids"))
    metadata = steps.projection_metadata(staged, GATEWAY)
    for item in staged:
        item.pop("tally")
    return dg.Output(staged, metadata=metadata)


@dg.op(description="Merge each staged day into its partition file, atomically, under the day's lock.",
       out=dg.Out(io_manager_key=DATASETS_IO_MANAGER))
def write_partitions(
    context: dg.AssetExecutionContext, warehouse: HermesWarehouse, staged: list
) -> dg.MaterializeResult:
    state = {"warehouse": warehouse.open().uri, "staged": {item["day"]: item for item in staged}}
    results = []
    try:
        for per_dataset in capture.write_days(state, [item["day"] for item in staged]):
            result = per_dataset[GATEWAY]
            context.add_asset_metadata(steps.day_metadata(result), partition_key=result.day)
            results.append(result)
    finally:
        if staged:
            shutil.rmtree(os.path.dirname(staged[0]["paths"][GATEWAY]), ignore_errors=True)
    return dg.MaterializeResult(metadata=steps.totals(results, "hermes.op.write_partitions"))


@dg.graph_asset(
    name=GATEWAY,
    description="Hermes activity as canonical `ai_gateway_messages` rows (HypAware schema v7, "
    "client_name='hermes'), one row per message part plus a session-end row.",
    partitions_def=daily_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    metadata={"dagster/column_schema": steps.column_schema(GATEWAY)},
    **COMMON,
)
def ai_gateway_messages_hermes():
    return write_partitions(project_rows(apply_usage_policy(read_hermes_sessions())))
