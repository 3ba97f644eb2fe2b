"""The analytics layer (SPEC §11): ``hermes_daily_usage``, ``hermes_daily_tools``, and what Hermes's own
report answers besides (``hermes_daily_channels``, ``hermes_daily_skills``, ``hermes_activity``,
``hermes_top_sessions``), one asset each.

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

import contextvars
import functools
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import dagster as dg

from hermes_assets.defs import precomputed, run_progress
from hermes_assets.defs.capture_assets import refuse_host_conflicts
from hermes_assets.defs.io_manager import DATASETS_IO_MANAGER
from hermes_assets.defs.partitions import Days
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.defs.tags import TRIGGER_TAG
from hermes_assets.lib.analytics import columns, daily
from hermes_assets.lib.analytics.daily import DayFigures
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.warehouse.datasets import Warehouse, WriteResult
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
    - a day that has no file is run (once) only while it has none;
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
    # a day with no file yet: only while it still has none (the state of a since() can outlive the
    # update that reset it, when the update lands while a run of the day is in flight)
    missing = (ac.newly_missing().since(ac.newly_requested() | ac.newly_updated()) & ac.missing()).with_label("missing")
    updated = captured | missing
    failed = (ac.execution_failed() & ac.cron_tick_passed(RETRY_CRON, "UTC")).with_label("failed, retried each minute")
    if every_day:
        return ((captured | failed) & ~ac.any_deps_in_progress() & ~ac.in_progress()).with_label(
            "after any day's capture, retried"
        )
    return ((updated | failed) & ~ac.any_deps_missing() & ~ac.any_deps_in_progress() & ~ac.in_progress()).with_label(
        "eager, any day, retried"
    )


AUTOMATION = automation_condition(computed_in_sensor_runs=True)


def column_schema(dataset: str) -> dg.TableSchema:
    """An analytics dataset's columns as Dagster shows them: type, NULL or not, and what each holds
    (and how it stands to Hermes's report: :mod:`hermes_assets.lib.analytics.columns`)."""
    meanings = columns.DESCRIPTIONS[dataset]
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                f.name,
                str(f.type),
                description=meanings[f.name],
                constraints=dg.TableColumnConstraints(nullable=f.nullable),
            )
            for f in schemas.schema_of(dataset)
        ]
    )


def day_metadata(result: WriteResult, figures: DayFigures) -> dict:
    """One analytics day's metadata: its rows, its file and its totals (plotted by the UI)."""
    return {"dagster/row_count": result.rows, "path": dg.MetadataValue.path(result.path), **figures.totals}


#: the days an analytics step writes at once: each file is fsynced, then its folder, on a thread of
#: its own, so the disk's waits overlap (and Parquet's encoding, outside the GIL, with them)
WRITE_THREADS = 4


def _write_day(
    wh: Warehouse, dataset: str, inputs: dict[str, DatasetDays], others: list[str], day: str
) -> tuple[WriteResult, DayFigures, str | None]:
    """One day: computed (or taken from what this run computed already), its file replaced; who
    computed the figures used (:data:`precomputed.CAPTURE`, :data:`precomputed.ANALYTICS_STEP`, or
    None: this step, from the files). A day this step reads is read for ``others`` too (the run's
    analytics still to run): computed with its own, kept for their steps."""
    taken = precomputed.take(wh, dataset, day)  # computed by this run's capture (or analytics), if it could
    known = None if taken is None else taken[:2]
    if taken is None and others:
        every = {name: DatasetDays(wh, name, [], columns) for name, columns in daily.INPUTS.items()}
        first = daily.read_day(wh, day, functools.partial(daily.read_inputs, every, day))
        figures = daily.compute_days([dataset, *others], day, first.tables)
        precomputed.share(wh, day, first.stamps, {name: figures[name] for name in others})
        known = (first.stamps, figures[dataset])
    read = functools.partial(daily.read_inputs, inputs, day)
    result, figures_used = daily.write_current_day(wh, dataset, day, read, known=known)
    return result, figures_used, taken[2] if taken is not None and figures_used is taken[1] else None


def _materialize(
    context: dg.AssetExecutionContext, warehouse: HermesWarehouse, dataset: str, inputs: dict[str, DatasetDays]
) -> dg.MaterializeResult:
    """Each day of the run: compute, replace the day's file, attach the day's totals (days on
    :data:`WRITE_THREADS` threads, their metadata in day order)."""
    wh = warehouse.open()
    refuse_host_conflicts(lambda: warehouse.check_host(wh))  # a host refused writes nothing, not even here
    days = context.partition_keys
    others = precomputed.still_to_run(context, dataset)
    files_changed = rows = 0
    origins: Counter[str | None] = Counter()
    with (
        run_progress.progress(context, dataset, len(days)) as progress,
        ThreadPoolExecutor(max(1, min(WRITE_THREADS, len(days)))) as threads,
    ):
        write = functools.partial(_write_day, wh, dataset, inputs, others)
        # each day in a copy of this thread's context: its events reach the run's log (run_log.py)
        written = [threads.submit(contextvars.copy_context().run, write, day) for day in days]
        try:
            for day, future in zip(days, written):
                result, figures, origin = future.result()
                origins[origin] += 1
                context.add_asset_metadata(day_metadata(result, figures), partition_key=day)
                files_changed += result.changed
                rows += result.rows
                progress.advance(result.rows)
        except BaseException:  # a day failed (a full disk): the days not started yet are not started
            for future in written:
                future.cancel()
            raise
    log.info(
        "hermes.analytics.written",
        dataset=dataset,
        days=len(days),
        rows=rows,
        files_changed=files_changed,
        # computed by the capture from the tables it built, not read back
        days_from_capture=origins[precomputed.CAPTURE],
        # read and computed by another analytics step of the run, with its own
        days_from_analytics=origins[precomputed.ANALYTICS_STEP],
    )
    return dg.MaterializeResult()


