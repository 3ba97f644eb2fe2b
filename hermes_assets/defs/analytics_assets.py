"""The first analytics layer: ``hermes_daily_usage`` and ``hermes_daily_tools`` (SPEC §11).

Built on the captured datasets through the ``hermes_datasets`` IO manager
(inputs read one day at a time, only the columns they need), on the same
daily partitions. The sensor's capture runs compute their days' analytics in the same run,
right after the capture (``defs/sensors.py``): a captured day's analytics are current when its
run ends. An ``eager()``-like condition (:func:`automation_condition`) keeps them current after
any other capture, of any day (a backfill of the datasets launched from the UI): the
``hermes_automation`` sensor (on by default, run by the daemon) recomputes the days whose inputs
changed in a run that did not compute them, and runs again a day whose analytics failed. Each day is written as Parquet
beside the other datasets (``<warehouse>/<asset>/day=YYYY-MM-DD/part-0.parquet``,
the same file rules) and its totals are numeric metadata, which the asset
page plots over time. In a warehouse several hosts write, every host computes
the days it captures over all hosts' files: the last file written is computed
from the final inputs (:func:`hermes_assets.lib.analytics.daily.write_current_day`).
"""

import functools

import dagster as dg

from hermes_assets.defs import precomputed, run_progress
from hermes_assets.defs.capture_assets import column_schema, refuse_host_conflicts
from hermes_assets.defs.io_manager import DATASETS_IO_MANAGER
from hermes_assets.defs.partitions import Days
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.defs.tags import TRIGGER_TAG
from hermes_assets.lib.analytics import daily
from hermes_assets.lib.analytics.daily import TOOLS, USAGE, DayFigures
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.warehouse.datasets import WriteResult
from hermes_assets.lib.warehouse.loading import DatasetDays

log = get_logger()

GROUP = "hermes_analytics"
#: a day whose analytics run failed is run again at each minute boundary until it succeeds
RETRY_CRON = "* * * * *"
#: the tag of the runs that compute these assets right after their capture, in the same run (the
#: watermark sensor's: ``defs/sensors.py``)
COMPUTED_IN_RUN = TRIGGER_TAG


def automation_condition(computed_in_sensor_runs: bool = False, *, every_day: bool = False) -> dg.AutomationCondition:
    """When a day of an asset downstream of the datasets is run (by the ``hermes_automation`` sensor);
    ``every_day``: when an asset computed over every day at once (not partitioned) is run: after a
    capture of any day (a day never captured does not hold it back, and before the first capture
    there is nothing to compute: it is not run for being missing).

    ``eager()`` without its latest-day restriction (captures of older days must reach
    these assets too), with these changes, so that such an asset never falls behind the
    datasets once nothing moves:

    - ``computed_in_sensor_runs`` (the analytics assets: the sensor's runs compute them right
      after their capture, in the same run: :data:`COMPUTED_IN_RUN`): a capture by such a run
      needs nothing more (never computed twice);
    - a capture is *handled* only by a run of the asset requested after it: ``eager()`` also
      counts the day's own update as handled, so a capture that lands while the day's run of
      the asset is in flight (that run read the older files) was forgotten when that run ended;
    - a day whose latest run of the asset failed (a full disk, a read-only warehouse)
      is run again, at the first evaluation after each minute boundary, until it
      succeeds, without waiting for another capture.
    """
    ac = dg.AutomationCondition
    # A capture and the previous tick's request can be seen on the same tick: their times tell
    # which came first. Only bare conditions carry a time (not an AND or an OR of them, as in
    # any_deps_updated()); without one the request wins and the capture is forgotten. So the
    # trigger is a bare newly_updated() of a dependency, reset by a request of this asset and,
    # apart, by a capture that only runs computing this asset made (which needs no time: such a
    # run is never this sensor's request, and on a tick that sees both, it wins). Dagster's
    # executed_with_root_target() would not do: it looks at an asset's latest materialization
    # alone, one day of a ranged run.
    deps_updated = ac.any_deps_match(ac.newly_updated()).with_label("any_deps_updated")
    # any dependency, not all: a run's three datasets are materialized one after the other, and a
    # tick can see some of them and the next tick the others
    in_run = ac.any_deps_match(
        ac.newly_updated() & ac.all_new_updates_have_run_tags(tag_values=COMPUTED_IN_RUN)
    ).with_label("any_deps_updated by runs that computed this asset too")
    captured: dg.AutomationCondition = deps_updated.since(ac.newly_requested())
    if computed_in_sensor_runs:
        captured = captured & deps_updated.since(in_run)
    updated = captured | ac.newly_missing().since(ac.newly_requested() | ac.newly_updated())
    failed = (ac.execution_failed() & ac.cron_tick_passed(RETRY_CRON, "UTC")).with_label("failed, retried each minute")
    if every_day:
        return ((captured | failed) & ~ac.any_deps_in_progress() & ~ac.in_progress()).with_label(
            "after any day's capture, retried"
        )
    return ((updated | failed) & ~ac.any_deps_missing() & ~ac.any_deps_in_progress() & ~ac.in_progress()).with_label(
        "eager, any day, retried"
    )


