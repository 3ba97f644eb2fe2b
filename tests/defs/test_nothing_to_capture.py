"""Mistakes must not look like success (SPEC §1, §2), in process.

- A path named in ``HERMES_STATE_DB`` that does not exist is a bad setting: the
  definitions do not load, with one line naming the path. One that vanishes
  between the load and the run fails the run: the write step fails with that
  line, ``error_kind`` in its metadata, and no file is written (``store_missing``).
- No Hermes installed (default discovery) is the idle case: the run succeeds
  with no warning at all.
- A run that can capture nothing where a user expects rows, a range that holds
  no partition (start after end) or days on which the stores hold no session,
  says so once: one ``hermes.capture.nothing_to_capture`` WARNING event, and
  the plan op's metadata (``days``, ``sessions_in_range``, ``nothing_to_capture``).
"""

from __future__ import annotations

import pytest

from tests.defs.harness import SMALL_DAYS, step_output_metadata
from tests.ecosystem.conftest import captured_logs, parse_json_lines

#: slow: every test runs a capture through Dagster
pytestmark = pytest.mark.slow

PLAN_STEP = "hermes_capture.plan"
WRITE_STEP = "hermes_capture.write_partitions"


@pytest.fixture(autouse=True)
def _days_in_this_process(monkeypatch):
    monkeypatch.setenv("HERMES_ASSETS_WORKERS", "1")


@pytest.fixture(autouse=True)
def every_event_printed(monkeypatch):
    """The console prints warnings alone at info: these tests read every event."""
    monkeypatch.setenv("HERMES_ASSETS_LOG_LEVEL", "debug")


def _run(cap, start, end=None, **kwargs):
    with captured_logs("json") as buf:
        result = cap.materialize(start, end, **kwargs)
    return result, parse_json_lines(buf.getvalue())


def _plan_md(result) -> dict:
    return next(md for md in step_output_metadata(result, PLAN_STEP) if "days" in md)


def _not_info(events) -> list[tuple[str, str]]:
    return [(e["level"], e["event"]) for e in events if e["level"] not in ("info", "debug")]


def test_a_store_named_but_missing_is_a_bad_setting_in_one_line(capture, monkeypatch, tmp_path):
    """Named in ``HERMES_STATE_DB`` but not there when the definitions load: the load stops with the
    one line naming the path (what the UI shows as the code location's error), before any run."""
    from hermes_assets.defs.console import BadSetting

    typo = tmp_path / "hermes" / "stat.db"
    monkeypatch.setenv("HERMES_STATE_DB", str(typo))
    with pytest.raises(BadSetting) as raised:
        capture.defs()
    assert str(raised.value) == (
        f"HERMES_STATE_DB names {typo}, which does not exist: check the path "
        "(unset HERMES_STATE_DB to use the Hermes home's own store)."
    )
    assert capture.files() == {}


def test_a_named_store_that_vanishes_before_the_run_fails_the_run_naming_it(small, monkeypatch, tmp_path):
    """Loaded while the store was there, run after it went: the write step fails with the same line."""
    named = tmp_path / "hermes" / "state.db"
    named.parent.mkdir()
    small.store.rename(named)
    monkeypatch.setenv("HERMES_STATE_DB", str(named))
    defs = small.defs()
    named.unlink()
    result, events = _run(small, SMALL_DAYS[0], SMALL_DAYS[1], defs=defs, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == WRITE_STEP
    data = failure.event_specific_data.user_failure_data
    assert data.description == (
        f"store_missing: HERMES_STATE_DB names {named}, which does not exist: check the path "
        "(unset HERMES_STATE_DB to use the Hermes home's own store)."
    )
    assert data.metadata["error_kind"].value == "store_missing"
    assert _plan_md(result)["stores_failed"] == [{"path": str(named), "error_kind": "store_missing"}]
    assert _not_info(events) == [("error", "hermes.store.unreadable")]  # and no "nothing to capture" beside it
    assert small.files() == {}


def test_no_hermes_installed_succeeds_quietly(capture):
    result, events = _run(capture, SMALL_DAYS[0], SMALL_DAYS[2])
    assert result.success
    assert _not_info(events) == []
    assert [e["event"] for e in events if e["event"].startswith("hermes.store.")] == ["hermes.store.missing"]
    md = _plan_md(result)
    assert (md["days"], md["sessions_in_range"], md["nothing_to_capture"]) == (3, 0, "")
    assert capture.files() == {}


def test_a_reversed_range_says_so_once(small):
    result, events = _run(small, SMALL_DAYS[4], SMALL_DAYS[0])
    assert result.success
    assert _not_info(events) == [("warning", "hermes.capture.nothing_to_capture")]
    (said,) = [e for e in events if e["level"] == "warning"]
    assert said["days"] == 0 and "holds no partition" in said["reason"]
    md = _plan_md(result)
    assert (md["days"], md["sessions_in_range"]) == (0, 0)
    assert md["nothing_to_capture"] == said["reason"]
    assert small.files() == {}


def test_days_on_which_the_store_holds_no_session_say_so_once(small):
    result, events = _run(small, "2026-05-20", "2026-05-21")
    assert result.success
    assert _not_info(events) == [("warning", "hermes.capture.nothing_to_capture")]
    (said,) = [e for e in events if e["level"] == "warning"]
    assert said["reason"] == "the Hermes store(s) hold no session on the 2 day(s) asked (2026-05-20...2026-05-21)"
    md = _plan_md(result)
    assert (md["days"], md["sessions_in_range"], md["nothing_to_capture"]) == (2, 0, said["reason"])
    assert small.files() == {}


def test_a_day_with_sessions_says_nothing_of_the_kind(small):
    result, events = _run(small, SMALL_DAYS[0])
    assert result.success
    assert "hermes.capture.nothing_to_capture" not in {e["event"] for e in events}
    assert _plan_md(result)["nothing_to_capture"] == ""
