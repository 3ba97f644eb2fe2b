"""Fixtures of the Dagster-level tests: an isolated installation per test."""

from __future__ import annotations

import dagster as dg
import pytest

from tests.defs.harness import Capture, copy_small, new_capture
from tests.support.environ import use_environment
from tests.support.hermes_writer import HermesWriter


@pytest.fixture
def capture(tmp_path, monkeypatch) -> Capture:
    """An installation with an empty Hermes home (no store yet), set in the environment."""
    cap = new_capture(tmp_path / "install")
    use_environment(monkeypatch, cap.environ())
    return cap


@pytest.fixture
def small(capture) -> Capture:
    """``capture`` with a private copy of the small fixture store as its Hermes store."""
    copy_small(capture.home)
    return capture


@pytest.fixture
def writer(capture):
    """The real Hermes writer (``SessionDB``, simulated clock from 2026-06-01T09:00Z) on the store."""
    w = HermesWriter(capture.store, home=capture.home)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def instance():
    """An ephemeral Dagster instance shared by the runs of one test (disposed after)."""
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst
