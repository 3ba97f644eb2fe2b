"""The analytics layer keeps itself current on a real ``dagster dev``.

A real ``dagster dev`` (webserver + daemon, the repo's ``dagster.yaml``) with
the capture sensor on a 5 s interval, and Hermes's own writer adding to a
session of 2026-06-01: an *old* partition, so plain ``eager()`` (latest day
only) would never follow it. Nothing but the daemon launches runs: the
sensor's runs capture the day and bring ``hermes_daily_usage`` (and every
other analytics asset of the day) up to date in the same run; after a new
message, again.
The ``hermes_automation`` sensor, which keeps them current after other
captures, has no daily analytics to add (one run at most, on the first start);
it computes ``hermes_secret_exposures`` (every day at once, not partitioned)
after the captures.
"""

from __future__ import annotations

import json
import time

import dagster as dg
import pyarrow.parquet as pq
import pytest

from tests.defs.harness import ANALYTICS, EXPOSURES, day_path
from tests.e2e.test_backfill_graphql import DagsterDev
from tests.support.hermes_writer import HermesWriter, openai_call

pytestmark = pytest.mark.e2e

DAY = "2026-06-01"  # the writer's clock: months before today, never the latest partition
USAGE = "hermes_daily_usage"
WAIT_S = 150


def _usage(warehouse) -> dict | None:
    """The day's hermes_daily_usage row of the session's model (None before the first file)."""
    path = day_path(warehouse, USAGE, DAY)
    try:
        rows = pq.read_table(path).to_pylist()
    except FileNotFoundError:
        return None
    return next((r for r in rows if r["model"] == "model-e2e"), None)


def _wait_for(dev: DagsterDev, what: str, check) -> dict:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        dev._alive()
        got = check()
        if got:
            return got
        time.sleep(1)
    pytest.fail(f"{what} did not happen within {WAIT_S}s:\n{dev.log_tail()}")


def _exposures_after_last_capture(installation) -> bool:
    """A run of the exposures requested after the latest capture (by the automation, on its next tick)."""
    instance = dg.DagsterInstance.from_config(str(installation.dagster_home))
    try:
        records = instance.get_run_records()
    finally:
        instance.dispose()
    captures = [r.create_timestamp for r in records if r.dagster_run.tags.get("hermes/trigger") == "sensor"]
    exposures = [r.create_timestamp for r in records if r.dagster_run.asset_selection == {dg.AssetKey(EXPOSURES)}]
    return bool(captures and exposures) and max(exposures) > max(captures)


def _latest_runs(installation, assets) -> dict[str, tuple[str, float]]:
    """asset -> (run id, time) of the latest materialization of :data:`DAY`."""
    instance = dg.DagsterInstance.from_config(str(installation.dagster_home))
    try:
        out = {}
        for asset in assets:
            (record,) = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[DAY]), limit=1
            ).records
            out[asset] = (record.run_id, record.timestamp)
        return out
    finally:
        instance.dispose()


def _rows(warehouse, asset: str) -> list[dict]:
    return pq.read_table(day_path(warehouse, asset, DAY)).to_pylist()


def _runs(installation) -> list:
    instance = dg.DagsterInstance.from_config(str(installation.dagster_home))
    try:
        return list(reversed(instance.get_runs()))
    finally:
        instance.dispose()


def _created_at(installation, runs: list) -> dict[str, float]:
    """``run_id -> the time Dagster created the run`` (epoch seconds)."""
    if not runs:
        return {}
    instance = dg.DagsterInstance.from_config(str(installation.dagster_home))
    try:
        records = instance.get_run_records(dg.RunsFilter(run_ids=[r.run_id for r in runs]))
        return {rec.dagster_run.run_id: rec.create_timestamp.timestamp() for rec in records}
    finally:
        instance.dispose()


