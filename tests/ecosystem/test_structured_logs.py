"""Structured logs: structlog JSON lines, also in Dagster's run log.

Every event is one JSON object per line named ``hermes.<area>.<event>`` with
ids and counts (``session_id``, ``day``, ``rows``, ``error_kind``), never
message content. Inside a run each event also carries ``run_id`` and ``op``
and is stored in that step's Dagster run log (``defs/run_log.py``), without
Dagster's console logger printing it a second time: a console shows each
event once. Nor does a CLI command print the Dagster warnings our own set-up
would trigger (the code location name of ``[tool.dg.project]``).
"""

from __future__ import annotations

import json
from collections import Counter

import dagster as dg
import pyarrow.parquet as pq
import pytest

from hermes_assets.defs import settings
from hermes_assets.lib.basics import errors, logs
from tests.conftest import suite_days
from tests.defs.harness import DATASETS, SIGHTINGS, SMALL_DAYS, copy_small, day_path
from tests.ecosystem.conftest import captured_logs, cli_installation, dagster_cli, parse_json_lines
from tests.sensor.harness import SensorDriver, definitions

OP = "hermes_capture.{}"
#: the events each op prints once per run (the project and write steps: one per dataset)
ONCE_PER_OP = {
    OP.format("plan"): {"hermes.capture.plan": 1},
    OP.format("apply_usage_policy"): {"hermes.capture.policy": 1},
    OP.format("project_rows"): {"hermes.capture.project": len(DATASETS), "hermes.capture.secrets_redacted": 1},
    OP.format("write_partitions"): {"hermes.capture.write": len(DATASETS)},
}
#: the write step also prints one hermes.warehouse.day_written per day and dataset
PER_DAY = {OP.format("write_partitions"): DATASETS}
ERROR_KINDS = {v for k, v in vars(errors).items() if k.isupper() and isinstance(v, str)} | {
    c.error_kind for c in vars(errors).values() if isinstance(c, type) and hasattr(c, "error_kind")
}
#: fields whose values may be text of the user's; none may appear in an event
CONTENT_FIELDS = {"content", "content_text", "text", "system_prompt", "title", "reasoning", "tool_args"}


def _step_keys(result) -> set[str]:
    return {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}


def test_every_line_is_a_json_event_with_ids_and_counts(small_capture):
    events = small_capture.events()
    assert events, "no log line at all"
    for e in events:
        assert e["event"].startswith("hermes."), e
        assert e["level"] in {"debug", "info", "warning", "error", "critical"}, e
        assert e["timestamp"].endswith("Z"), e
        assert not CONTENT_FIELDS & set(e), e
        if "error_kind" in e:
            assert e["error_kind"] in ERROR_KINDS, e
        if "day" in e and e["day"] is not None:
            assert e["day"] in SMALL_DAYS, e
    # the cell errors of the fixture's two raw-SQL corruptions: kind and ids, no content
    bad = [e for e in events if e["event"] == "hermes.project.bad_cell"]
    assert bad and all({"error_kind", "session_id"} <= set(e) for e in bad), bad


def test_one_event_per_op_carrying_its_run_and_op(small_capture):
    run_id = small_capture.result.run_id
    events = small_capture.events()
    in_run = [e for e in events if e.get("run_id") == run_id]
    assert in_run and all(e.get("op") for e in in_run)
    by_op = Counter((e["op"], e["event"]) for e in in_run)
    ops = _step_keys(small_capture.result)
    assert set(ONCE_PER_OP) | set(PER_DAY) <= ops, ops
    for op, names in ONCE_PER_OP.items():
        for name, times in names.items():
            assert by_op[(op, name)] == times, (op, name, by_op)

    # a write step: one hermes.warehouse.day_written per day and dataset, rows as in the file
    for op, datasets in PER_DAY.items():
        written = [e for e in in_run if e["op"] == op and e["event"] == "hermes.warehouse.day_written"]
        sightings = [e for e in written if e["dataset"] == SIGHTINGS]  # the capture's, of days with secrets
        assert {e["day"] for e in sightings} <= set(SMALL_DAYS)
        written = [e for e in written if e not in sightings]
        assert sorted((e["dataset"], e["day"]) for e in written) == sorted(
            (d, day) for d in datasets for day in SMALL_DAYS
        )
        for e in written:
            path = day_path(small_capture.warehouse, e["dataset"], e["day"])
            assert e["rows"] == pq.read_metadata(path).num_rows, e


