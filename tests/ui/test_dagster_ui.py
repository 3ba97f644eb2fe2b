"""What a user does in the Dagster UI, in a real browser.

A real ``dagster dev`` (webserver + daemon, the repo's ``dagster.yaml``) runs on
a temp DAGSTER_HOME; Debian's Chromium, driven by Playwright, does what a new
user does:

1. opens *Lineage*, expands its two groups (``hermes``, ``hermes_analytics``)
   and sees the three assets (with their SQLite / Python / Parquet kinds) and
   the analytics assets and the exposures downstream of them;
2. opens *Automation* → ``hermes_state_sensor``: it is running, and its latest
   tick says why it skipped (Hermes is not installed yet);
3. Hermes appears (a copy of the small fixture store), and the user imports
   history: *Materialize all…* → partitions dialog → the range
   ``[2026-06-01...2026-06-14]`` → *Launch backfill*;
4. follows the toast's *View* link to the backfill page and waits until it
   says *Succeeded* (one run: the assets backfill in a single run);
5. opens ``ai_gateway_messages_hermes``: its description and column schema
   are on the overview; *Partitions* → one day shows ``rows_written`` and
   ``dagster/row_count``, and both equal the rows of that day's Parquet file;
6. opens ``hermes_daily_usage`` (the analytics layer, materialized by the same
   backfill): *Metadata* → *Plots* → *Events* draws one plot per numeric
   total (``total_tokens``, ``sessions``, ``estimated_cost_usd``, ...), one
   point per day; with ``HERMES_ASSETS_UPDATE_SCREENSHOTS=1`` that view replaces
   ``docs/ui-daily-usage-plots.png`` (a test run never changes a tracked file otherwise);
7. opens ``hermes_daily_channels`` (what Hermes's own report answers besides): the
   same view plots its daily totals (``channels``, ``sessions``, ``hermes_cost_usd``, ...).

Screenshots of every step land in the test's temp dir (``screenshots/``); the
last one is also copied to ``/tmp/hermes-ui-screenshot.png``.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.defs.harness import ANALYTICS, DATASETS, EXPOSURES, SMALL_DAYS, day_path
from tests.e2e.test_backfill_graphql import BACKFILL_Q, DONE_BAD, DONE_OK, DagsterDev

pytestmark = pytest.mark.e2e

FINAL_SCREENSHOT = Path("/tmp/hermes-ui-screenshot.png")
#: the picture of the analytics plots in docs/running.md (rewritten by every run of this test)
PLOTS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "ui-daily-usage-plots.png"
USAGE = "hermes_daily_usage"
CHANNELS = "hermes_daily_channels"
STATE = "hermes_state"
RANGE = f"[{SMALL_DAYS[0]}...{SMALL_DAYS[-1]}]"
DAY = SMALL_DAYS[2]  # the day whose metadata is read off the screen
BACKFILL_TIMEOUT_S = 180
GATEWAY = "ai_gateway_messages_hermes"

TICKS_Q = """
query {
  sensorOrError(sensorSelector: {repositoryName: "__repository__", repositoryLocationName: "hermes_assets",
                                 sensorName: "hermes_state_sensor"}) {
    __typename
    ... on Sensor { sensorState { status ticks(limit: 5) { status skipReason } } }
    ... on PythonError { message }
  }
}"""


class Screens:
    """Numbered screenshots of one page, under the test's temp dir."""

    def __init__(self, page, folder: Path):
        self.page, self.folder, self.n = page, folder, 0
        folder.mkdir(parents=True, exist_ok=True)
        self.last: Path | None = None

    def shot(self, name: str) -> Path:
        self.n += 1
        self.last = self.folder / f"{self.n:02d}-{name}.png"
        self.page.screenshot(path=str(self.last))
        return self.last


def _nav(page, label: str):
    """A link of the left navigation (its accessible name is "<icon name> <label>")."""
    return page.get_by_role("link", name=re.compile(rf"(^|\s){label}$")).first


