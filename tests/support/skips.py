"""Skipping honestly: a missing prerequisite may skip a test only off CI.

Under CI (``CI`` set) every prerequisite is installed by ``.ci/run`` (the
system packages) or ships in the repository (the fixture stores, the tools),
so its absence is a broken set-up and the test fails instead of skipping.
``tests/conftest.py`` holds every other skip to the same rule.
"""

from __future__ import annotations

import os

import pytest


def unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: .ci/run provides it, so this is a broken set-up, not a skip)")
    pytest.skip(reason)
