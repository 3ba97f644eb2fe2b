"""``hermes_state``, the Hermes stores the capture reads, and the checks about them and its runs.

The stores are an asset of their own in the UI, upstream of the capture: an
external asset (Hermes writes them; this project never does), not partitioned.
Its three checks are about the stores and the runs, not about a day:

* ``stores_readable``: every store could be read (busy, corrupt, not a Hermes
  store, named in ``HERMES_STATE_DB`` but missing: named here, SPEC §8, D18);
* ``sessions_within_partition_range`` (a warning): every session lies on a
  partition (a session before the first partition, in the future, or with no
  sane time is not written: named here, SPEC §2);
* ``days_captured``: every day the sensor requested is captured (a day whose
  runs failed :data:`~hermes_assets.lib.changes.attempts.FAILING_AFTER` times in
  a row is named here until a run of it succeeds).

Every capture run reports the three from its ``plan`` step, once per run
whatever its days (the plan knows them already; ``days_captured`` reads the
sensor's runs); the sensor also reports ``days_captured`` whenever its set of
failing days changes (and on its first tick). They are not part of a run's plan: Dagster plans every
check of a ranged run on each of its days, and a check about the run would
leave all but one of them planned for ever. Executed by hand (the UI's
*Execute*), each reads the stores, or the sensor's runs, afresh.
"""

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import dagster as dg

from hermes_assets.defs.partitions import Days
from hermes_assets.defs.resources import HermesStores, UsagePolicy
from hermes_assets.defs.tags import PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG, TRIGGER_TAG, WILL_RETRY_TAG
from hermes_assets.lib.basics import errors
from hermes_assets.lib.changes import attempts
from hermes_assets.lib.plan import capture_plan
from hermes_assets.lib.plan.capture_plan import CapturePlan

HERMES_STATE = "hermes_state"
STATE_KEY = dg.AssetKey(HERMES_STATE)
STORES_READABLE = "stores_readable"
RANGE_CHECK = "sessions_within_partition_range"
DAYS_CAPTURED = "days_captured"
DAYS_CAPTURED_CHECK = dg.AssetCheckKey(STATE_KEY, DAYS_CAPTURED)
SENSOR_NAME = "hermes_state_sensor"
#: the sensor's runs ``days_captured`` reads, newest first: days fail in a row recently
RUNS_READ = 500
#: the sessions out of range a check's metadata names (the count is always whole)
SAMPLE = 20

STATE = dg.AssetSpec(
    HERMES_STATE,
    group_name="hermes",
    kinds={"sqlite"},
    owners=["team:hermes-assets"],
    description="Hermes Agent's own SQLite stores (~/.hermes/state.db, its profiles', or those HERMES_STATE_DB "
    "names), which the capture reads read-only: written by Hermes, never by this project. Its checks say "
    "whether the last capture could read every store and place every session on a partition, and whether "
    "every day the sensor requested is captured.",
)

SPECS = [
    dg.AssetCheckSpec(
        STORES_READABLE,
        asset=HERMES_STATE,
        description="Every Hermes store of the run could be read; a store that cannot (busy, corrupt, not "
        "a Hermes store, missing when named) is named here (SPEC §8, D18). Reported by every capture run.",
    ),
    dg.AssetCheckSpec(
        RANGE_CHECK,
        asset=HERMES_STATE,
        description="Sessions whose day lies outside the partitions (or that have no sane time) are not "
        "written: reported here, never silently dropped (SPEC §2). Reported by every capture run.",
    ),
    dg.AssetCheckSpec(
        DAYS_CAPTURED,
        asset=HERMES_STATE,
        description="Every day the sensor requested is captured: a day whose capture runs failed "
        f"{attempts.FAILING_AFTER} or more times in a row (a full disk, a read-only warehouse ...) is named "
        "here until a run of it succeeds. Reported by every capture run and by the sensor whenever that set "
        f"of days changes, from the sensor's latest {RUNS_READ} runs.",
    ),
]


# --------------------------------------------------------------------------
# the stores: from a capture's plan
# --------------------------------------------------------------------------


def failed_stores(failures: list[errors.StoreFailure]) -> list[dict]:
    """The metadata of stores that could not be read: path and ``error_kind`` of each."""
    return [{"path": f.path, "error_kind": f.error_kind} for f in failures]


def store_evaluations(plan: CapturePlan) -> list[dg.AssetCheckEvaluation]:
    """``stores_readable`` and ``sessions_within_partition_range`` from a plan."""
    failures = plan.failures()
    return [
        dg.AssetCheckEvaluation(
            asset_key=STATE_KEY,
            check_name=STORES_READABLE,
            passed=not failures,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"stores": len(plan.stores), "stores_failed": failed_stores(failures)},
            description="; ".join(f"{f.path}: {f.error_kind}" for f in failures) or None,
        ),
        dg.AssetCheckEvaluation(
            asset_key=STATE_KEY,
            check_name=RANGE_CHECK,
            passed=not plan.out_of_range,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "sessions_out_of_range": len(plan.out_of_range),
                "sample": [
                    {"store": label, "session_id": sid, "day": day} for label, sid, day in plan.out_of_range[:SAMPLE]
                ],
            },
        ),
    ]


