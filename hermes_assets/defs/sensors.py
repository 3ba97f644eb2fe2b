"""The sensors: the watermark sensor, which requests the days whose Hermes data changed
(SPEC §8, spec R6), and the automation sensor that keeps the analytics current.

Change detection lives in :mod:`hermes_assets.lib.changes.watch`; this module turns
its plan into one ``RunRequest`` per changed day for the three assets. A store
that cannot be read is named in the tick's logs (and in the skip reason when
nothing is requested) while the other stores' days are requested (SPEC D18). When a
tick finds more changed days than ``HERMES_ASSETS_SENSOR_MAX_RUNS`` (default 14:
a first start on a long history, a restored store), it requests one ranged run
over them instead, the way a single-run backfill does: a year of history then
costs one run of seconds, not hundreds of runs.

Every run the sensor requests computes its days' analytics too (the ``hermes_analytics`` group:
``hermes_daily_usage``, ``hermes_daily_tools`` and the rest of Hermes's own report), in the same run, right after the capture: the analytics of a captured day
are current when its run ends, within one poll of the change. (The ``hermes_automation`` sensor
leaves a day captured by such a run alone; it keeps the analytics current after any other capture,
a backfill launched from the UI for one, and runs again a day whose analytics failed.)

Every partition day, from the first to today, is captured once the sensor has seen it, whether
a session lies on it or not: a day no store holds a session on, never requested before, is
requested once as a day without sessions (tagged ``hermes/sessions: none``; its run writes no file,
shows 0 rows and passes its checks), so that the partitions read as captured, gaps included.

The changed days older than the first partition (history restored or added while Dagster
runs; :meth:`~hermes_assets.defs.partitions.Days.before_first`) are requested at once, all of
a tick's in one run of their own (ranged from the oldest to the newest when there are several:
a run per day would wait its turn in the queue behind every other), which names its
partitions itself: the run loads the definitions afresh and has the days as partitions, while
the definitions loaded here, and the automation sensor's, lack them until their next load.

A day is done when its capture succeeds: each tick looks up, by run key,
how the runs it requested ended (:func:`run_outcomes`; a run whose capture was written but whose
analytics failed has captured its days) and requests a day whose run failed or was canceled
again, with backoff (:mod:`hermes_assets.lib.changes.attempts`).
A day that keeps failing is named in every tick's log and by the
``days_captured`` check of ``hermes_state``, which the sensor reports whenever the set of
failing days changes (and on its first tick).

The cursor Dagster keeps (and the UI prints above the ticks) is a one-line summary; the
sensor's state, which grows with the history, is kept beside it in the instance
(:mod:`hermes_assets.defs.sensor_cursor`).

Both are built when the definitions load, from the settings they loaded with
(``HERMES_ASSETS_POLL_SECONDS``, ``HERMES_ASSETS_SENSOR_MAX_RUNS``): a tick reads
no setting.

A path named in ``HERMES_STATE_DB`` that is gone (a store or folder removed
while Dagster runs) is a mistake in the setting, not a store that failed
alone: the tick fails with the one line naming it (``BadSetting``, a Dagster
error, so the UI shows the tick red with that line, not a wrapper of it),
requests nothing and keeps its cursor. The first tick after the path is back
reads it from that cursor and requests what changed meanwhile.
"""

import dagster as dg

from hermes_assets.defs import run_console, run_log, sensor_cursor
from hermes_assets.defs.checks import CAPTURE_CHECKS
from hermes_assets.defs.partitions import Days
from hermes_assets.defs.resources import HermesStores, HermesWarehouse
from hermes_assets.defs.settings import Settings
from hermes_assets.defs.store_checks import SENSOR_NAME, capture_written, days_captured_evaluation
from hermes_assets.defs.tags import (
    NO_SESSIONS_TAG,
    OLDER_DAY_PRIORITY,
    PARTITION_TAG,
    PRIORITY_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RUN_KEY_TAG,
    TRIGGER_TAG,
    WILL_RETRY_TAG,
)
from hermes_assets.lib.analytics.daily import ANALYTICS
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.changes import attempts, watch

