"""Fixtures of the end-to-end tests: a real Dagster instance in a temp DAGSTER_HOME.

Each test gets an installation (tests.defs.harness.Capture) holding a private
copy of the small fixture store, and the environment a user would export to
run ``dagster`` against it from the repo root.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.defs.harness import Capture, copy_small, new_capture
from tests.support.environ import LEAKY

REPO = Path(__file__).resolve().parents[2]
#: variables of a developer's own setup that must not reach the subprocesses
_CLEARED = (*LEAKY, "DAGSTER_PG_URL")


@pytest.fixture
def installation(tmp_path) -> Capture:
    cap = new_capture(tmp_path / "install")
    copy_small(cap.home)
    shutil.copyfile(REPO / "dagster.yaml", cap.dagster_home / "dagster.yaml")
    return cap


@pytest.fixture
def dagster_env(installation) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env.update(installation.environ())
    env.update(
        {
            # a short partition set: the fixture's days, plus Dagster's bookkeeping kept small
            "HERMES_ASSETS_START_DATE": "2026-05-01",
            "HERMES_ASSETS_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def dagster_bin() -> str:
    """The ``dagster`` CLI of the venv running the tests."""
    return str(Path(sys.executable).with_name("dagster"))
