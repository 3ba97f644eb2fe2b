"""The capture's checks in a real browser: passed on every day a ranged backfill wrote, and a
day that breaks one failed on that day only.

A real ``dagster dev`` (the repo's ``dagster.yaml``) on a temp DAGSTER_HOME and a
copy of the small fixture store; a backfill of five days of the three datasets
(one run, as the UI launches it); then Debian's Chromium, driven by Playwright:

1. *Lineage*: each capture asset's node, and ``hermes_state``'s (the stores, whose
   checks every run reports once), says ``n / n Passed`` for its n checks;
2. each dataset's ``day_valid``, on its asset's *Checks* tab → *Partitions*:
   passed on the five days, none skipped, none failed;
3. a day's ``hermes_sessions`` file gets another store's session twice (rows
   every merge keeps as they are), and the five days are backfilled again: the
   node says ``0 / 1 Passed``, and the check's *Partitions* tab shows that day
   failed and the four others passed; the failed day shows the duplicated row.

And *Materialize all…*: every asset has the same backfill policy (one run per
backfill); the dialog's "varying backfill policies" notice is the UI's own
comparison of objects, which docs/running.md explains.

Screenshots of every step land in the test's temp dir (``screenshots/``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.defs.harness import ANALYTICS, DATASETS, SMALL_DAYS, day_path
from tests.e2e.test_backfill_graphql import ASSET_CHECKS_Q, DAY_CHECKS, DagsterDev, backfill, check_executions
from tests.ui.test_dagster_ui import Screens, _materialize_all, _open, _visible, _wait_first_tick

pytestmark = pytest.mark.e2e

DAYS = SMALL_DAYS[2:7]
BAD_DAY = DAYS[2]
SESSIONS = "hermes_sessions"
#: the nodes whose checks the lineage sums up: the datasets and the stores they are read from
NODES = (*DATASETS, "hermes_state")
FOREIGN = "/elsewhere/.hermes/state.db"  # a store this installation does not read: its rows are kept as they are


def test_checks_pass_on_every_written_day_and_fail_on_a_bad_day_only(installation, dagster_env, browser_page, tmp_path):
    page = browser_page
    screens = Screens(page, tmp_path / "screenshots")
    aside = installation.root / "store-aside.db"
    shutil.move(installation.store, aside)  # the sensor's first tick finds no store: it requests nothing
    env = {**dagster_env, "HERMES_ASSETS_POLL_SECONDS": "3600"}  # one tick now, the next in an hour
    dev = DagsterDev(env, installation.root / "dagster-dev.log")
    try:
        dev.wait_ready()
        _wait_first_tick(dev)
        shutil.move(aside, installation.store)
        (run,) = backfill(dev, DAYS, "hermes checks per day (UI test)")["runs"]
        assert run["status"] == "SUCCESS", run
        page.add_locator_handler(
            page.get_by_text("Join the Dagster community"), lambda: page.get_by_role("button", name="Skip").click()
        )
        try:
            _every_day_passed(page, screens, dev)
            _varying_policies_notice_is_the_uis_own(page, screens, dev)
            _a_bad_day_fails_alone(page, screens, dev, installation)
        except Exception:
            screens.shot("failure")
            raise
    finally:
        dev.stop()


def _check_counts(dev: DagsterDev) -> dict[str, int]:
    """How many checks each capture asset has (what its node counts)."""
    counts = {}
    for asset in NODES:
        node = dev.graphql(ASSET_CHECKS_Q, {"path": [asset]})["assetNodeOrError"]
        counts[asset] = len(node["assetChecksOrError"]["checks"])
    return counts


def _lineage_summaries(page, dev: DagsterDev) -> dict[str, tuple[int, int]]:
    """Each capture asset node's ``passed / total`` of its checks, as the lineage shows it."""
    page.goto(dev.url)
    _open(page, "Lineage", _visible(page, "hermes_analytics"))
    page.wait_for_timeout(1000)  # the graph is laid out
    if not page.get_by_text(SESSIONS, exact=True).filter(visible=True).count():  # the group is collapsed
        page.locator("foreignObject").get_by_text("hermes", exact=True).click()
        page.reload()  # the graph is laid out and fitted again, the group expanded (the UI remembers it)
    for name in NODES:
        _visible(page, name).wait_for()
    page.get_by_text(re.compile(r"^\d+ / \d+ Passed$")).first.wait_for()
    text = page.locator("body").inner_text()
    found = {}
    for name in NODES:
        match = re.search(rf"^{name}\n(?:.*\n){{0,4}}?Asset checks\n(\d+) / (\d+) Passed$", text, re.MULTILINE)
        assert match, f"no check summary for {name} in:\n{text}"
        found[name] = (int(match.group(1)), int(match.group(2)))
    return found


