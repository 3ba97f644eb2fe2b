"""``hermes_sessions`` and ``hermes_messages``: Hermes's own rows, one read for both."""


import dagster as dg

from hermes_assets.defs import capture_steps as steps
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
        ),
        dg.AssetSpec(
            MESSAGES,
            description="One row per stored Hermes message, inactive (rewound, compacted) rows included; "
            "`content_text` holds the decoded text. Partitioned by the day its session started.",
            metadata={"dagster/column_schema": steps.column_schema(MESSAGES)},
            **COMMON,
        ),
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
    plan = steps.plan(context, hermes)
    policy_counts = steps.apply_policy(plan, usage_policy)
    ctx = usage_policy.projection_context()
    wh = warehouse.open()
    written = {SESSIONS: [], MESSAGES: []}
    days = []
    for day in plan.days:
        rows = capture.project_day(plan, day, {SESSIONS, MESSAGES}, ctx, busy_timeout_ms=hermes.busy_timeout_ms)
        for dataset in (SESSIONS, MESSAGES):
            written[dataset].append(steps.write(context, wh, dataset, rows))
        days.append({"rows": {k: t.num_rows for k, t in rows.tables.items()}, "tally": rows.tally})
    for dataset in (SESSIONS, MESSAGES):
        yield dg.MaterializeResult(
            asset_key=dataset,
            metadata={
                **steps.plan_metadata(plan),
                **{f"policy_{k}": v for k, v in policy_counts.items()},
                **steps.projection_metadata(days, dataset),
                **steps.totals(written[dataset]),
            },
        )