log = get_logger()

#: the sensor's target: the three datasets, which the UI shows by their names (a selection that
#: also subtracts a check has no such form: the UI would show its Python repr)
CAPTURE_KEYS = [dg.AssetKey(name) for name in (SESSIONS, MESSAGES, GATEWAY)]
#: the analytics of a run's days, computed in the same run, right after the capture: current when
#: the run ends (and the automation sensor sees the partitions of the loaded definitions only, which
#: lack the days older than the first partition)
ANALYTICS_KEYS = [dg.AssetKey(k) for k in ANALYTICS]
#: the sensor's target as the UI shows it (the keys by name: a selection that subtracts a check
#: has no such form, the UI would show its Python repr)
SENSOR_TARGET = dg.AssetSelection.assets(*CAPTURE_KEYS, *ANALYTICS_KEYS)

_OUTCOMES = {
    dg.DagsterRunStatus.SUCCESS: attempts.SUCCEEDED,
    dg.DagsterRunStatus.FAILURE: attempts.FAILED,
    dg.DagsterRunStatus.CANCELED: attempts.CANCELED,
    dg.DagsterRunStatus.QUEUED: attempts.WAITING,  # not started: it will read the store as it is then
    dg.DagsterRunStatus.NOT_STARTED: attempts.WAITING,
    dg.DagsterRunStatus.STARTING: attempts.WAITING,
}


def state_sensor(poll_seconds: int, max_runs: int, days: Days, verbose: bool = False) -> dg.SensorDefinition:
    """``hermes_state_sensor`` over the partitions ``days``, ticking at most every ``poll_seconds``;
    a tick with more than ``max_runs`` changed days requests one ranged run over them. Its runs
    print one line each on the console, or, ``verbose``, every Dagster event
    (:mod:`hermes_assets.defs.run_console`)."""

    @dg.sensor(
        name=SENSOR_NAME,
        target=SENSOR_TARGET,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=poll_seconds,
        description="Watches the Hermes store(s): a tick whose store files did not change runs no SQL; "
        "otherwise one run per UTC day whose sessions or messages changed (SPEC §8). A day whose run "
        "failed is requested again, with backoff, until a run of it succeeds. A day older than the first "
        "partition (history restored or added while Dagster runs) is captured at once, in one run with the "
        "tick's other such days; it shows as a partition from the next load of the definitions. A partition day "
        "without any session is captured once too (0 rows, no file). Each run computes its days' analytics.",
    )
    def hermes_state_sensor(
        context: dg.SensorEvaluationContext, hermes: HermesStores, warehouse: HermesWarehouse
    ) -> dg.SensorResult | dg.SkipReason:
        return tick(context, hermes, max_runs, days, warehouse, verbose)

    return hermes_state_sensor


def tick(
    context: dg.SensorEvaluationContext,
    hermes: HermesStores,
    max_runs: int,
    days: Days,
    warehouse: HermesWarehouse | None = None,
    verbose: bool = False,
) -> dg.SensorResult | dg.SkipReason:
    """One evaluation of ``hermes_state_sensor``. Its events (this module's and the library's)
    are kept in the tick's log, which the UI shows (:func:`hermes_assets.defs.run_log.tick_log`),
    and printed as every event is (warnings and errors, on a quiet console)."""
    with run_log.tick_log(context):
        return _tick(context, hermes, max_runs, days, warehouse, verbose)


