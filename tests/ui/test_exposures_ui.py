"""What to rotate in a real browser: ``hermes_secret_exposures`` plots the secrets per kind.

A real ``dagster dev`` (the repo's ``dagster.yaml``, both sensors on a 5 s interval) on a
temp DAGSTER_HOME, and a Hermes store Hermes's own writer fills with fake credentials
built at run time (two GitHub tokens, a Stripe key). Nothing but the daemon launches
runs: the watermark sensor captures the day, then ``hermes_automation`` computes the
exposures. Debian's Chromium, driven by Playwright, opens the asset: its description,
then *Metadata* → *Plots* draws one plot per kind (``secrets.<kind>``, the count the
test expects from the keys it wrote), and no key is anywhere on the page. With
``HERMES_ASSETS_UPDATE_SCREENSHOTS=1`` the plots replace ``docs/ui-secret-exposures-plots.png``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from hermes_assets.lib.redaction.redactor import Redactor
from tests.defs.harness import EXPOSURES
from tests.e2e.test_backfill_graphql import DagsterDev
from tests.support import fake_keys
from tests.support.hermes_writer import HermesWriter
from tests.ui.test_dagster_ui import Screens, _visible

pytestmark = pytest.mark.e2e

PLOTS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "ui-secret-exposures-plots.png"
WAIT_S = 180

MATERIALIZATIONS_Q = """
query Exposures($path: [String!]!) {
  assetOrError(assetKey: {path: $path}) {
    ... on Asset { assetMaterializations(limit: 5) {
        metadataEntries { __typename label ... on IntMetadataEntry { intValue } } } }
  }
}"""


def _per_kind(dev: DagsterDev) -> dict[str, int] | None:
    """The secrets per kind of the latest materialization of the exposures (None before the first)."""
    asset = dev.graphql(MATERIALIZATIONS_Q, {"path": [EXPOSURES]})["assetOrError"]
    mats = (asset or {}).get("assetMaterializations") or []
    for mat in mats:  # newest first
        found = {
            e["label"][len("secrets.") :]: e["intValue"]
            for e in mat["metadataEntries"]
            if e["label"].startswith("secrets.")
        }
        if found:
            return found
    return None


def _kind(key: bytes, value: str) -> str:
    """The kind a capture names a key by (the redactor's own rules)."""
    redactor = Redactor(key)
    redactor.text(value)
    (seen,) = redactor.take_sightings()
    return seen.kind


def test_the_exposures_page_plots_the_secrets_per_kind(installation, dagster_env, browser_page, tmp_path):
    keys = [fake_keys.github(), fake_keys.github(), fake_keys.stripe()]
    installation.store.unlink()  # this test's Hermes is written here, by Hermes's own writer
    with HermesWriter(installation.store, home=installation.home) as w:
        sid = w.session("s-keys", "cli")
        w.msg(sid, "user", f"use {keys[0]} for the CI, {keys[2]} for billing")
        w.msg(sid, "assistant", "noted")
        other = w.session("s-more", "telegram")
        w.msg(other, "user", f"and this one: {keys[1]}")
    env = {**dagster_env, "HERMES_ASSETS_POLL_SECONDS": "5"}
    dev = DagsterDev(env, installation.root / "dagster-dev.log")
    page = browser_page
    screens = Screens(page, tmp_path / "screenshots")
    try:
        dev.wait_ready()
        deadline = time.monotonic() + WAIT_S
        while (per_kind := _per_kind(dev)) is None:
            if time.monotonic() > deadline:
                pytest.fail(f"no materialization of {EXPOSURES} with secrets within {WAIT_S}s:\n{dev.log_tail()}")
            dev._alive()
            time.sleep(1)
        key = (installation.dagster_home / "redaction.key").read_bytes()
        assert per_kind == Counter(_kind(key, k) for k in keys)

        page.add_locator_handler(
            page.get_by_text("Join the Dagster community"), lambda: page.get_by_role("button", name="Skip").click()
        )
        try:
            page.goto(f"{dev.url}/assets/{EXPOSURES}")
            _visible(page, "What to rotate", exact=False).wait_for()
            metadata = _visible(page, "Metadata")
            metadata.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.get_by_role("button", name="Plots").click()
            for kind in per_kind:
                page.get_by_text(f"secrets.{kind}", exact=True).last.wait_for()
            page.wait_for_function(f"document.querySelectorAll('canvas').length >= {len(per_kind)}")
            page.wait_for_timeout(1000)  # the charts draw
            shot = screens.shot("secret-exposures-plots")
            text = page.content()
            assert not [k for k in keys if k in text], "a key is on the page"
            if os.environ.get("HERMES_ASSETS_UPDATE_SCREENSHOTS") == "1":
                shutil.copyfile(shot, PLOTS_SCREENSHOT)
        except Exception:
            screens.shot("failure")
            raise
    finally:
        dev.stop()
