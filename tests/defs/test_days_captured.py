"""``days_captured`` run by hand reads the sensor's runs: a day is failing when its latest
runs failed ``FAILING_AFTER`` times in a row with no success since (the sensor reports the
same from its cursor as it ticks)."""

from __future__ import annotations

import itertools

import dagster as dg

from hermes_assets.defs import checks
from hermes_assets.defs.tags import PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG, TRIGGER_TAG, WILL_RETRY_TAG
from hermes_assets.lib.changes.attempts import FAILING_AFTER

S = dg.DagsterRunStatus
_ids = itertools.count()


def run(status: dg.DagsterRunStatus, day: str | None = None, span: tuple[str, str] | None = None, **tags):
    names = {PARTITION_TAG: day} if day else {RANGE_START_TAG: span[0], RANGE_END_TAG: span[1]} if span else {}
    return dg.DagsterRun(job_name="__ASSET_JOB", run_id=f"run-{next(_ids)}", status=status, tags={**names, **tags})


def test_a_day_fails_after_failures_in_a_row_and_a_success_ends_the_streak():
    newest_first = [
        run(S.FAILURE, "2026-06-02"),
        run(S.FAILURE, "2026-06-01"),
        run(S.CANCELED, "2026-06-01"),
        run(S.FAILURE, "2026-06-02"),
        run(S.FAILURE, "2026-06-01"),
        run(S.SUCCESS, "2026-06-02"),  # 2026-06-02 failed twice since: not yet failing
        run(S.FAILURE, "2026-06-02"),
        run(S.STARTED, "2026-06-03"),
    ]
    days = checks.days_from_runs(newest_first)
    assert days["2026-06-01"].failures == 3 == FAILING_AFTER and not days["2026-06-01"].done
    assert days["2026-06-01"].last_outcome == f"run {newest_first[1].run_id} failure"
    assert (days["2026-06-02"].failures, days["2026-06-02"].done) == (2, True)
    assert days["2026-06-03"].in_flight and days["2026-06-03"].failures == 0


def test_a_run_dagster_retries_is_not_an_outcome_and_a_ranged_run_counts_for_each_day():
    days = checks.days_from_runs(
        [
            run(S.FAILURE, span=("2026-06-01", "2026-06-03")),
            run(S.FAILURE, "2026-06-02", **{WILL_RETRY_TAG: "true"}),
            run(S.SUCCESS, "2026-06-03"),
        ]
    )
    assert {d: r.failures for d, r in days.items()} == {"2026-06-01": 1, "2026-06-02": 1, "2026-06-03": 1}
    assert checks.run_days({RANGE_START_TAG: "2026-02-27", RANGE_END_TAG: "2026-03-01"}) == [
        "2026-02-27",
        "2026-02-28",
        "2026-03-01",
    ]
    assert checks.run_days({}) == []


def test_the_check_by_hand_names_the_failing_days_from_the_instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        for _ in range(FAILING_AFTER):
            instance.add_run(run(S.FAILURE, "2026-06-05", **TRIGGER_TAG))
        instance.add_run(run(S.FAILURE, "2026-06-06", **TRIGGER_TAG))
        instance.add_run(run(S.FAILURE, "2026-06-07"))  # not the sensor's: a run launched by hand
        result = checks.days_captured(dg.build_asset_check_context(instance=instance))
    assert not result.passed
    assert result.metadata["days_failing"].value == ["2026-06-05"]
    assert result.metadata["failed_runs_in_a_row"].value == {"2026-06-05": FAILING_AFTER}