# --------------------------------------------------------------------------
# days_captured: from the sensor's runs
# --------------------------------------------------------------------------


def days_captured_evaluation(failing: list[str], open_attempts: dict) -> dg.AssetCheckEvaluation:
    """The check's result for the sensor to report: failed while some day's runs keep failing."""
    return _days_captured(
        failing,
        {d: open_attempts[d].failures for d in failing},
        {d: open_attempts[d].error or "" for d in failing},
        len(open_attempts),
    )


def _days_captured(failing: list[str], failures: dict, last: dict, in_flight: int) -> dg.AssetCheckEvaluation:
    return dg.AssetCheckEvaluation(
        asset_key=STATE_KEY,
        check_name=DAYS_CAPTURED,
        passed=not failing,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "days_failing": failing,
            "failed_runs_in_a_row": failures,
            "last_outcome": last,
            "days_in_flight": in_flight,
        },
        description=(
            f"the capture of {', '.join(failing)} failed {attempts.FAILING_AFTER} or more times in a "
            "row; the sensor requests it again with backoff"
        )
        if failing
        else None,
    )


@dataclass
class DayRuns:
    """What the sensor's runs of one day show, newest first, up to the day's latest success."""

    failures: int = 0
    last_outcome: str = ""
    in_flight: bool = False
    done: bool = False


#: the step whose success means a run's days are captured (the analytics steps come after it)
WRITE_STEP = "hermes_capture.write_partitions"


def capture_written(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether a run that did not succeed wrote its capture all the same: its analytics failed,
    after the capture's write step succeeded (in it, or in the run it retries)."""
    group = instance.get_run_group(run.run_id)
    runs = list(group[1]) if group else [run]
    return any(
        stats.status is not None and stats.status.value == "SUCCESS"
        for r in runs
        for stats in instance.get_run_step_stats(r.run_id, step_keys=[WRITE_STEP])
    )


def days_from_runs(
    runs: Iterable[dg.DagsterRun], written: Callable[[dg.DagsterRun], bool] = lambda run: False
) -> dict[str, DayRuns]:
    """Each day's runs read newest first (``runs`` is): its failed or canceled runs since its
    latest success, and whether one is still queued or running. A failed run that Dagster's
    own retries run again is not an outcome: its retry is. A failed run whose capture was
    ``written`` (its analytics failed) captured its days."""
    out: dict[str, DayRuns] = {}
    for run in runs:
        for day in run_days(run.tags):
            seen = out.setdefault(day, DayRuns())
            if seen.done:
                continue
            if run.status == dg.DagsterRunStatus.SUCCESS or (
                run.status == dg.DagsterRunStatus.FAILURE and run.tags.get(WILL_RETRY_TAG) != "true" and written(run)
            ):
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


def days_captured_from_runs(instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
    """``days_captured`` as the sensor's latest :data:`RUNS_READ` runs show it."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags=TRIGGER_TAG), limit=RUNS_READ)  # newest first
    days = days_from_runs(runs, lambda run: capture_written(instance, run))
    failing = sorted(d for d, r in days.items() if not r.done and r.failures >= attempts.FAILING_AFTER)
    return _days_captured(
        failing,
        {d: days[d].failures for d in failing},
        {d: days[d].last_outcome for d in failing},
        sum(r.in_flight for r in days.values()),
    )


def run_evaluations(plan: CapturePlan, instance: dg.DagsterInstance) -> list[dg.AssetCheckEvaluation]:
    """What every capture run reports of ``hermes_state``: its three checks."""
    return [*store_evaluations(plan), days_captured_from_runs(instance)]


# --------------------------------------------------------------------------
# the checks, executed by hand
# --------------------------------------------------------------------------


def state_checks(days: Days) -> dg.AssetChecksDefinition:
    """The three checks of ``hermes_state`` on the partitions ``days``, as the UI executes them by hand."""

    @dg.multi_asset_check(
        specs=SPECS,
        name="hermes_state_checks",
        can_subset=True,
        description="The stores read afresh (one statement over each store's sessions table) and the sensor's runs.",
    )
    def hermes_state_checks(
        context: dg.AssetCheckExecutionContext, hermes: HermesStores, usage_policy: UsagePolicy
    ) -> Iterable[dg.AssetCheckResult]:
        selected = {key.name for key in context.selected_asset_check_keys}
        found: list[dg.AssetCheckEvaluation] = []
        if selected & {STORES_READABLE, RANGE_CHECK}:
            plan = capture_plan.plan_capture(
                hermes.stores(),
                [],
                user_home=usage_policy.user_home,
                first_day=days.partitions.get_first_partition_key(),
                last_day=days.partitions.get_last_partition_key(),
                readers=hermes.readers(),
            )
            found.extend(store_evaluations(plan))
        if DAYS_CAPTURED in selected:
            found.append(days_captured_from_runs(context.instance))
        for e in found:
            if e.check_name in selected:
                yield dg.AssetCheckResult(
                    asset_key=e.asset_key,
                    check_name=e.check_name,
                    passed=e.passed,
                    severity=e.severity,
                    metadata=e.metadata,
                    description=e.description,
                )

    return hermes_state_checks