def _partition_counts(page, dev: DagsterDev, asset: str, check: str) -> dict[str, int]:
    """The check's *Partitions* tab: how many days are in each state (Passed, Failed, Skipped ...)."""
    page.goto(f"{dev.url}/assets/{asset}?view=checks")
    page.get_by_text(check, exact=True).filter(visible=True).first.click()
    page.get_by_role("tab", name="Partitions").last.click()
    _visible(page, "Passed", exact=False).wait_for()
    text = page.locator("body").inner_text()
    counts = dict(re.findall(r"(Execution Failed|Failed|In Progress|Missing|Skipped|Passed) \((\d+)\)", text))
    assert {"Passed", "Failed", "Skipped"} <= set(counts), text
    return {state: int(n) for state, n in counts.items()}


def _every_day_passed(page, screens: Screens, dev: DagsterDev) -> None:
    # 1. the lineage: n / n passed on each capture asset
    counts = _check_counts(dev)
    assert _lineage_summaries(page, dev) == {asset: (n, n) for asset, n in counts.items()}
    screens.shot("lineage-checks-passed")
    # 2. each dataset's day_valid: passed on every day, none skipped
    for asset, check in DAY_CHECKS:
        states = _partition_counts(page, dev, asset, check)
        assert (states["Passed"], states["Failed"], states["Skipped"]) == (len(DAYS), 0, 0), (asset, check, states)
        assert states.get("Execution Failed", 0) == 0 and states.get("In Progress", 0) == 0
    screens.shot("check-partitions-passed")


BACKFILL_POLICIES_Q = """
query { assetNodes { assetKey { path } backfillPolicy { policyType maxPartitionsPerRun description } } }"""
VARYING = "using varying backfill policies"
#: where the README's reader learns how to import history (the README links it)
RUNNING = Path(__file__).resolve().parents[2] / "docs" / "running.md"


def _varying_policies_notice_is_the_uis_own(page, screens: Screens, dev: DagsterDev) -> None:
    """*Materialize all…* over every asset: the dialog says "varying backfill policies" although
    every asset has the same one (the UI compares them as objects); docs/running.md says why."""
    nodes = dev.graphql(BACKFILL_POLICIES_Q)["assetNodes"]
    policies = {tuple(n["assetKey"]["path"]): n["backfillPolicy"] for n in nodes}
    # the capture's three, the analytics assets and the exposures (hermes_state, external, is not materialized)
    policies = {key: p for key, p in policies.items() if key != ("hermes_state",)}
    assert len(policies) == len(DATASETS) + len(ANALYTICS) + 1
    assert all(
        p == {"policyType": "SINGLE_RUN", "maxPartitionsPerRun": None, "description": p["description"]}
        for p in policies.values()
    ), policies
    assert len({p["description"] for p in policies.values()}) == 1, policies
    page.goto(dev.url)
    _open(page, "Lineage", _materialize_all(page))
    _materialize_all(page).click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Launch backfill").wait_for()
    screens.shot("materialize-all-dialog")
    if VARYING in dialog.inner_text():  # gone the day Dagster's UI compares policies by value
        page_text = " ".join(RUNNING.read_text().split())
        assert f"assets {VARYING}" in page_text and "compares the assets' policies as objects" in page_text
    dialog.get_by_role("button", name="Cancel").click()


def _a_bad_day_fails_alone(page, screens: Screens, dev: DagsterDev, installation) -> None:
    # 3. another store's session, twice, in one day's file: the key is no longer unique that day
    path = day_path(installation.warehouse, SESSIONS, BAD_DAY)
    table = pq.read_table(path)
    row = table.slice(0, 1).to_pylist()[0] | {"store": FOREIGN}
    pq.write_table(pa.concat_tables([table, pa.Table.from_pylist([row, row], schema=table.schema)]), path)
    (run,) = backfill(dev, DAYS, "hermes checks, a bad day (UI test)")["runs"]
    assert run["status"] == "SUCCESS", run  # the checks report, they do not fail the run
    executions = check_executions(dev, SESSIONS, "day_valid", run["runId"])
    assert {day: e["status"] for day, e in executions.items()} == {
        day: "FAILED" if day == BAD_DAY else "SUCCEEDED" for day in DAYS
    }

    summaries = _lineage_summaries(page, dev)
    assert summaries[SESSIONS] == (0, 1)
    screens.shot("lineage-a-check-failed")
    states = _partition_counts(page, dev, SESSIONS, "day_valid")
    assert (states["Passed"], states["Failed"], states["Skipped"]) == (len(DAYS) - 1, 1, 0), states
    screens.shot("check-partitions-one-failed")
    # the failed day: its evaluation names the duplicated row
    page.get_by_placeholder("Filter by partition").fill(BAD_DAY)
    _visible(page, BAD_DAY).click()
    _visible(page, "duplicate_rows").wait_for()
    screens.shot("failed-day")
    page.get_by_text("[Show JSON]").filter(visible=True).first.click()
    rows = page.get_by_role("dialog")
    rows.get_by_text(FOREIGN, exact=False).first.wait_for()
    screens.shot("failed-day-rows")
    assert '"copies": 2' in rows.inner_text()
