"""``defs/run_log.py``: our events in the run log of the step that logs them, printed once.

End to end (a real capture, a CLI run) in tests/ecosystem/test_structured_logs.py;
here the hook's own rules.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest
from dagster._core.definitions.instigation_logger import get_instigation_log_records
from dagster._core.log_manager import LOG_RECORD_METADATA_ATTR

from hermes_assets.defs import run_log
from hermes_assets.lib.basics import logs
from tests.ecosystem.conftest import captured_logs, parse_json_lines


def test_inside_a_sensor_tick_an_event_is_kept_in_the_ticks_log_and_printed_when_it_is_a_warning(tmp_path, capfd):
    """The tick's log keeps every event of the tick (what the UI shows); the console, quiet, prints
    the errors and warnings, once."""
    run_log.install()
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance, captured_logs("json") as buf:
        with dg.build_sensor_context(
            instance=instance, instance_ref=instance.get_ref(), repository_name="repo", sensor_name="watcher"
        ) as context:
            with run_log.tick_log(context):
                logs.get_logger().info("hermes.test.tick", days_changed=2)
                logs.get_logger().error("hermes.test.store_failed", error_kind="store_corrupt")
            logs.get_logger().info("hermes.test.after")  # the tick is over: printed only
        kept = get_instigation_log_records(instance, context.log_key)
    printed = parse_json_lines(buf.getvalue())
    assert [e["event"] for e in printed] == ["hermes.test.store_failed"]
    assert [(r["levelname"], r[LOG_RECORD_METADATA_ATTR]["orig_message"]) for r in kept] == [
        ("INFO", 'hermes.test.tick {"days_changed": 2}'),
        ("ERROR", 'hermes.test.store_failed {"error_kind": "store_corrupt"}'),
    ]
    console = capfd.readouterr()
    assert "hermes.test" not in console.out + console.err  # Dagster's console logger printed none of them


def test_outside_a_step_an_event_is_left_as_it_is():
    event = {"event": "hermes.sensor.tick", "level": "info", "stores": 1}
    assert run_log.current_step() is None
    assert run_log.to_run_log(None, "info", dict(event)) == event


@pytest.mark.slow
def test_inside_a_step_an_event_gets_its_run_and_op_and_is_stored_once_at_its_level():
    run_log.install()
    run_log.install()  # idempotent: one entry per event

    @dg.asset
    def noisy() -> None:
        log = logs.get_logger()
        log.debug("hermes.test.debug", rows=1)
        log.info("hermes.test.info", day="2026-06-01", rows=2)
        log.warning("hermes.test.warning", error_kind="bad_timestamp")
        log.info("hermes.warehouse.day_written", day="2026-06-01", rows=3)  # per partition: stderr only

    with dg.DagsterInstance.ephemeral() as instance, captured_logs("json") as buf:
        logs.configure("json", stream=buf, level="debug")
        try:
            result = dg.materialize([noisy], instance=instance)
        finally:
            logs.configure(level="info")
        stored = [e for e in instance.all_logs(result.run_id) if (e.user_message or "").startswith("hermes.")]
    assert result.success
    printed = parse_json_lines(buf.getvalue())
    assert [e["event"] for e in printed] == [
        "hermes.test.debug",
        "hermes.test.info",
        "hermes.test.warning",
        "hermes.warehouse.day_written",
    ]
    assert all(e["run_id"] == result.run_id and e["op"] == "noisy" for e in printed)
    assert [(e.level, e.step_key) for e in stored] == [(10, "noisy"), (20, "noisy"), (30, "noisy")]
    name, _, fields = stored[1].user_message.partition(" ")
    assert (name, json.loads(fields)) == ("hermes.test.info", {"day": "2026-06-01", "rows": 2})
