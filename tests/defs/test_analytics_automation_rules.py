"""The analytics never fall behind the datasets.

Evaluated with Dagster's own ``evaluate_automation_conditions`` over a real
instance (on disk) holding real runs of the project's assets; the runs are
launched here, in the order the daemon would launch them:

- a capture that lands while the day's analytics run is in flight (that run
  read the older files and wrote, its last look at its inputs before the
  capture, and has not finished) still leads to a fresh analytics run;
  ``eager()`` counts the day's own update as handled and forgets it. (A capture
  that lands between the run's read and its write is seen by the run itself,
  which computes again: :func:`~hermes_assets.lib.analytics.daily.write_current_day`.)
- a day whose analytics run failed is run again without a new capture;
- a capture by a run that computed the day's analytics too (the sensor's runs do) leads to
  no analytics run: they are current already.
"""

from __future__ import annotations

import datetime as dt
import threading

import dagster as dg
import pyarrow.parquet as pq
import pytest

from hermes_assets.defs.analytics_assets import COMPUTED_IN_RUN, RETRY_CRON
from hermes_assets.defs.store_checks import days_captured_evaluation
from hermes_assets.lib.analytics import daily
from tests.defs.harness import ANALYTICS, DATASETS, RANGE_END, RANGE_START, day_path, new_capture
from tests.support.hermes_writer import HermesWriter

DAY = "2026-06-01"
EVE = "2026-05-31"
USAGE = "hermes_daily_usage"


@pytest.fixture
def world(tmp_path, monkeypatch):
    cap = new_capture(tmp_path / "install")
    for name, value in {**cap.environ(), "HERMES_ASSETS_START_DATE": "2026-05-25"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HERMES_STATE_DB", raising=False)
    writer = HermesWriter(cap.store, home=cap.home)
    sid = writer.session("s1", "cli", model="model-a")
    writer.msg(sid, "user", "hello")
    writer.msg(sid, "assistant", "hi")
    (tmp_path / "dagster").mkdir()
    # two runs overlap in this one process (an analytics run on a thread, a capture on the test's):
    # Dagster's compute-log capture mirrors the process's stdout through a `tail` per run, and the
    # overlapping mirrors can hold a run's end for a minute under load; these runs need no log files
    no_log_files = {"module": "dagster._core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"}
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"), overrides={"compute_logs": no_log_files})
    try:
        yield cap, writer, sid, instance
    finally:
        writer.close()
        instance.dispose()


def _analytics(defs, instance, raise_on_error=True):
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance,
        partition_key=DAY,
        raise_on_error=raise_on_error,
        asset_selection=[dg.AssetKey(a) for a in ANALYTICS],
    )


def _messages(cap) -> int:
    rows = pq.read_table(day_path(cap.warehouse, USAGE, DAY)).to_pylist()
    return sum(r["messages"] for r in rows)


def _requested(result) -> set[str]:
    return {name for name in ANALYTICS if result.get_num_requested(dg.AssetKey(name))}


class _Evaluator:
    """The ``hermes_automation`` sensor's evaluations, tick after tick, with its cursor."""

    def __init__(self, defs, instance):
        self.defs, self.instance, self.cursor = defs, instance, None
        self.now = dt.datetime.now(dt.UTC)

    def tick(self, seconds: float = 0.0):
        """One evaluation, ``seconds`` after the last one, never before the wall clock: the
        runs' events carry real times, and an evaluation must not look older than them."""
        self.now = max(self.now + dt.timedelta(seconds=seconds), dt.datetime.now(dt.UTC))
        result = dg.evaluate_automation_conditions(
            defs=self.defs,
            instance=self.instance,
            cursor=self.cursor,
            evaluation_time=self.now,
            asset_selection=dg.AssetSelection.assets(*ANALYTICS),
        )
        self.cursor = result.cursor
        return result