AUTOMATION = automation_condition(computed_in_sensor_runs=True)


def _common(dataset: str, days: Days) -> dict:
    return dict(
        group_name=GROUP,
        partitions_def=days.partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        automation_condition=AUTOMATION,
        io_manager_key=DATASETS_IO_MANAGER,
        kinds={"parquet", "python"},
        owners=["team:hermes-assets"],
        metadata={"dagster/column_schema": column_schema(dataset)},
    )


def _ins(columns: dict[str, list[str]]) -> dict[str, dg.AssetIn]:
    return {name: dg.AssetIn(name, metadata={"columns": cols}) for name, cols in columns.items()}


def day_metadata(result: WriteResult, figures: DayFigures) -> dict:
    """One analytics day's metadata: its rows, its file and its totals (plotted by the UI)."""
    return {"dagster/row_count": result.rows, "path": dg.MetadataValue.path(result.path), **figures.totals}


def _materialize(
    context: dg.AssetExecutionContext, warehouse: HermesWarehouse, dataset: str, inputs: dict[str, DatasetDays]
) -> dg.MaterializeResult:
    """Each day of the run: compute, replace the day's file, attach the day's totals."""
    wh = warehouse.open()
    refuse_host_conflicts(lambda: warehouse.check_host(wh))  # a host refused writes nothing, not even here
    files_changed = rows = from_capture = 0
    with run_progress.progress(context, dataset, len(context.partition_keys)) as progress:
        for day in context.partition_keys:
            known = precomputed.take(wh, dataset, day)  # computed by this run's capture, if it could
            read = functools.partial(daily.read_inputs, inputs, day)
            result, figures = daily.write_current_day(wh, dataset, day, read, known=known)
            from_capture += known is not None and figures is known[1]
            context.add_asset_metadata(day_metadata(result, figures), partition_key=day)
            files_changed += result.changed
            rows += result.rows
            progress.advance(result.rows)
    log.info(
        "hermes.analytics.written",
        dataset=dataset,
        days=len(context.partition_keys),
        rows=rows,
        files_changed=files_changed,
        days_from_capture=from_capture,  # computed by the capture from the tables it built, not read back
    )
    return dg.MaterializeResult()


USAGE_DESCRIPTION = (
    "What each day of Hermes used, per model: sessions, messages, tool calls, API calls, "
    "input/output/cache read/cache write/reasoning tokens, total tokens (Hermes's own: input + cache + output), "
    "estimated and actual cost in USD. Tokens and costs come from each session's `usage_by_model` (a session "
    "that used several models counts under each; without it, the session's own model and totals); messages "
    "(`session_meta` rows excepted) and tool calls count under the session's `model`, each logical message "
    "once (copies Hermes makes of a message, `copy_of`, left out). The day is the day the sessions started; rows "
    "flagged `source_deleted` are left out."
)
TOOLS_DESCRIPTION = (
    "Which tools Hermes used each day, per `tool_name`: calls (`tool_call` parts), results "
    "(`tool_result` parts), error results and sessions, from `ai_gateway_messages_hermes` (rows flagged "
    "`source_deleted` and copies, `copy_of`, left out). An error result is one whose `is_error` is true or, as Hermes leaves "
    "`is_error` NULL, one Hermes itself shows as failed (hermes-agent's `_detect_tool_failure`): a terminal "
    "result with a non-zero `exit_code`; a JSON result with a truthy `error` (or `message`) and "
    '`"success": false` or an `error` key; a memory result over its limit; else text whose first 500 '
    'characters hold `"error"` or `"failed"` or that starts with `Error` (file writes that landed never '
    "count)."
)


def analytics_assets(days: Days) -> list[dg.AssetsDefinition]:
    """``hermes_daily_usage`` and ``hermes_daily_tools`` on the partitions ``days``."""

    @dg.asset(name=USAGE, description=USAGE_DESCRIPTION, ins=_ins(daily.USAGE_INPUTS), **_common(USAGE, days))
    def hermes_daily_usage(
        context: dg.AssetExecutionContext,
        warehouse: HermesWarehouse,
        hermes_sessions: DatasetDays,
        hermes_messages: DatasetDays,
        ai_gateway_messages_hermes: DatasetDays,
    ) -> dg.MaterializeResult:
        inputs = {d.dataset: d for d in (hermes_sessions, hermes_messages, ai_gateway_messages_hermes)}
        return _materialize(context, warehouse, USAGE, inputs)

    @dg.asset(name=TOOLS, description=TOOLS_DESCRIPTION, ins=_ins(daily.TOOLS_INPUTS), **_common(TOOLS, days))
    def hermes_daily_tools(
        context: dg.AssetExecutionContext, warehouse: HermesWarehouse, ai_gateway_messages_hermes: DatasetDays
    ) -> dg.MaterializeResult:
        return _materialize(context, warehouse, TOOLS, {ai_gateway_messages_hermes.dataset: ai_gateway_messages_hermes})

    return [hermes_daily_usage, hermes_daily_tools]
