"""``days_captured`` (a check of ``hermes_state``) reads the sensor's runs, as every capture run
and its execution by hand report it: a day is failing when its latest runs failed
``FAILING_AFTER`` times in a row with no success since (the sensor reports the same from its
cursor as it ticks). Executed by hand, ``hermes_state``'s checks read the stores afresh."""

from __future__ import annotations

import itertools

import dagster as dg
import pytest

from hermes_assets.defs import store_checks as checks
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


def test_the_check_names_the_failing_days_from_the_instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        for _ in range(FAILING_AFTER):
            instance.add_run(run(S.FAILURE, "2026-06-05", **TRIGGER_TAG))
        instance.add_run(run(S.FAILURE, "2026-06-06", **TRIGGER_TAG))
        instance.add_run(run(S.FAILURE, "2026-06-07"))  # not the sensor's: a run launched by hand
        result = checks.days_captured_from_runs(instance)
    assert not result.passed and result.asset_key == checks.STATE_KEY
    assert result.metadata["days_failing"].value == ["2026-06-05"]
    assert result.metadata["failed_runs_in_a_row"].value == {"2026-06-05": FAILING_AFTER}


@pytest.mark.slow  # a Dagster run
def test_executed_by_hand_the_checks_of_hermes_state_read_the_stores_and_the_runs(small):
    """The UI's *Execute* on hermes_state's checks: one run of the checks alone, no partition, each
    evaluated once (a store that cannot be read named in ``stores_readable``)."""
    small.store.write_bytes(b"not a database, " * 100)
    defs = small.defs()
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_check_selection={dg.AssetCheckKey(checks.STATE_KEY, spec.name) for spec in checks.SPECS},
        asset_selection=set(),
    )
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance)
        found = {e.check_name: e for e in result.get_asset_check_evaluations()}
        assert set(found) == {spec.name for spec in checks.SPECS}
        assert not found[checks.STORES_READABLE].passed
        assert found[checks.STORES_READABLE].metadata["stores_failed"].value[0]["path"] == str(small.store)
        assert found[checks.DAYS_CAPTURED].passed and found[checks.RANGE_CHECK].passed
        planned = [
            r
            for spec in checks.SPECS
            for r in instance.event_log_storage.get_asset_check_execution_history(
                dg.AssetCheckKey(checks.STATE_KEY, spec.name), limit=10
            )
            if r.status.value == "PLANNED"
        ]
        assert planned == []
