"""``hermes_sessions`` and ``hermes_messages``: Hermes's own rows, one read for both."""


import dagster as dg

from hermes_assets.defs import capture_steps as steps
from hermes_assets.defs.io_manager import DATASETS_IO_MANAGER
from hermes_assets.defs.partitions import daily_partitions
from hermes_assets.defs.resources import HermesStores, HermesWarehouse, UsagePolicy
from hermes_assets.lib import capture
from hermes_assets.lib.warehouse import MESSAGES, SESSIONS

COMMON = dict(
    group_name="hermes",
    kinds={"sqlite", "parquet", "python"},
    owners=["team:hermes-assets"],
)

def _raw_specs() -> list[dg.AssetSpec]:
    return [
        dg.AssetSpec(
            SESSIONS,
            description="One row per Hermes session (every v22 `sessions` column), with store, "
            "policy class and per-model usage. Partitioned by the UTC day the session started.",
            metadata={"dagster/column_schema": steps.column_schema(SESSIONS)},
            **COMMON,
        ).with_io_manager_key(DATASETS_IO_MANAGER),
        dg.AssetSpec(
            MESSAGES,
            description="One row per stored Hermes message, inactive (rewound, compacted) rows included; "
            "`content_text` holds the decoded text. Partitioned by the day its session started.",
            metadata={"dagster/column_schema": steps.column_schema(MESSAGES)},
            **COMMON,
        ).with_io_manager_key(DATASETS_IO_MANAGER),
    ]


@dg.multi_asset(
    specs=_raw_specs(),
    partitions_def=daily_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    name="hermes_raw",
)
def hermes_raw(
    context: dg.AssetExecutionContext,
    hermes: HermesStores,
    warehouse: HermesWarehouse,
    usage_policy: UsagePolicy,
):
    plan = steps.plan(context, hermes, usage_policy)
    policy_counts = steps.apply_policy(plan, usage_policy)
    wh = warehouse.open()
    days, written = capture.capture_days(
        plan,
        (SESSIONS, MESSAGES),
        usage_policy.projection_context(),
        warehouse=wh.uri,
        staging=steps.staging_dir(wh, context.run.run_id, "raw"),
        busy_timeout_ms=hermes.busy_timeout_ms,
    )
    results = {SESSIONS: [], MESSAGES: []}
    for per_dataset in written:
        for dataset, result in per_dataset.items():
            context.add_asset_metadata(steps.day_metadata(result), asset_key=dataset, partition_key=result.day)
            results[dataset].append(result)
    for dataset in (SESSIONS, MESSAGES):
        yield dg.MaterializeResult(
            asset_key=dataset,
            metadata={
                **steps.plan_metadata(plan),
                **{f"policy_{k}": v for k, v in policy_counts.items()},
                **steps.projection_metadata(days, dataset),
                **steps.totals(results[dataset], f"hermes.op.write_{dataset}"),
            },
        )
