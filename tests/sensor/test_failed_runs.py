"""A day is done when its run succeeds.

The real sensor against a real instance (on disk) holding real runs of the
capture: each tick's run requests are run here, as the daemon would run them,
with Dagster's run key tag. When the warehouse cannot be written, a run fails;
the next tick requests the day again (a new run key), with backoff after that;
a day whose runs keep failing is named in the tick log and by the failing
``days_captured`` check; once a run succeeds the day's fingerprint is the one
captured and nothing is requested any more, although Hermes wrote nothing
since (the tail of a day, or yesterday).

Backoff and the lookup of lost runs, with the clock in hand, are tested on
``hermes_assets.lib.changes.watch`` directly at the end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import dagster as dg
import pytest
import structlog

from hermes_assets.defs import sensor_cursor
from hermes_assets.defs.resources import HermesStores, HermesWarehouse
from hermes_assets.defs.tags import NO_SESSIONS_TAG
from hermes_assets.lib.basics.schemas import MESSAGES
from hermes_assets.lib.changes import attempts, watch
from hermes_assets.lib.source.stores import Store
from tests.sensor.harness import SENSOR, definitions
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

A, B = "2026-06-01", "2026-06-02"
CAPTURE = [dg.AssetKey(k) for k in ("hermes_sessions", "hermes_messages", "ai_gateway_messages_hermes")]


@dataclass
class TickData:
    run_requests: list[dg.RunRequest]
    skip_message: str | None


class Daemon:
    """Ticks the sensor with the instance's runs, and runs what it requests (in process)."""

    def __init__(self, tmp_path, home):
        (tmp_path / "dagster").mkdir()
        self.instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))
        self.hermes = HermesStores(hermes_home=str(home))
        self.warehouse = tmp_path / "warehouse"
        self.cursor = None
        self.events = []

    def tick(self) -> TickData:
        """One tick: the runs of days with sessions it requests (the partition days without any,
        requested once, are left unrun: their attempts stay in flight through these tests)."""
        defs = definitions()
        ctx = dg.build_sensor_context(
            cursor=self.cursor,
            definitions=defs,
            resources={"hermes": self.hermes, "warehouse": HermesWarehouse(root=str(self.warehouse))},
            instance=self.instance,
        )
        data = defs.resolve_sensor_def(SENSOR).evaluate_tick(ctx)
        if data.cursor is not None:
            self.cursor = data.cursor
        self.events = list(data.asset_events or [])
        requests = [r for r in data.run_requests or [] if not NO_SESSIONS_TAG.items() <= r.tags.items()]
        return TickData(requests, data.skip_message)

    def run(self, request: dg.RunRequest) -> bool:
        job = definitions().resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(CAPTURE))
        result = job.execute_in_process(
            instance=self.instance,
            partition_key=request.partition_key,
            raise_on_error=False,
            tags={**request.tags, "dagster/run_key": request.run_key},
            resources={"hermes": self.hermes, "warehouse": HermesWarehouse(root=str(self.warehouse))},
        )
        return result.success

    @property
    def state(self) -> dict:
        """The sensor's state, which the cursor Dagster keeps names (``defs/sensor_cursor.py``)."""
        return json.loads(sensor_cursor.state_of(self.instance, self.cursor) or "{}")

    def close(self):
        self.instance.dispose()


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    home = tmp_path / "hermes-home"
    monkeypatch.delenv("HERMES_STATE_DB", raising=False)
    monkeypatch.setenv("HERMES_HOME", str(home))
    with HermesWriter(home / "state.db", home=home) as w:
        sid = w.session("a1", "cli")
        w.msg(sid, "user", "hello")
        w.msg(sid, "assistant", "hi")
    d = Daemon(tmp_path, home)
    try:
        yield d
    finally:
        d.close()


def _break(daemon) -> None:
    """A file where a dataset's folder should be: every write of the day fails (a full disk would too)."""
    daemon.warehouse.mkdir(parents=True, exist_ok=True)
    (daemon.warehouse / MESSAGES).write_text("in the way\n")


def _repair(daemon) -> None:
    (daemon.warehouse / MESSAGES).unlink()


@pytest.mark.slow
def test_a_day_whose_last_run_failed_is_requested_again_until_a_run_succeeds(daemon):
    first = daemon.tick()
    (request,) = first.run_requests
    assert request.partition_key == A
    _break(daemon)
    assert not daemon.run(request)  # the tail of the day: Hermes writes nothing more

    with structlog.testing.capture_logs() as logs:
        again = daemon.tick()
    (retry,) = again.run_requests
    assert retry.partition_key == A and retry.run_key != request.run_key  # a key Dagster never saw
    assert [e["event"] for e in logs if e["event"] == "hermes.sensor.capture_failed"] == [
        "hermes.sensor.capture_failed"
    ]
    assert daemon.state["attempts"][A]["failures"] == 1

    _repair(daemon)
    assert daemon.run(retry)
    done = daemon.tick()
    assert done.run_requests == []
    assert A not in daemon.state["attempts"]
    day = daemon.state["stores"][next(iter(daemon.state["stores"]))]["days"][A]
    assert day[3] == day[0] + day[1]  # captured: the fingerprint the succeeding run was asked for
    assert daemon.tick().run_requests == []


