"""A bad setting in the UI: the code location's error is the one line.

``dg dev`` started with a bad setting still serves the UI, and the code location
fails to load. What a person sees under *Deployment* → *Code locations* →
*View error* must be the line that names the variable, the value and the
accepted form, as Dagster's own error (not "Error occurred during the loading
of Dagster definitions" with ours three causes below, no pydantic dump).
Each case: a start date in the wrong form, ``WORKERS=0``, a warehouse this
user cannot write, a ``HERMES_STATE_DB`` path that does not exist. One ``dg dev`` per case, one browser for all.
"""

from __future__ import annotations

import shutil

import pytest

from tests.defs.harness import new_capture
from tests.e2e.conftest import REPO, dagster_env  # noqa: F401  (fixture)
from tests.e2e.test_backfill_graphql import DagsterDev
from tests.e2e.test_first_hour import BAD, bad_env

pytestmark = pytest.mark.e2e

LOCATION_Q = """
query {
  workspaceOrError { ... on Workspace { locationEntries { name
      locationOrLoadError { __typename ... on PythonError { message className cause { message } } } } } }
}"""


@pytest.mark.parametrize("case", list(BAD))
def test_the_code_location_error_is_the_line(case, tmp_path, unwritable_folder, browser_page, dagster_env):
    install = new_capture(tmp_path / "install")
    shutil.copyfile(REPO / "dagster.yaml", install.dagster_home / "dagster.yaml")
    name = BAD[case][0]
    bad, line = bad_env(case, install, unwritable_folder)
    env = {**dagster_env, **install.environ(), name: bad[name]}
    dev = DagsterDev(env, tmp_path / "dg-dev.log", dg=True)
    try:
        dev.wait_ready(loaded=False)
        (entry,) = [
            e for e in dev.graphql(LOCATION_Q)["workspaceOrError"]["locationEntries"] if e["name"] == "hermes_assets"
        ]
        error = entry["locationOrLoadError"]
        assert error["__typename"] == "PythonError", error
        assert error["className"] == "BadSetting" and error["cause"] is None, error
        assert error["message"].startswith("hermes_assets.defs.console.BadSetting: " + line), error
        assert error["message"].count("\n") == 1, "one line"

        page = browser_page
        page.goto(f"{dev.url}/locations")
        page.get_by_text("View error").first.click()
        dialog = page.get_by_role("dialog").filter(has_text="Code location error")
        dialog.wait_for()
        text = dialog.inner_text()
        page.screenshot(path=str(tmp_path / f"location-error-{case}.png"))
        assert line in text, text
        for noise in ("DagsterUserCodeLoadError", "caused by", "ValidationError", "pydantic"):
            assert noise not in text, text
    finally:
        dev.stop()
