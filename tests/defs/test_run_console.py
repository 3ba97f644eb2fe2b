"""A quiet console: one line per run, one per failed step; every event still in the run's log.

Real runs of the capture, in process, on an instance configured as the repo's ``dagster.yaml``
(its ``python_logs`` hands every run's logs the project's handler); what is printed is read
from the lines our logging writes. The figures of a run's line are checked against the files
the run wrote, and the rule of the console (warnings, errors and those lines; everything at
``debug``) on its own.
"""

from __future__ import annotations

import json

import dagster as dg
import pyarrow.parquet as pq
import pytest
from dagster._core.instance.config import dagster_instance_config

from hermes_assets.lib.basics import logs
from tests.defs.harness import DATASETS, SMALL_DAYS, copy_small, day_path, new_capture
from tests.e2e.conftest import REPO
from tests.ecosystem.conftest import captured_logs, parse_json_lines

ROWS = {"hermes_sessions": "sessions", "hermes_messages": "messages", "ai_gateway_messages_hermes": "parts"}


@pytest.fixture
def capture(tmp_path, monkeypatch):
    cap = new_capture(tmp_path / "install")
    copy_small(cap.home)
    for name, value in cap.environ().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HERMES_STATE_DB", raising=False)
    monkeypatch.setenv("HERMES_ASSETS_WORKERS", "1")
    # the repo's dagster.yaml, read by Dagster's own loader (what `make run`'s instance reads)
    python_logs = dagster_instance_config(str(REPO))[0]["python_logs"]
    (tmp_path / "dagster").mkdir()
    with dg.DagsterInstance.local_temp(str(tmp_path / "dagster"), overrides={"python_logs": python_logs}) as instance:
        yield cap, instance


@pytest.mark.slow
def test_a_run_prints_one_line_with_its_days_rows_secrets_and_seconds(capture):
    cap, instance = capture
    days = SMALL_DAYS[:4]
    with captured_logs("json") as buf:
        result = cap.materialize(days[0], days[-1], instance=instance, select=[*DATASETS, "hermes_daily_usage"])
    assert result.success
    printed = parse_json_lines(buf.getvalue())
    (done,) = [e for e in printed if e["event"] == "hermes.run.done"]
    assert done["run_id"] == result.run_id and done["status"] == "success"
    assert done["days"] == len(days) and done["analytics_days"] == len(days)
    for dataset, name in ROWS.items():
        assert done[name] == sum(pq.read_metadata(day_path(cap.warehouse, dataset, d)).num_rows for d in days)
    assert done["secrets_redacted"] >= 1 and 0 < done["seconds"] < 600  # the fixture's first days hold secrets
    # quiet: nothing else at info (the run's plan, projection, writes ... are in its log)
    assert {e["level"] for e in printed if e is not done} <= {"warning", "error"}, printed
    stored = [e.user_message for e in instance.all_logs(result.run_id) if (e.user_message or "").startswith("hermes.")]
    assert any(m.startswith("hermes.capture.plan ") for m in stored) and any(
        m.startswith("hermes.capture.write ") for m in stored
    )


@pytest.mark.slow
def test_a_failed_step_is_one_line_and_the_run_says_it_failed(capture, monkeypatch, tmp_path):
    cap, instance = capture
    monkeypatch.setenv("HERMES_ASSETS_POLICY_LIST", str(tmp_path))  # a folder: the list cannot be read
    with captured_logs("json") as buf:
        result = cap.materialize(SMALL_DAYS[0], instance=instance, raise_on_error=False)
    assert not result.success
    printed = parse_json_lines(buf.getvalue())
    (failed,) = [e for e in printed if e["event"] == "hermes.run.step_failed"]
    assert failed["step"] == "hermes_capture.apply_usage_policy" and failed["run_id"] == result.run_id
    assert failed["error"].startswith(f"usage-policy list {tmp_path} cannot be read") and "\n" not in failed["error"]
    (done,) = [e for e in printed if e["event"] == "hermes.run.done"]
    assert (done["status"], done["days"], done["level"]) == ("failure", 0, "warning")


def test_the_console_prints_warnings_errors_and_the_runs_lines_unless_at_debug():
    log = logs.get_logger()
    try:
        for level, printed in (("info", ["b", "c", "d"]), ("debug", ["a0", "a", "b", "c", "d"])):
            with captured_logs("json") as buf:
                logs.configure(level=level)
                log.debug("a0")
                log.info("a", rows=1)
                log.warning("b")
                log.error("c")
                log.info("d", **logs.ON_CONSOLE)
            events = parse_json_lines(buf.getvalue())
            assert [e["event"] for e in events] == printed
            assert all("on_console" not in e for e in events)
    finally:
        logs.configure(level="info")


@pytest.mark.slow
def test_a_long_run_reports_its_days_done_as_it_goes_in_its_log_and_its_tag(capture, monkeypatch):
    """Every day a report (the interval at 0): the run's log holds the days done of how many as
    they went, before the step's end, and the run's tag says the last of them."""
    from hermes_assets.defs.run_progress import PROGRESS_TAG
    from hermes_assets.lib.capture import progress

    cap, instance = capture
    monkeypatch.setattr(progress, "REPORT_EVERY_S", 0.0)
    days = SMALL_DAYS[:5]
    result = cap.materialize(days[0], days[-1], instance=instance)
    assert result.success
    entries = instance.all_logs(result.run_id)
    reports = [
        json.loads(e.user_message.partition(" ")[2])
        for e in entries
        if (e.user_message or "").startswith("hermes.capture.progress ")
    ]
    projected = [r for r in reports if r["step"] == "project_rows"]
    assert [r["days_done"] for r in projected] == list(range(1, len(days) + 1)), projected
    assert all(r["days"] == len(days) and r["eta_s"] is not None for r in projected)
    assert projected[-1]["rows"] == sum(
        pq.read_metadata(day_path(cap.warehouse, ds, d)).num_rows for ds in DATASETS for d in days
    )
    ended = next(
        e.timestamp
        for e in entries
        if e.dagster_event is not None
        and e.dagster_event.event_type_value == "STEP_SUCCESS"
        and e.step_key == "hermes_capture.project_rows"
    )
    first = next(e.timestamp for e in entries if (e.user_message or "").startswith("hermes.capture.progress "))
    assert first < ended  # told as it went, not after
    tag = instance.get_run_by_id(result.run_id).tags[PROGRESS_TAG]
    assert tag == f"write_partitions: {len(days)}/{len(days)} days · {projected[-1]['rows']:,} rows · done", tag
