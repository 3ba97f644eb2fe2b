"""Fixtures of the browser tests: the e2e installation, and Debian's Chromium driven by Playwright.

Playwright never downloads a browser here: it drives ``/usr/bin/chromium``
(Debian's package, installed by ``.ci/run``). Without that browser the tests
skip on a developer's machine and fail in CI (``CI`` set), so CI can never
pass by skipping them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import dagster_env, installation  # noqa: F401  (fixtures reused as they are)
from tests.support.skips import unavailable

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

CHROMIUM = Path(os.environ.get("HERMES_ASSETS_CHROMIUM", "/usr/bin/chromium"))
#: the flags this machine needs: no sandbox as root, no GPU, no calls to Google's hosts
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture
def browser_page():
    """A fresh headless Chromium page (1600x1000; Playwright gives it an empty profile), closed at the end."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        unavailable(f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # part of the test extra: never a reason to skip
        pytest.fail("playwright for Python is not installed: pip install -e '.[test]'")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            context.set_default_timeout(30_000)
            yield context.new_page()
        finally:
            browser.close()