def _visible(page, text: str, exact: bool = True):
    return page.get_by_text(text, exact=exact).filter(visible=True).first


def _materialize_all(page):
    """The lineage's *Materialize all…* button (its accessible name starts with its icon's; with
    partitioned and unpartitioned assets, the UI counts them in its label: "Materialize all (6)…")."""
    return page.get_by_role("button", name=re.compile(r"Materialize all( \(\d+\))?…"))


def _open(page, label: str, expect) -> None:
    """Click a left-navigation link until ``expect`` (a locator) shows.

    Dagster's one-time community dialog can open between page load and the
    first click and swallow it; the locator handler closes the dialog on the
    next action, so a lost click is simply made again (3 tries, 20 s each).
    """
    from playwright.sync_api import TimeoutError as UITimeout

    for attempt in range(3):
        _nav(page, label).click()
        try:
            expect.wait_for(timeout=20_000)
            return
        except UITimeout:
            if attempt == 2:
                raise


def _wait_first_tick(dev: DagsterDev, timeout_s: float = 90) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sensor = dev.graphql(TICKS_Q)["sensorOrError"]
        assert sensor["__typename"] == "Sensor", sensor
        ticks = [t for t in sensor["sensorState"]["ticks"] if t["status"] != "STARTED"]
        if ticks:
            return ticks[0]
        time.sleep(0.5)
    pytest.fail(f"the sensor did not tick within {timeout_s}s:\n{dev.log_tail()}")


def _wait_backfill(dev: DagsterDev, backfill_id: str) -> dict:
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    while True:
        backfill = dev.graphql(BACKFILL_Q, {"id": backfill_id})["partitionBackfillOrError"]
        assert backfill["__typename"] == "PartitionBackfill", backfill
        if backfill["status"] in DONE_OK:
            return backfill
        if backfill["status"] in DONE_BAD:
            pytest.fail(f"backfill ended {backfill['status']}: {backfill}\n{dev.log_tail()}")
        if time.monotonic() > deadline:
            pytest.fail(f"backfill still {backfill['status']} after {BACKFILL_TIMEOUT_S}s\n{dev.log_tail()}")
        time.sleep(1)


def _metadata_value(page, label: str) -> str:
    """The value cell of one row of the metadata table on screen."""
    row = page.locator("tr").filter(has=page.get_by_text(label, exact=True)).filter(visible=True).first
    return row.locator("td").nth(1).inner_text().strip()


def test_a_user_imports_history_from_the_ui_and_reads_a_partition_row_count(
    installation, dagster_env, browser_page, tmp_path
):
    page = browser_page
    screens = Screens(page, tmp_path / "screenshots")
    # Hermes is not there yet: the sensor's first tick has nothing to request
    aside = installation.root / "store-aside.db"
    shutil.move(installation.store, aside)
    env = {**dagster_env, "HERMES_ASSETS_POLL_SECONDS": "3600"}  # one tick now, the next in an hour
    dev = DagsterDev(env, installation.root / "dagster-dev.log")
    try:
        dev.wait_ready()
        first_tick = _wait_first_tick(dev)
        assert first_tick["status"] == "SKIPPED" and first_tick["skipReason"].startswith("no Hermes installation at")

        # Dagster's one-time "Join the community" dialog: the user clicks Skip
        page.add_locator_handler(
            page.get_by_text("Join the Dagster community"), lambda: page.get_by_role("button", name="Skip").click()
        )
        try:
            _walk_through(page, screens, dev, installation, aside)
        except Exception:
            screens.shot("failure")
            raise
    finally:
        dev.stop()
        if screens.last is not None:
            shutil.copyfile(screens.last, FINAL_SCREENSHOT)