@pytest.mark.slow
def test_a_capture_landing_while_the_days_analytics_run_is_in_flight_leads_to_a_fresh_run(world, monkeypatch):
    cap, writer, sid, instance = world
    defs = cap.defs()
    ticks = _Evaluator(defs, instance)
    ticks.tick()  # the sensor's first evaluation: nothing captured yet
    assert cap.materialize(DAY, instance=instance).success  # capture C1
    first = ticks.tick()
    assert _requested(first) == set(ANALYTICS)
    assert first.get_requested_partitions(dg.AssetKey(USAGE)) == {DAY}

    # the analytics run A1 starts; its step reads the day's datasets, writes them (hermes_daily_usage
    # among them), finds its inputs unchanged, and is held there, before its step ends
    written, release = threading.Event(), threading.Event()
    compute = daily.write_current_datasets

    def held_after_its_last_look(warehouse, datasets, day, *args, **kwargs):
        out = compute(warehouse, datasets, day, *args, **kwargs)
        if USAGE in datasets:
            written.set()
            assert release.wait(60)
        return out

    monkeypatch.setattr(daily, "write_current_datasets", held_after_its_last_look)
    outcome: dict = {}
    a1 = threading.Thread(target=lambda: outcome.update(result=_analytics(defs, instance)))
    a1.start()
    try:
        assert written.wait(60), "the analytics run did not write its day"
        # Hermes goes on; capture C2 of the same day lands while A1 is in flight
        writer.msg(sid, "user", "one more thing")
        assert cap.materialize(DAY, instance=instance).success
        during = ticks.tick()
        # A1's one step computes every analytics dataset: all of them are still in progress, none
        # materialized; not requested yet
        done = {a for a in ANALYTICS if instance.get_latest_materialization_event(dg.AssetKey(a)) is not None}
        assert done == set() and _requested(during) == set()
    finally:
        release.set()
        a1.join(60)
    assert outcome["result"].success
    assert _messages(cap) == 2  # A1 wrote what it read: the day before C2

    after = ticks.tick()
    # every dataset was in flight when C2 landed
    assert _requested(after) == set(ANALYTICS), "the capture that landed during A1 was forgotten"
    assert _analytics(defs, instance).success
    assert _messages(cap) == 3  # now equal to the datasets
    assert _requested(ticks.tick()) == set()


@pytest.mark.slow
def test_a_failed_analytics_run_is_run_again_without_a_new_capture(world):
    cap, _writer, _sid, instance = world
    defs = cap.defs()
    ticks = _Evaluator(defs, instance)
    ticks.tick()
    assert cap.materialize(DAY, instance=instance).success
    assert _requested(ticks.tick()) == set(ANALYTICS)
    # the run fails: its dataset folder cannot be made (as a full disk or a read-only warehouse would)
    blocked = cap.warehouse / USAGE
    blocked.write_text("a file where the dataset's folder should be\n")
    try:
        failed = _analytics(defs, instance, raise_on_error=False)
        assert not failed.success
    finally:
        blocked.unlink()
    # the other datasets of the step were written and materialized: only the one that failed is retried
    materialized = {e.asset_key.to_user_string() for e in failed.get_asset_materialization_events()}
    assert materialized == set(ANALYTICS) - {USAGE}
    # the fault is gone; no capture follows. Within a minute the day is requested again.
    # (the test launches nothing after the request, as the daemon would: so it holds the ticks
    # that follow the request to less than a minute, within which no second boundary passes)
    for _ in range(14):  # 70 s: a minute boundary passes
        again = _requested(ticks.tick(5))
        if again:
            break
    assert again == {USAGE}, "the failed day was not requested again within a minute"
    assert all(not _requested(ticks.tick(5)) for _ in range(11))  # once, not on every tick
    assert _analytics(defs, instance).success and _messages(cap) == 2
    assert all(not _requested(ticks.tick(5)) for _ in range(14))  # a minute more: nothing to redo


@pytest.mark.slow
def test_a_capture_that_computed_its_analytics_in_the_same_run_needs_no_analytics_run(world):
    """The sensor's runs capture their days and compute the days' analytics right after, in one
    run (ranged, too): the automation sees the capture and leaves it alone. A capture of the
    datasets alone (a backfill launched from the UI) still leads to an analytics run."""
    cap, writer, sid, instance = world
    defs = cap.defs()
    # the watermark sensor's first tick reports a check of the stores: the event log is not empty
    # when the automation first looks (Dagster tells which updates are new from its last event)
    instance.report_runless_asset_event(days_captured_evaluation([], {}))
    ticks = _Evaluator(defs, instance)
    ticks.tick()
    sensor_like = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance,
        tags={**COMPUTED_IN_RUN, RANGE_START: EVE, RANGE_END: DAY},
        asset_selection=[dg.AssetKey(a) for a in (*DATASETS, *ANALYTICS)],
    )
    assert sensor_like.success and _messages(cap) == 2  # computed by the run itself
    for _ in range(3):
        assert _requested(ticks.tick(5)) == set(), "the analytics of a run that computed them ran again"
    writer.msg(sid, "user", "one more thing")
    assert cap.materialize(DAY, instance=instance).success  # the datasets alone
    assert _requested(ticks.tick(5)) == set(ANALYTICS)


def test_the_retry_cron_is_a_minute():
    assert RETRY_CRON == "* * * * *"
