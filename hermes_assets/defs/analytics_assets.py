"""The analytics layer (SPEC §11): ``hermes_daily_usage``, ``hermes_daily_tools``, and what Hermes's own
report answers besides (``hermes_daily_channels``, ``hermes_daily_skills``, ``hermes_activity``,
``hermes_top_sessions``): one asset each, all computed by one step, ``hermes_analytics`` (a
multi-asset that runs any subset of them: the UI, the sensors and a backfill request any), which
reads each day once for every dataset selected (or takes what the run's capture computed of it:
:mod:`hermes_assets.defs.precomputed`) and writes their files.

Built on the captured datasets through the ``hermes_datasets`` IO manager
(inputs read one day at a time, only the columns the selected datasets need), on the same
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
import dataclasses
import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import dagster as dg

from hermes_assets.defs import precomputed, ranged_metadata, run_progress
from hermes_assets.defs.capture_assets import refuse_host_conflicts
from hermes_assets.defs.io_manager import DATASETS_IO_MANAGER
from hermes_assets.defs.partitions import Days
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.defs.tags import TRIGGER_TAG
from hermes_assets.lib.analytics import columns, daily
from hermes_assets.lib.analytics.captured_days import KnownDay
from hermes_assets.lib.analytics.daily import DayFigures
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.storage import local_files
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


#: the days the analytics step computes, and writes, at once: each file is fsynced on a thread of its
#: own, so the disk's waits overlap (and Parquet's encoding, outside the GIL, with them); a day's
#: folders are synced together once its files are in place, on its thread, so their waits overlap
#: the other days' writes instead of adding up before the first dataset is reported
#: (:class:`~hermes_assets.lib.storage.local_files.FolderSyncs`)
WRITE_THREADS = 4


def _prepare_day(wh: Warehouse, datasets: list[str], inputs: dict[str, DatasetDays], day: str) -> tuple[KnownDay, bool]:
    """The figures of ``datasets``' ``day``, computed once for them all: those this run's capture
    kept, while the stamps of the day's files still hold, else from the day's files read once; and
    whether they came from the capture."""
    known = precomputed.take(wh, day)  # computed by this run's capture, if it could
    if known is not None and precomputed.holds(wh, day, known, datasets):
        return known, True
    first = daily.read_day(wh, day, functools.partial(daily.read_inputs, inputs, day))
    return KnownDay(first.stamps, daily.compute_days(datasets, day, first.tables)), False


#: one day of the step: what each dataset's write gave (its result and figures, or its error), and
#: whether the figures came from the capture
DayWrites = tuple[dict[str, tuple[WriteResult, DayFigures] | Exception], bool]


def _write_day(
    wh: Warehouse, datasets: list[str], inputs: dict[str, DatasetDays], day: str, failed: Callable[[str], bool]
) -> DayWrites:
    """``day`` of every one of ``datasets`` (those that ``failed`` on an earlier day left out):
    computed once (:func:`_prepare_day`), each file replaced, and the inputs' stamps checked once
    after them all (:func:`~hermes_assets.lib.analytics.daily.write_current_datasets`, which
    computes a dataset again from the files if they moved since its figures were computed)."""
    wanted = [dataset for dataset in datasets if not failed(dataset)]
    if not wanted:
        return {}, False
    known, from_capture = _prepare_day(wh, wanted, inputs, day)
    read = functools.partial(daily.read_inputs, inputs, day)
    return daily.write_current_datasets(wh, wanted, day, read, known.stamps, known.figures), from_capture


def _materialize(
    context: dg.AssetExecutionContext, warehouse: HermesWarehouse, inputs: dict[str, DatasetDays]
) -> Iterator[dg.MaterializeResult]:
    """Every day of the run computed once for the selected datasets and written (on
    :data:`WRITE_THREADS` threads, a day at a time: its datasets' files, then one check of its
    inputs for them all), then each dataset reported with its days' totals, once every day of it
    is written. A dataset that fails on a day is not started on the days after it, and fails the
    step once the others are materialized."""
    wh = warehouse.open()
    refuse_host_conflicts(lambda: warehouse.check_host(wh))  # a host refused writes nothing, not even here
    datasets = [dataset for dataset in daily.ANALYTICS if dg.AssetKey(dataset) in context.selected_asset_keys]
    read = {name: dataclasses.replace(inputs[name], columns=cols) for name, cols in daily.inputs_for(datasets).items()}
    days = context.partition_keys
    failed: dict[str, tuple[str, Exception]] = {}  # dataset -> its first failed day, and why
    failing: dict[str, str] = {}  # dataset -> the first day it failed on (a writing thread's): not started after it
    failing_lock = threading.Lock()
    files_changed: Counter[str] = Counter()
    rows: Counter[str] = Counter()

    def failed_before(day: str) -> Callable[[str], bool]:
        def check(dataset: str) -> bool:
            with failing_lock:
                return dataset in failing and failing[dataset] < day

        return check

    def write(day: str) -> DayWrites:
        left_out = failed_before(day)
        folder_syncs = local_files.FolderSyncs()  # the day's folders, synced before it is returned
        try:
            try:
                out = local_files.deferring_to(folder_syncs, _write_day, wh, datasets, read, day, left_out)
            finally:
                folder_syncs.flush(threads=1)  # whatever happens: the files in place are made durable
        # the day's inputs could not be read, or its folders synced: each of its datasets failed on it
        except Exception as exc:
            out = ({dataset: exc for dataset in datasets if not left_out(dataset)}, False)
        with failing_lock:
            for dataset, got in out[0].items():
                if isinstance(got, Exception) and (dataset not in failing or day < failing[dataset]):
                    failing[dataset] = day
        return out

    with ThreadPoolExecutor(max(1, min(WRITE_THREADS, len(days)))) as threads:
        # each task in a copy of this thread's context: its events reach the run's log (run_log.py)
        writes = [threads.submit(contextvars.copy_context().run, write, day) for day in days]
        try:
            for dataset in datasets:
                metadata = []
                with run_progress.progress(context, dataset, len(days)) as progress:
                    for day, future in zip(days, writes):
                        try:
                            got = future.result()[0].get(dataset)
                            if got is None:  # not started: it failed on an earlier day
                                raise RuntimeError(f"{dataset} failed on an earlier day than {day}")
                            if isinstance(got, Exception):
                                raise got
                        # a full disk, a folder that cannot be made: the dataset's days after it are not started
                        except Exception as exc:
                            failed[dataset] = (day, exc)
                            break
                        result, figures = got
                        metadata.append((day, day_metadata(result, figures)))
                        files_changed[dataset] += result.changed
                        rows[dataset] += result.rows
                        progress.advance(result.rows)
                if dataset not in failed:  # its days' files durable: each day synced its folders
                    ranged_metadata.add_days_metadata(context, dataset, metadata)
                    yield dg.MaterializeResult(asset_key=dataset)
        except BaseException:  # the run was canceled: the days not started yet are not started
            for future in writes:
                future.cancel()
            raise
    log.info(
        "hermes.analytics.written",
        datasets=[dataset for dataset in datasets if dataset not in failed],
        days=len(days),
        rows=dict(rows),
        files_changed=dict(files_changed),
        # computed by the capture from the tables it built, not read back
        days_from_capture=sum(f.result()[1] for f in writes if _succeeded(f)),
    )
    if failed:
        dataset, (day, error) = next(iter(failed.items()))
        raise dg.Failure(
            description=f"{dataset} {day}: {error}",
            metadata={"datasets_failed": {name: first_day for name, (first_day, _) in failed.items()}},
        ) from error


def _succeeded(future: Future) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


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


#: what each input of the analytics step is loaded as: its days, read one at a time (the IO manager
#: goes by the input's type, and the step's inputs are keyword arguments without annotations)
DAYS_TYPE = dg.PythonObjectDagsterType(DatasetDays, name="DatasetDays")

#: the analytics' one step (their op): every selected analytics dataset of the run's days at once
STEP = "hermes_analytics"


def analytics_spec(dataset: str) -> dg.AssetSpec:
    """One analytics dataset as the UI shows it (its inputs, the captured datasets it reads, are
    the step's: :func:`analytics_assets`)."""
    return dg.AssetSpec(
        dataset,
        description=DESCRIPTIONS[dataset],
        group_name=GROUP,
        automation_condition=AUTOMATION,
        kinds={"parquet", "python"},
        owners=["team:hermes-assets"],
        metadata={"dagster/column_schema": column_schema(dataset)},
    )


def analytics_assets(days: Days) -> dg.AssetsDefinition:
    """Every analytics dataset (``hermes_daily_usage``, ``hermes_daily_tools``, the channels, skills,
    activity and top sessions) on the partitions ``days``: six assets, each downstream of the captured
    datasets it reads, and one step (:data:`STEP`), which computes each day once for the datasets
    selected (any subset of them: ``can_subset``) and writes their files. Each is read through the
    ``hermes_datasets`` IO manager, as the captured datasets are."""

    @dg.multi_asset(
        name=STEP,
        outs={
            dataset: dg.AssetOut.from_spec(
                analytics_spec(dataset), is_required=False, io_manager_key=DATASETS_IO_MANAGER
            )
            for dataset in daily.ANALYTICS
        },
        ins={
            name: dg.AssetIn(name, metadata={"columns": cols}, dagster_type=DAYS_TYPE)
            for name, cols in daily.INPUTS.items()
        },
        internal_asset_deps={
            dataset: {dg.AssetKey(name) for name in daily.DATASET_INPUTS[dataset]} for dataset in daily.ANALYTICS
        },
        can_subset=True,
        partitions_def=days.partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def _step(
        context: dg.AssetExecutionContext, warehouse: HermesWarehouse, **datasets: DatasetDays
    ) -> Iterator[dg.MaterializeResult]:
        yield from _materialize(context, warehouse, {d.dataset: d for d in datasets.values()})

    return _step