_HERMES = "Beside our own figures, the columns named `hermes_*` give Hermes's own report's (`hermes insights`)"
DESCRIPTIONS = {
    daily.USAGE: (
        "What each day of Hermes used, per model: sessions, messages, tool calls, API calls, "
        "input/output/cache read/cache write/reasoning tokens, total tokens (Hermes's own: input + cache + output), "
        "estimated and actual cost in USD. Tokens, API calls and costs come from each session's `usage_by_model` "
        "(a session that used several models counts under each), and what its own counters hold beyond it under its "
        "own model; messages (`session_meta` rows excepted) and tool calls count under the session's `model`, each "
        "logical message once (copies Hermes makes of a message, `copy_of`, left out). "
        f"{_HERMES}: sessions per model, tool calls per model, cost. The day is the day the sessions started; rows "
        "flagged `source_deleted` are left out."
    ),
    daily.TOOLS: (
        "Which tools Hermes used each day, per `tool_name`: calls (`tool_call` parts), results "
        "(`tool_result` parts), error results and sessions, from `ai_gateway_messages_hermes` (rows flagged "
        "`source_deleted` and copies, `copy_of`, left out). An error result is one whose `is_error` is true or, as "
        "Hermes leaves `is_error` NULL, one Hermes itself shows as failed (hermes-agent's `_detect_tool_failure`): a "
        "terminal result with a non-zero `exit_code`; a JSON result with a truthy `error` (or `message`) and "
        '`"success": false` or an `error` key; a memory result over its limit; else text whose first 500 '
        'characters hold `"error"` or `"failed"` or that starts with `Error` (file writes that landed never '
        f"count). {_HERMES}: its count of each tool's calls (`hermes_calls`)."
    ),
    daily.CHANNELS: (
        "What each channel Hermes was used through did each day (`source`: cli, tui, cron, subagent, telegram, "
        "...; Hermes's platforms): sessions, messages, tool calls, API calls, tokens, costs, and the time from "
        "start to end of the sessions that ended. Tokens and costs count every model the sessions used, as "
        f"`hermes_daily_usage` (the channels add up to it). {_HERMES}: messages, tool calls, tokens, cost."
    ),
    daily.SKILLS: (
        "Which skills Hermes loaded (`skill_view`) and edited (`skill_manage`) each day, per skill: loads, edits, "
        "actions, the sessions that used it, its last use; counted as Hermes's own report counts them, over every "
        "stored assistant message (copies, rewound and compacted rows included)."
    ),
    daily.ACTIVITY: (
        "When Hermes was used: per day and hour (UTC) in which a session started, the day's weekday, the "
        "sessions and their tokens. Any range adds up by weekday and hour (`GROUP BY weekday, hour`)."
    ),
    daily.TOP_SESSIONS: (
        "The sessions of each day that used the most: per ranking (`tokens`, `cost`, and Hermes's notable "
        "sessions: `duration`, `hermes_messages`, `hermes_tokens`, `hermes_tool_calls`) the day's top 10, with "
        "title (redacted like every text cell), channel, model and figures. A range's top 10 are among its days'."
    ),
}


#: what each input of an analytics asset is loaded as: its days, read one at a time (the IO manager
#: goes by the input's type, and the asset's inputs are keyword arguments without annotations)
DAYS_TYPE = dg.PythonObjectDagsterType(DatasetDays, name="DatasetDays")


def analytics_asset(dataset: str, days: Days) -> dg.AssetsDefinition:
    """One analytics dataset as an asset on the partitions ``days``: downstream of the captured
    datasets it reads (the columns it reads of each), computed a day at a time."""
    inputs = daily.DATASET_INPUTS[dataset]

    @dg.asset(
        name=dataset,
        description=DESCRIPTIONS[dataset],
        ins={
            name: dg.AssetIn(name, metadata={"columns": cols}, dagster_type=DAYS_TYPE) for name, cols in inputs.items()
        },
        group_name=GROUP,
        partitions_def=days.partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        automation_condition=AUTOMATION,
        io_manager_key=DATASETS_IO_MANAGER,
        kinds={"parquet", "python"},
        owners=["team:hermes-assets"],
        metadata={"dagster/column_schema": column_schema(dataset)},
    )
    def _asset(
        context: dg.AssetExecutionContext, warehouse: HermesWarehouse, **datasets: DatasetDays
    ) -> dg.MaterializeResult:
        return _materialize(context, warehouse, dataset, {d.dataset: d for d in datasets.values()})

    return _asset


def analytics_assets(days: Days) -> list[dg.AssetsDefinition]:
    """Every analytics dataset (``hermes_daily_usage``, ``hermes_daily_tools``, the channels, skills,
    activity and top sessions) as an asset on the partitions ``days``."""
    return [analytics_asset(dataset, days) for dataset in daily.ANALYTICS]
