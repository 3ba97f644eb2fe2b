"""Fixtures of the fault suite: an isolated installation per test."""

from __future__ import annotations

import pytest

from tests.faults.helpers import Install, new_install
from tests.support.environ import use_environment

#: variables of a developer's own setup that would leak into a test
#: the retry budget of busy stores in this suite: short, so store_busy cases stay fast
BUSY_BUDGET_MS = 400


@pytest.fixture
def install(tmp_path, monkeypatch) -> Install:
    """An installation with an empty Hermes home (no store yet), set in the environment."""
    inst = new_install(tmp_path / "install")
    use_environment(monkeypatch, inst.environ())
    monkeypatch.setenv("HERMES_ASSETS_BUSY_TIMEOUT_MS", str(BUSY_BUDGET_MS))
    return inst