def _walk_through(page, screens: Screens, dev: DagsterDev, installation, aside: Path) -> None:
    # 1. the asset graph: two groups, collapsed; expanded (the UI remembers it), three
    #    assets with their kinds, and the analytics downstream
    page.goto(dev.url)
    _open(page, "Lineage", _visible(page, "hermes_analytics"))
    for group in ("hermes", "hermes_analytics"):  # the group boxes of the graph (not the sidebar tree)
        page.locator("foreignObject").get_by_text(group, exact=True).click()
    # the graph is laid out and fitted again, groups expanded, on a screen tall enough for the analytics'
    # column (the UI draws no node outside the screen)
    page.set_viewport_size({"width": 1600, "height": 1900})
    page.reload()
    for name in DATASETS:
        _visible(page, name).wait_for()
    for name in (*ANALYTICS, EXPOSURES):
        _visible(page, name).wait_for()
    everything = len(DATASETS) + len(ANALYTICS) + 1  # the analytics and the exposures are Python and Parquet
    # the Hermes stores (hermes_state, upstream) are SQLite only, when the fitted graph shows them
    stores = min(1, page.locator("foreignObject").get_by_text(STATE, exact=True).filter(visible=True).count())
    for kind, count in (("SQLite", len(DATASETS) + stores), ("Python", everything), ("Parquet", everything)):
        assert page.get_by_text(kind, exact=True).filter(visible=True).count() == count, kind
    screens.shot("asset-graph")
    page.set_viewport_size({"width": 1600, "height": 1000})

    # 2. the sensor: running, and its latest tick says why it skipped
    _open(page, "Automation", page.get_by_role("link", name="hermes_state_sensor"))
    page.get_by_role("link", name="hermes_state_sensor").click()
    running = page.locator("tr").filter(has=page.get_by_text("Running", exact=True)).first
    assert running.locator("input[type=checkbox]").is_checked()
    latest = page.locator("tr").filter(has=page.get_by_text("Latest tick", exact=True)).first
    latest.get_by_text(re.compile("runs requested|Skipped")).first.hover()
    _visible(page, f"no Hermes installation at {installation.store}").wait_for()
    screens.shot("sensor-running-skip-reason")

    # 3. Hermes appears; the user imports its history with a ranged backfill
    shutil.move(aside, installation.store)
    _open(page, "Lineage", _materialize_all(page))
    _materialize_all(page).click()
    dialog = page.get_by_role("dialog")
    partitions = dialog.locator("input[type=text]").first
    partitions.wait_for()
    show_all = dialog.get_by_text("Show all partitions")
    if show_all.count():  # the dialog starts on the last 90 days, which may not reach back to the range
        show_all.click()
        dialog.get_by_text("All time").wait_for()
    partitions.fill(RANGE)
    partitions.press("Enter")
    dialog.get_by_text(f"{len(SMALL_DAYS)} partitions", exact=True).wait_for()
    screens.shot("backfill-dialog")
    dialog.get_by_role("button", name="Launch backfill").click()

    # 4. the toast links to the backfill; wait for it to succeed
    toast = page.get_by_text(re.compile(r"^Created backfill \w+$")).first
    toast.wait_for()
    backfill_id = toast.inner_text().split()[-1]
    page.get_by_role("link", name="View").first.click()
    backfill = _wait_backfill(dev, backfill_id)
    assert sorted(backfill["partitionNames"]) == SMALL_DAYS
    # single_run(): one run for the range; the exposures, not partitioned, one run of their own
    assert [r["status"] for r in backfill["runs"]] == ["SUCCESS", "SUCCESS"]
    page.reload()
    status = page.get_by_text("Status", exact=True).filter(visible=True).first.locator("xpath=..")
    status.get_by_text("Succeeded", exact=True).wait_for()
    completed = page.get_by_text("100% completed").filter(visible=True).count()
    assert completed == len(DATASETS) + len(ANALYTICS) + 1  # and the exposures
    screens.shot("backfill-succeeded")

    # 5. the canonical dataset's page: its description and column schema ...
    page.get_by_role("link", name=GATEWAY).first.click()
    _visible(page, "Hermes activity as canonical", exact=False).wait_for()
    for column in ("gateway_id", "message_created_at", "attributes"):
        _visible(page, column).wait_for()
    _visible(page, "hermes-assets").wait_for()  # the owner (team:hermes-assets)
    screens.shot("asset-overview")
    # ... and one partition: the rows the UI shows are the rows on disk
    page.get_by_role("tab", name="Partitions").click()
    page.get_by_placeholder("Filter by name").fill(DAY)
    _visible(page, DAY).click()
    _visible(page, "rows_written").wait_for()
    rows_on_screen = int(_metadata_value(page, "rows_written"))
    row_count_on_screen = int(_metadata_value(page, "dagster/row_count"))
    screens.shot("partition-rows-written")
    rows_on_disk = pq.read_metadata(day_path(installation.warehouse, GATEWAY, DAY)).num_rows
    assert rows_on_screen == row_count_on_screen == rows_on_disk > 0

    # 6. the analytics: hermes_daily_usage plots each day's totals
    page.goto(f"{dev.url}/assets/{USAGE}")
    _visible(page, "What each day of Hermes used", exact=False).wait_for()
    # the sensors that keep it current: hermes_automation, and the watermark sensor, whose run of a day
    # older than the first partition computes that day's analytics too
    _visible(page, "2 sensors").wait_for()
    plotted = ("total_tokens", "sessions", "estimated_cost_usd", "tool_calls", "messages", "dagster/row_count")
    metadata = _plots(page, dev, USAGE, plotted)
    page.set_viewport_size({"width": 1600, "height": 2300})  # every plot in one picture
    metadata.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(1000)  # the charts redraw at the new size
    shot = screens.shot("daily-usage-plots")
    if os.environ.get("HERMES_ASSETS_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, PLOTS_SCREENSHOT)

    # 7. what Hermes's own report answers besides: hermes_daily_channels plots each day's channels
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{dev.url}/assets/{CHANNELS}")
    _visible(page, "What each channel Hermes was used through", exact=False).wait_for()
    _plots(page, dev, CHANNELS, ("channels", "sessions", "total_tokens", "hermes_cost_usd", "session_hours"))
    screens.shot("daily-channels-plots")
    # and every analytics asset's Overview has its days' totals to plot (numeric, on every day of the run)
    for asset in ANALYTICS:
        assert _numeric_labels(dev, asset), asset


def _plots(page, dev: DagsterDev, asset: str, plotted: tuple[str, ...]):
    """The asset page's *Metadata* -> *Plots* -> *Events*: a plot per numeric label, ``plotted`` among
    them; -> the Metadata heading."""
    metadata = _visible(page, "Metadata")
    metadata.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.get_by_role("button", name="Plots").click()
    # by partition, the UI plots only the latest days of the partition set; the fixture's
    # days are months old, so plot by materialization event (one per day, in day order)
    page.locator("button", has_text="Events").last.click()
    for label in plotted:
        page.get_by_text(label, exact=True).last.wait_for()
    numeric = _numeric_labels(dev, asset)
    assert set(plotted) <= numeric
    page.wait_for_function(f"document.querySelectorAll('canvas').length >= {len(numeric)}")
    return metadata


NUMERIC_Q = """
query Numeric($path: [String!]!, $partitions: [String!]) {
  assetOrError(assetKey: {path: $path}) {
    ... on Asset { assetMaterializations(partitions: $partitions) {
        partition metadataEntries { __typename label } } }
  }
}"""


def _numeric_labels(dev: DagsterDev, asset: str) -> set[str]:
    """The numeric metadata labels of every day's materialization (what the UI plots)."""
    mats = dev.graphql(NUMERIC_Q, {"path": [asset], "partitions": SMALL_DAYS})["assetOrError"]["assetMaterializations"]
    assert sorted(m["partition"] for m in mats) == SMALL_DAYS
    numeric = ("IntMetadataEntry", "FloatMetadataEntry")
    labels = [{e["label"] for e in m["metadataEntries"] if e["__typename"] in numeric} for m in mats]
    assert all(ls == labels[0] for ls in labels)
    return labels[0]