#: per-file and per-session events: on stderr (the compute logs) only; the partition's materialization,
#: the plan's metadata hold their figures
PER_PARTITION = {"hermes.warehouse.day_written", "hermes.capture.out_of_range_session"}


def test_events_are_routed_into_the_dagster_run_log(small_capture):
    run_id = small_capture.result.run_id
    ours = [e for e in small_capture.events() if e.get("run_id") == run_id and e["event"] not in PER_PARTITION]
    entries = [x for x in small_capture.instance.all_logs(run_id) if (x.user_message or "").startswith("hermes.")]
    assert len(entries) == len(ours)
    for entry, event in zip(entries, ours):
        name, _, body = entry.user_message.partition(" ")
        assert name == event["event"]
        assert entry.step_key == event["op"]
        fields = json.loads(body)
        assert fields == {k: v for k, v in event.items() if k not in ("event", "level", "run_id", "op", "timestamp")}
        assert entry.level == {"debug": 10, "info": 20, "warning": 30, "error": 40}[event["level"]]


def test_one_event_per_sensor_tick(tmp_path, capfd, monkeypatch):
    """Each tick keeps its summary in the tick's log (what the UI shows for the tick), and at
    debug prints it once, as our own line; Dagster's console logger prints none of our events again."""
    monkeypatch.setenv("HERMES_ASSETS_LOG_LEVEL", "debug")  # the console prints warnings alone otherwise
    home = tmp_path / "hermes-home"
    home.mkdir()
    driver = SensorDriver(home)
    definitions()  # loaded (and their logs set up) before the lines are captured: the ticks print there
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance, captured_logs("json") as buf:
        logs.configure(level="debug")
        missing = driver.tick(logged=instance)  # no store yet
        copy_small(home)
        first = driver.tick(logged=instance)  # a new store: every day
        again = driver.tick(logged=instance)  # nothing changed: only the rotation reads a day of long text
    ticks = [e for e in parse_json_lines(buf.getvalue()) if e["event"] == "hermes.sensor.tick"]
    assert len(ticks) == 3
    assert all("run_id" not in t and "op" not in t for t in ticks)  # a tick is not a run
    assert (ticks[0]["stores_missing"], ticks[0]["runs_requested"]) == (1, 0)
    assert missing.skip.startswith("no Hermes installation at")
    assert (ticks[1]["stores_new"], ticks[1]["days_changed"], ticks[1]["days_requested"]) == (1, 14, 14)
    # one run per changed day (HERMES_ASSETS_SENSOR_MAX_RUNS: 14), one per span of the days without a session
    without = len(suite_days().partitions.get_partition_keys()) - len(SMALL_DAYS)
    assert (ticks[1]["runs_requested"], ticks[1]["days_without_sessions"]) == (14 + 2, without)
    assert first.days == SMALL_DAYS
    assert (ticks[2]["stores_read"], ticks[2]["tier2_days"], ticks[2]["runs_requested"]) == (1, 1, 0)
    assert again.skip.startswith("no change")
    for t in ticks:
        assert isinstance(t["ms"], float) and t["level"] == "info"
    # each tick's own log holds its summary once, with the same fields, at INFO
    for tick, printed in zip((missing, first, again), ticks):
        (kept,) = [message for level, message in tick.log if message.startswith("hermes.sensor.tick ")]
        fields = {k: v for k, v in printed.items() if k not in ("event", "level", "timestamp")}
        assert json.loads(kept.partition(" ")[2]) == fields
        assert [level for level, message in tick.log if message == kept] == ["INFO"]
    console = capfd.readouterr()
    assert "hermes.sensor." not in console.out + console.err  # nothing printed beside our own lines