@pytest.mark.slow
def test_a_day_that_keeps_failing_is_named_and_fails_the_days_captured_check(daemon, monkeypatch):
    monkeypatch.setattr(attempts, "BACKOFF_FIRST_S", 0.0)  # no waiting between the tries here
    _break(daemon)
    request = daemon.tick().run_requests[0]
    reports = []
    for _ in range(attempts.FAILING_AFTER):
        assert not daemon.run(request)
        data = daemon.tick()
        reports += daemon.events
        if data.run_requests:
            request = data.run_requests[0]
    assert daemon.state["failing"] == [A]
    (failed,) = reports
    assert isinstance(failed, dg.AssetCheckEvaluation) and failed.check_name == "days_captured"
    assert not failed.passed and failed.metadata["days_failing"].value == [A]

    _repair(daemon)
    assert daemon.run(request)
    daemon.tick()
    (healed,) = daemon.events
    assert healed.passed and daemon.state["failing"] == []


def test_a_run_in_flight_is_waited_for(daemon):
    """Queued or running: no second request, whatever the number of ticks."""
    (request,) = daemon.tick().run_requests
    job = definitions().resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(CAPTURE))
    daemon.instance.create_run_for_job(
        job, tags={**request.tags, "dagster/run_key": request.run_key, "dagster/partition": A}
    )
    for _ in range(3):
        assert daemon.tick().run_requests == []
    assert daemon.state["attempts"][A]["failures"] == 0


# --------------------------------------------------------------------------
# the rule, clock in hand (lib only)
# --------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home") as w:
        w.msg(w.session("a", "cli"), "user", "hi")
        w.at(START_S + DAY_S)
        w.msg(w.session("b", "cli"), "user", "hi")
    return Store(str(db))


def _tick(store, cursor, outcomes, now):
    return watch.plan_tick([store], cursor, is_partition=lambda d: True, now_s=now, outcomes=outcomes)


def test_backoff_doubles_up_to_ten_minutes_and_a_new_change_does_not_wait(store):
    assert [attempts.backoff_s(n) for n in range(1, 10)] == [0, 15, 30, 60, 120, 240, 480, 600, 600]
    now = START_S + 10 * DAY_S
    runs: dict[str, str] = {}  # run key -> how it ended (the instance, here a dict)

    def outcomes(keys):
        return {k: runs[k] for k in keys if k in runs}

    plan = _tick(store, None, outcomes, now)
    key = {days[0]: k for days, k in plan.runs}[A]
    runs[key] = attempts.FAILED
    plan = _tick(store, plan.cursor_json, outcomes, now + 1)
    assert [d for d, _ in plan.requests] == [A] and plan.retried == [A]  # the next tick, at once
    key = {days[0]: k for days, k in plan.runs}[A]
    runs[key] = attempts.CANCELED
    plan = _tick(store, plan.cursor_json, outcomes, now + 2)
    assert plan.requests == [] and "wait to be requested again (next: 2026-06-01 in 15 s)" in plan.skip_reason
    assert _tick(store, plan.cursor_json, outcomes, now + 10).requests == []
    plan = _tick(store, plan.cursor_json, outcomes, now + 18)
    assert [d for d, _ in plan.requests] == [A]
    key = {days[0]: k for days, k in plan.runs}[A]
    runs[key] = attempts.FAILED
    plan = _tick(store, plan.cursor_json, outcomes, now + 19)
    assert plan.failing == [A] and plan.cursor.attempts[A].retry_at == now + 19 + 30
    # Hermes writes to the day: requested at once, its failures still counted
    with HermesWriter(store.path, home=store.path.rsplit("/", 1)[0], start_s=START_S + 600) as w:
        w.msg("a", "assistant", "more")
    plan = _tick(store, plan.cursor_json, outcomes, now + 20)
    assert [d for d, _ in plan.requests] == [A] and plan.cursor.attempts[A].failures == 3


def test_a_run_the_instance_does_not_know_is_lost_after_a_while(store):
    now = START_S + 10 * DAY_S
    nothing = lambda keys: {}  # noqa: E731  (the runs were deleted)
    plan = _tick(store, None, nothing, now)
    assert _tick(store, plan.cursor_json, nothing, now + 60).requests == []
    late = _tick(store, plan.cursor_json, nothing, now + attempts.LOST_AFTER_S + 1)
    assert sorted(d for d, _ in late.requests) == [A, B]
    assert {a.error for a in late.cursor.attempts.values()} == {None}  # new attempts, opened this tick
    assert all(a.failures == 1 for a in late.cursor.attempts.values())


def test_a_change_while_the_days_run_waits_in_the_queue_is_left_to_that_run(daemon):
    """A queued run has read nothing yet: it will capture the new change, so no second run is
    requested; once it started, a new change gets a run of its own."""
    (request,) = daemon.tick().run_requests
    job = definitions().resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(CAPTURE))
    queued = daemon.instance.create_run_for_job(
        job, tags={**request.tags, "dagster/run_key": request.run_key, "dagster/partition": A}
    )  # not started
    home = daemon.hermes.hermes_home
    with HermesWriter(f"{home}/state.db", home=home, start_s=START_S + 600) as w:
        w.msg("a1", "user", "while queued")
    tick = daemon.tick()
    assert tick.run_requests == [] and "left to their run waiting in the queue" in tick.skip_message
    fingerprint = daemon.state["attempts"][A]["fingerprints"]
    day = daemon.state["stores"][next(iter(daemon.state["stores"]))]["days"][A]
    assert list(fingerprint.values()) == [day[0] + day[1]]  # the queued run will capture the day as it is now
    daemon.instance.report_dagster_event(
        dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=queued.job_name), run_id=queued.run_id
    )
    with HermesWriter(f"{home}/state.db", home=home, start_s=START_S + 700) as w:
        w.msg("a1", "assistant", "while running")
    (second,) = daemon.tick().run_requests
    assert second.partition_key == A and second.run_key != request.run_key