def test_the_daemon_brings_daily_usage_up_to_date_after_a_sensor_capture(installation, dagster_env):
    installation.store.unlink()  # this test's Hermes is written below, by Hermes's own writer
    writer = HermesWriter(installation.store, home=installation.home)
    try:
        sid = writer.session("s-e2e", "cli", model="model-e2e", cwd="/work/e2e")
        writer.msg(sid, "user", "list the files")
        writer.msg(
            sid,
            "assistant",
            None,
            tool_calls=[openai_call("c1", "terminal", {"command": "ls"})],
            finish_reason="tool_calls",
        )
        writer.msg(
            sid,
            "tool",
            json.dumps({"output": "a b", "exit_code": 0, "error": None}),
            tool_call_id="c1",
            tool_name="terminal",
        )
        writer.update_token_counts(sid, input_tokens=120, output_tokens=30, model="model-e2e", api_call_count=1)

        env = {**dagster_env, "HERMES_ASSETS_POLL_SECONDS": "5"}
        dev = DagsterDev(env, installation.root / "dagster-dev.log")
        try:
            dev.wait_ready()
            running = {s["name"] for s in dev.running_sensors()}
            assert {"hermes_state_sensor", "hermes_automation"} <= running, running
            t0 = time.monotonic()
            first = _wait_for(dev, "the first hermes_daily_usage of the day", lambda: _usage(installation.warehouse))
            first_s = time.monotonic() - t0
            assert (first["messages"], first["tool_calls"], first["input_tokens"]) == (3, 1, 120), first

            # Hermes goes on: one more turn in the same (old) session
            goes_on_at = time.time()
            writer.msg(sid, "assistant", "two files: a and b", finish_reason="stop")
            writer.update_token_counts(sid, input_tokens=80, output_tokens=10, model="model-e2e", api_call_count=1)
            t1 = time.monotonic()
            # the message and the token counts are two writes: a tick between them captures the
            # message first, and the next tick the counts
            second = _wait_for(
                dev,
                "hermes_daily_usage to count the new message and its tokens",
                lambda: (u := _usage(installation.warehouse)) and (u["messages"], u["input_tokens"]) == (4, 200) and u,
            )
            second_s = time.monotonic() - t1
            assert (second["input_tokens"], second["output_tokens"], second["api_calls"]) == (200, 40, 2), second
            # the exposures computed after the second capture too, and every run finished, before the
            # other analytics are read: the run that wrote the usage writes them in its later steps
            _wait_for(dev, "the exposures after the last capture", lambda: _exposures_after_last_capture(installation))
            _wait_for(dev, "every run to finish", lambda: all(r.is_finished for r in _runs(installation)))
            tools = _rows(installation.warehouse, "hermes_daily_tools")
            assert [(t["tool_name"], t["calls"], t["results"]) for t in tools] == [("terminal", 1, 1)]
            # every analytics asset of the day is as current as the usage: written by the capture's own run
            (channel,) = _rows(installation.warehouse, "hermes_daily_channels")
            assert (channel["channel"], channel["messages"], channel["input_tokens"]) == ("cli", 4, 200), channel
            (hour,) = _rows(installation.warehouse, "hermes_activity")
            assert (hour["sessions"], hour["total_tokens"]) == (1, 240), hour
            top = [r for r in _rows(installation.warehouse, "hermes_top_sessions") if r["ranking"] == "tokens"]
            assert [(r["rank"], r["total_tokens"]) for r in top] == [(1, 240)], top
        finally:
            dev.stop()
    finally:
        writer.close()

    runs = _runs(installation)
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [(r.run_id, r.status) for r in runs]
    by_trigger: dict[str, list] = {}
    for run in runs:
        by_trigger.setdefault(run.tags.get("hermes/trigger", "other"), []).append(run)
    # the automation sensor adds no daily analytics once started: only on its first evaluations,
    # while Dagster cannot tell which updates are new (docs/benchmarks.md), may it request the days
    # the first captures wrote (one run, or two when its first ticks straddle the first captures
    # on a loaded machine), never for a capture after that; it computes the exposures (every day
    # at once: not partitioned) after the captures (one run for those its tick saw)
    assert set(by_trigger) == {"sensor", "automation"}, {k: len(v) for k, v in by_trigger.items()}
    exposures = [r for r in by_trigger["automation"] if r.asset_selection == {dg.AssetKey(EXPOSURES)}]
    daily = [r for r in by_trigger["automation"] if r not in exposures]
    created = _created_at(installation, daily)
    late = [(r.run_id, r.tags.get("dagster/partition")) for r in daily if created[r.run_id] >= goes_on_at]
    assert not late, (late, {k: len(v) for k, v in by_trigger.items()})
    assert len(daily) <= 2, {k: len(v) for k, v in by_trigger.items()}
    assert all("dagster/partition" not in r.tags for r in exposures)
    assert exposures, {k: len(v) for k, v in by_trigger.items()}
    for run in by_trigger["sensor"]:  # each capture computes its days' analytics
        assert {dg.AssetKey(a) for a in ANALYTICS} <= run.asset_selection
    # so each analytics asset of the day was last written by the run of its last capture: current
    # when that run ends, with no other sensor interval to wait for
    latest = _latest_runs(installation, ["hermes_sessions", *ANALYTICS])
    captured_by, captured_at = latest["hermes_sessions"]
    assert {a: run_id for a, (run_id, _) in latest.items()} == dict.fromkeys(latest, captured_by)
    assert captured_by in {r.run_id for r in by_trigger["sensor"]}
    analytics_after_capture_s = max(at for _, at in latest.values()) - captured_at
    assert len([r for r in by_trigger["sensor"] if r.tags.get("dagster/partition") == DAY]) >= 2
    print(
        "\nE2E analytics automation:",
        json.dumps(
            {
                "sensor_runs": len(by_trigger["sensor"]),
                "automation_runs": len(by_trigger["automation"]),
                "exposures_runs": len(exposures),
                "first_capture_to_daily_usage_s": round(first_s, 1),
                "new_message_to_daily_usage_s": round(second_s, 1),
                "last_capture_to_last_analytics_s": round(analytics_after_capture_s, 1),
            }
        ),
    )