def _tick(
    context: dg.SensorEvaluationContext,
    hermes: HermesStores,
    max_runs: int,
    days: Days,
    warehouse: HermesWarehouse | None,
    verbose: bool,
) -> dg.SensorResult | dg.SkipReason:
    stores = hermes.stores()
    state = sensor_cursor.state_of(context.instance, context.cursor)
    plan = watch.plan_tick(
        stores,
        state,
        is_partition=days.partitions.has_partition_key,
        readers=hermes.readers(),
        outcomes=lambda keys: run_outcomes(context.instance, keys),
        max_runs=max_runs,
        before_first=days.before_first,
        partition_days=days.partitions.get_partition_keys(),
    )
    empty = set(plan.empty)
    requests = [_run_request(run_days, key, days, empty.issuperset(run_days), verbose) for run_days, key in plan.runs]
    _fail_if_a_named_path_is_gone(plan)
    if requests and warehouse is not None:
        _fail_if_the_host_is_refused(hermes, warehouse)
    # runs, not days: more than HERMES_ASSETS_SENSOR_MAX_RUNS days make one ranged run
    counts = {**plan.counts(), "runs_requested": len(requests)}
    failed = [{"store": s.store.label, "path": s.store.path, "error_kind": f.error_kind} for s, f in plan.failed]
    # a store that cannot be read (D18) is named by its own event (hermes.sensor.store_failed, at
    # error), here and in the skip reason; its cursor entry is kept and the next tick reads it again
    log.info("hermes.sensor.tick", ms=round(plan.ms, 2), **counts, **({"failed": failed} if failed else {}))
    if plan.early:
        log.info(
            "hermes.sensor.older_history",
            days=plan.early,
            first_partition=days.first(),
            note="these days precede the first partition and are requested together in one run of their own, "
            "which loads the definitions afresh (the partitions page shows them from the next load)",
        )
    if plan.empty:
        log.info("hermes.sensor.days_without_sessions", days=len(plan.empty), first=plan.empty[0], last=plan.empty[-1])
    if plan.retried:
        log.warning("hermes.sensor.retry", days=plan.retried)
    if plan.failing:  # named on every tick until a run of the day succeeds
        runs = {d: plan.cursor.attempts[d].failures for d in plan.failing}
        log.error("hermes.sensor.days_failing", days=plan.failing, failures=runs)
    events = []
    # reported whenever the failing days change, and on a first tick (the check has a result from the
    # start, and the automation sensor an event log that is not empty: it tells the updates that are
    # new by the last event it saw)
    if plan.failing != plan.failing_before or state is None:
        events.append(days_captured_evaluation(plan.failing, plan.cursor.attempts))
    cursor = sensor_cursor.summarize(context.instance, context.cursor, plan.cursor_json)
    reason = plan.skip_reason if stores else _no_store_reason(hermes)
    if requests or events or cursor != (context.cursor or ""):
        return dg.SensorResult(
            run_requests=requests, cursor=cursor, asset_events=events, skip_reason=None if requests else reason
        )
    return dg.SkipReason(reason)


def run_outcomes(instance: dg.DagsterInstance, run_keys: list[str]) -> dict[str, str]:
    """How the newest run of each run key ended (Dagster's retries of a run keep its key);
    keys the instance does not know are left out."""
    out: dict[str, str] = {}
    for run in instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: list(run_keys)})):  # newest first
        key = run.tags.get(RUN_KEY_TAG)
        if key is None or key in out:
            continue
        outcome = _OUTCOMES.get(run.status, attempts.RUNNING)
        if outcome == attempts.FAILED and run.tags.get(WILL_RETRY_TAG) == "true":
            outcome = attempts.RUNNING  # Dagster's run retries will run it again
        elif outcome == attempts.FAILED and capture_written(instance, run):
            outcome = attempts.SUCCEEDED  # its analytics failed: the automation sensor runs them again
        out[key] = outcome
    return out


def run_requests(requests: list[tuple[str, str]], max_runs: int, days: Days) -> list[dg.RunRequest]:
    """One run per changed day, or one ranged run when there are too many days."""
    return [_run_request(run_days, key, days) for run_days, key in watch.run_groups(requests, max_runs)]