def test_console_format_and_the_environment_switch():
    """The setting is read by ``defs/settings.py`` (lib/ reads no environment) and passed down."""
    assert settings.load({"HERMES_ASSETS_LOG_FORMAT": "console"}).log_format == "console"
    assert settings.load({"HERMES_ASSETS_LOG_FORMAT": "json"}).log_format == "json"
    assert settings.load({}).log_format is None
    assert logs.resolve_format("console") == "console" and logs.resolve_format("json") == "json"
    with open(__file__) as not_a_terminal:
        assert logs.resolve_format(None, stream=not_a_terminal) == "json"
    with captured_logs("console") as buf:
        logs.get_logger().info("hermes.test.event", day="2026-06-01", rows=3)
    line = buf.getvalue().strip()
    assert "hermes.test.event" in line and "rows=3" in line and "day=2026-06-01" in line
    with pytest.raises(ValueError):
        json.loads(line)


def test_dagsters_console_logger_does_not_print_our_events_again(capture, capfd, monkeypatch):
    """In process: the run log has the event, Dagster's console lines (stderr) do not."""
    monkeypatch.setenv("HERMES_ASSETS_LOG_LEVEL", "debug")  # every event printed: the console prints warnings alone
    copy_small(capture.home)
    with dg.DagsterInstance.ephemeral() as instance, captured_logs("json") as buf:
        result = capture.materialize(SMALL_DAYS[2], instance=instance)
        stored = [x.user_message for x in instance.all_logs(result.run_id)]
    assert result.success
    ours = parse_json_lines(buf.getvalue())
    assert [e["event"] for e in ours].count("hermes.capture.plan") == 1
    assert sum(m.startswith("hermes.capture.plan {") for m in stored) == 1
    dagster_lines = capfd.readouterr().err
    assert " - RUN_SUCCESS - " in dagster_lines  # Dagster's console logger did print its own events
    assert "hermes.capture." not in dagster_lines


@pytest.mark.e2e
def test_a_cli_run_prints_each_event_once_between_dagster_lines(tmp_path):
    """A real process: ``dagster asset materialize`` with HERMES_ASSETS_LOG_FORMAT=json, the
    README's command. Each of our events is one JSON line on the console and one entry in the
    run log; no line says it again; no warning our set-up triggers is printed."""
    cap, env = cli_installation(tmp_path / "install", HERMES_ASSETS_LOG_LEVEL="debug")  # every event printed
    proc = dagster_cli(
        env,
        "asset",
        "materialize",
        "-m",
        "hermes_assets.definitions",
        "--select",
        ",".join(DATASETS),
        "--partition",
        SMALL_DAYS[2],
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    ours = [json.loads(line) for line in out.splitlines() if line.startswith('{"')]
    names = Counter(e["event"] for e in ours)
    assert (names["hermes.capture.plan"], names["hermes.capture.policy"]) == (1, 1), names
    assert (names["hermes.capture.project"], names["hermes.capture.write"]) == (len(DATASETS), len(DATASETS))
    assert names["hermes.warehouse.day_written"] == len(DATASETS), names
    assert all(
        e.get("run_id") and e.get("op") for e in ours if e["event"].startswith(("hermes.capture.", "hermes.warehouse."))
    )
    # printed once: no other line of the output names an event
    for name in names:
        assert sum(name in line for line in out.splitlines()) == names[name], name
    # and the run log holds every one of them
    instance = dg.DagsterInstance.from_config(str(cap.dagster_home))
    try:
        (run,) = instance.get_runs()
        stored = Counter(
            x.user_message.split(" ", 1)[0]
            for x in instance.all_logs(run.run_id)
            if (x.user_message or "").startswith("hermes.")
        )
    finally:
        instance.dispose()
    # (the run's own line is printed once it has ended, outside its steps, and the command opens
    # the store once before the run to check the host: the run log has the events of its steps)
    in_steps = Counter(e["event"] for e in ours if e.get("op") and e["event"] not in PER_PARTITION)
    assert stored == in_steps and in_steps["hermes.capture.plan"] == 1, (stored, in_steps)
    outside = Counter(e["event"] for e in ours if not e.get("op"))
    assert outside == Counter({"hermes.store.opened": 1, "hermes.run.done": 1}), outside
    # no warning of our own making: Dagster's code-location-name warning, beta warnings
    assert "code location name" not in out and "BetaWarning" not in out
