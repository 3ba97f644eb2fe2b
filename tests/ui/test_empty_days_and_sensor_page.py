"""What a user sees of the days without sessions and of the sensor, in a real browser.

A real ``dagster dev`` (the repo's ``dagster.yaml``) on a temp DAGSTER_HOME, on stores the real
Hermes writer wrote; the partitions start where the history does (``HERMES_ASSETS_START_DATE``
unset). Debian's Chromium, driven by Playwright, on a 1600x1000 screen:

1. sessions on days 1, 2 and 9 of a ten-day span ending today, captured by the sensor alone:
   each dataset's partitions read 10 of 10 materialized (the days without a session too, and
   today), and its ``day_valid`` reads Passed on each of the ten days;
2. a history of 110 days: the sensor's page shows its latest ticks at the top of the screen,
   under a cursor of one line; the same page with the sensor's state itself as the cursor (its
   old form, set through Dagster's own mutation) has them below the fold.

Screenshots of every step land in the test's temp dir (``screenshots/``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time

import dagster as dg
import pytest

from hermes_assets.defs import sensor_cursor
from tests.defs.harness import DATASETS
from tests.e2e.test_backfill_graphql import DagsterDev
from tests.e2e.test_first_hour import PARTITIONS_Q
from tests.support.hermes_writer import HermesWriter
from tests.ui.test_checks_ui import _partition_counts
from tests.ui.test_dagster_ui import Screens, _wait_first_tick

pytestmark = pytest.mark.e2e

CAPTURE_TIMEOUT_S = 300
#: the screen's height (tests/ui/conftest.py): what is above it is what a user sees without scrolling
SCREEN_HEIGHT = 1000

SENSOR_Q = """
query {
  sensorOrError(sensorSelector: {repositoryName: "__repository__", repositoryLocationName: "hermes_assets",
                                 sensorName: "hermes_state_sensor"}) {
    ... on Sensor { id sensorState { id selectorId typeSpecificData { ... on SensorData { lastCursor } } } }
  }
}"""
SET_CURSOR_M = """
mutation($selector: SensorSelector!, $cursor: String) {
  setSensorCursor(sensorSelector: $selector, cursor: $cursor) { __typename }
}"""
SELECTOR = {
    "repositoryName": "__repository__",
    "repositoryLocationName": "hermes_assets",
    "sensorName": "hermes_state_sensor",
}


def _write_days(installation, days_back: list[int]) -> list[str]:
    """One session on each day ``days_back`` days before today (UTC), with the real writer."""
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    writer = HermesWriter(installation.store, home=installation.home)
    try:
        for back in sorted(days_back, reverse=True):
            day = today - dt.timedelta(days=back)
            writer.at(day.timestamp() + (30 if back == 0 else 3600))
            sid = writer.session(f"s{back}", "cli", model="model-a")
            writer.msg(sid, "user", f"hello {back}")
            writer.msg(sid, "assistant", f"hi {back}")
    finally:
        writer.close()
    return [(today - dt.timedelta(days=b)).date().isoformat() for b in sorted(days_back, reverse=True)]


def _env(dagster_env: dict, **extra: str) -> dict:
    env = {k: v for k, v in dagster_env.items() if k != "HERMES_ASSETS_START_DATE"}  # where the history starts
    return {**env, **extra}


def _wait_all_materialized(dev: DagsterDev, days: int) -> list[dict]:
    deadline = time.monotonic() + CAPTURE_TIMEOUT_S
    while True:
        dev._alive()
        nodes = dev.graphql(PARTITIONS_Q)["assetNodes"]
        stats = [n["partitionStats"] for n in nodes]
        if all(s["numMaterialized"] == days for s in stats):
            return nodes
        if time.monotonic() > deadline:
            pytest.fail(f"not every day captured within {CAPTURE_TIMEOUT_S}s: {stats}\n{dev.log_tail()}")
        time.sleep(2)


def test_days_without_sessions_read_as_captured_and_their_checks_passed(
    installation, dagster_env, browser_page, tmp_path
):
    installation.store.unlink()  # this test's Hermes is written here
    sessions = _write_days(installation, [9, 8, 1])  # days 1, 2 and 9 of the ten ending today
    page = browser_page
    screens = Screens(page, tmp_path / "screenshots")
    dev = DagsterDev(_env(dagster_env, HERMES_ASSETS_POLL_SECONDS="5"), installation.root / "dagster-dev.log")
    try:
        dev.wait_ready()
        nodes = _wait_all_materialized(dev, 10)
        today = dt.datetime.now(dt.UTC).date()
        span = [(today - dt.timedelta(days=b)).isoformat() for b in range(9, -1, -1)]
        for node in nodes:
            assert node["partitionKeysByDimension"][0]["partitionKeys"] == span
            assert node["partitionStats"] == {"numMaterialized": 10, "numPartitions": 10, "numFailed": 0}, node
        assert sessions == [span[0], span[1], span[8]]
        page.add_locator_handler(
            page.get_by_text("Join the Dagster community"), lambda: page.get_by_role("button", name="Skip").click()
        )
        try:
            for asset in DATASETS:
                # the asset's partitions: ten of ten materialized, none missing
                page.goto(f"{dev.url}/assets/{asset}?view=partitions")
                page.get_by_text(re.compile(r"Materialized \(\d+\)")).first.wait_for()
                text = page.locator("body").inner_text()
                counts = dict(re.findall(r"(Materialized|Missing|Failed) \((\d+)\)", text))
                assert counts.get("Materialized") == "10" and counts.get("Missing", "0") == "0", counts
                screens.shot(f"{asset}-partitions")
                # its check: Passed on each of the ten days, the days without a session among them
                states = _partition_counts(page, dev, asset, "day_valid")
                assert (states["Passed"], states["Failed"], states["Skipped"]) == (10, 0, 0), (asset, states)
                screens.shot(f"{asset}-day-valid")
        except Exception:
            screens.shot("failure")
            raise
    finally:
        dev.stop()


def _ticks_top(page, dev: DagsterDev) -> float:
    """Where the sensor's page puts its list of ticks: the top of its table's first row, in pixels."""
    page.goto(f"{dev.url}/locations/hermes_assets/sensors/hermes_state_sensor")
    page.get_by_text("Cursor", exact=True).first.wait_for()
    header = page.get_by_role("columnheader", name=re.compile("Timestamp", re.I)).first
    header.wait_for()
    return header.bounding_box()["y"]


def _wait_cursor(dev: DagsterDev, timeout_s: float = 30) -> str:
    """The sensor's cursor once its first tick has stored it: Dagster's daemon writes a finished
    tick before the sensor's state with the tick's cursor, so a tick can read finished while the
    state has no cursor yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        cursor = dev.graphql(SENSOR_Q)["sensorOrError"]["sensorState"]["typeSpecificData"]["lastCursor"]
        if cursor is not None:
            return cursor
        if time.monotonic() > deadline:
            pytest.fail(f"the sensor's state held no cursor {timeout_s}s after its first tick:\n{dev.log_tail()}")
        time.sleep(0.2)