def _run_request(
    run_days: list[str], run_key: str, partitions: Days, no_sessions: bool = False, verbose: bool = False
) -> dg.RunRequest:
    """The run of ``run_days``: the three datasets, their checks and the days' analytics; Dagster's
    console lines of it off (its line is the run's own), or all of them, ``verbose``."""
    days = run_days
    tags = {**TRIGGER_TAG, **(NO_SESSIONS_TAG if no_sessions else {})}
    partition_key = days[0] if len(days) == 1 else None
    if not partitions.partitions.has_partition_key(days[0]):
        # history older than the first partition (Days.before_first), all of a tick's such days in
        # this one run: it names its day, or its range of days, itself, as Dagster would, since
        # these definitions do not know them yet (the run's own load of the definitions does);
        # after the live days' runs in the queue
        span = {PARTITION_TAG: days[0]} if len(days) == 1 else {RANGE_START_TAG: days[0], RANGE_END_TAG: days[-1]}
        tags |= {**span, PRIORITY_TAG: OLDER_DAY_PRIORITY}
    elif len(days) > 1:
        tags |= {RANGE_START_TAG: days[0], RANGE_END_TAG: days[-1]}
    return dg.RunRequest(
        partition_key=partition_key,
        run_key=run_key,
        tags=tags,
        asset_selection=CAPTURE_KEYS + ANALYTICS_KEYS,
        asset_check_keys=CAPTURE_CHECKS,
        run_config=run_console.VERBOSE if verbose else run_console.QUIET,
    )


def _no_store_reason(hermes: HermesStores) -> str:
    """Skip reason when discovery found no store at all (e.g. an empty HERMES_STATE_DB folder)."""
    where = hermes.state_db
    if where:
        return (
            f"no Hermes store found: HERMES_STATE_DB={where} holds no state.db (folders are searched for **/state.db)"
        )
    return "no Hermes store found"


def _fail_if_a_named_path_is_gone(plan: watch.TickPlan) -> None:
    """Fail the tick (red in the UI, the one line as its error) when a path ``HERMES_STATE_DB``
    names is gone: a mistake in the setting, not one store failing alone. The library has logged
    it (``hermes.sensor.store_failed``); the cursor stays as it was."""
    from hermes_assets.defs.console import BadSetting
    from hermes_assets.lib.basics.errors import STORE_MISSING

    gone = [failure for scan, failure in plan.failed if scan.store.explicit and failure.error_kind == STORE_MISSING]
    if gone:
        raise BadSetting(gone[0].message)


def _fail_if_the_host_is_refused(hermes: HermesStores, warehouse: HermesWarehouse) -> None:
    """Fail the tick (red in the UI, the one line as its error), requesting nothing and keeping
    its cursor, when this host's label is another host's in the warehouse, or one of its stores
    is captured there under another label: every run would be refused (reads only)."""
    from hermes_assets.defs.console import BadSetting
    from hermes_assets.lib.basics.errors import HostConflict
    from hermes_assets.lib.storage.object_store import UNREACHABLE

    try:
        warehouse.check_host(warehouse.open(), hermes.identities())
    except HostConflict as exc:
        log.error("hermes.sensor.host_refused", error_kind=exc.error_kind, reason=str(exc))
        raise BadSetting(str(exc)) from None
    except UNREACHABLE:  # the warehouse cannot be reached now: the runs name it
        return


def automation_sensor(poll_seconds: int) -> dg.AutomationConditionSensorDefinition:
    """``hermes_automation``: the daemon evaluates automation conditions through it. It covers every
    asset (the capture assets have no condition, so it never requests them; an asset you add with
    one is kept current too). Dagster's own default sensor would start stopped; this one runs from
    the start, like ``hermes_state_sensor``."""
    return dg.AutomationConditionSensorDefinition(
        "hermes_automation",
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=poll_seconds,
        run_tags={"hermes/trigger": "automation"},
        description="Brings the assets that have an automation condition (the hermes_analytics group) up to "
        "date after each capture, of any day.",
    )


def build(s: Settings, days: Days) -> list[dg.SensorDefinition]:
    """The two sensors of one load of the definitions, with its settings and partitions: a tick
    reads no setting."""
    return [
        state_sensor(s.poll_seconds, s.sensor_max_runs, days, verbose=s.log_level == "debug"),
        automation_sensor(s.poll_seconds),
    ]
