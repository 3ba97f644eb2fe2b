"""The project's definitions as the suite loads them in its own process."""

from __future__ import annotations

import os

import dagster as dg

START = "HERMES_ASSETS_START_DATE"


def load_definitions() -> dg.Definitions:
    """``hermes_assets.definitions.defs()``, on the suite's first day (``tests/conftest.py``)
    unless the test set ``HERMES_ASSETS_START_DATE`` itself.

    A test installation clears the variable from the environment (it would leak a developer's
    set-up into the processes a test starts, which then start where their history does); the
    definitions loaded in the suite's own process start on one day that holds every fixture's
    days and today, so a test never depends on which history its Hermes home happens to hold.
    """
    from hermes_assets.definitions import defs
    from tests.conftest import SUITE_START_DATE

    if os.environ.get(START, "").strip():
        return defs()
    os.environ[START] = SUITE_START_DATE
    try:
        return defs()
    finally:
        del os.environ[START]