def test_the_sensor_page_shows_its_latest_ticks_on_the_first_screen(installation, dagster_env, browser_page, tmp_path):
    installation.store.unlink()
    _write_days(installation, list(range(110)))  # a session on each of 110 days
    page = browser_page
    screens = Screens(page, tmp_path / "screenshots")
    dev = DagsterDev(_env(dagster_env, HERMES_ASSETS_POLL_SECONDS="3600"), installation.root / "dagster-dev.log")
    try:
        dev.wait_ready()
        _wait_first_tick(dev, timeout_s=180)
        cursor = _wait_cursor(dev)
        summary = json.loads(cursor)
        assert len(cursor) < 300 and summary["days"] == 110 and summary["stores"] == 1, cursor
        page.add_locator_handler(
            page.get_by_text("Join the Dagster community"), lambda: page.get_by_role("button", name="Skip").click()
        )
        try:
            top = _ticks_top(page, dev)
            screens.shot("sensor-page-summary")
            assert top < SCREEN_HEIGHT, f"the ticks start at {top}px, below the {SCREEN_HEIGHT}px screen"
            # the state itself as the cursor (its old form): the ticks go below the fold
            instance = dg.DagsterInstance.from_config(str(installation.dagster_home))
            try:
                state = sensor_cursor.state_of(instance, cursor)
            finally:
                instance.dispose()
            assert state and json.loads(state)["version"] == summary["version"]
            set_cursor = dev.graphql(SET_CURSOR_M, {"selector": SELECTOR, "cursor": state})["setSensorCursor"]
            assert set_cursor["__typename"] == "Sensor", set_cursor
            below = _ticks_top(page, dev)
            screens.shot("sensor-page-state")
            assert below > SCREEN_HEIGHT, f"with the whole state as cursor the ticks start at {below}px"
        except Exception:
            screens.shot("failure")
            raise
    finally:
        dev.stop()
