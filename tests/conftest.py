"""Shared fixtures: copies of the repository's Hermes stores, and real-writer scenario stores.

The fixture stores live in ``tests/fixtures/<name>/state.db`` (how each was
made: ``tests/fixtures/README.md``). They are never opened in place: even a
``mode=ro`` open of a WAL store creates ``-wal``/``-shm`` beside it.
:func:`fixture_copy` copies one into the test's ``tmp_path`` first.

Under CI (``CI`` set) a skipped test is a failure: ``.ci/run`` provides every
prerequisite, so a skip there can only hide a broken set-up (see
:func:`pytest_runtest_makereport`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.hermes_writer import HermesWriter

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


def fixture_dir(name: str) -> Path:
    """``tests/fixtures/<name>``: a fixture store and what ships with it."""
    return FIXTURES / name


def fixture_store(name: str) -> Path:
    """Path of a fixture store (read it only through a copy)."""
    return fixture_dir(name) / "state.db"


def copy_fixture(name: str, dest_dir: Path) -> Path:
    """Copy ``tests/fixtures/<name>/state.db`` to ``dest_dir/state.db`` (writable, no -wal/-shm)."""
    src = fixture_store(name)
    if not src.is_file():  # part of the repository: its absence is a broken checkout, never a skip
        pytest.fail(f"fixture store {src} is missing from the checkout")
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / "state.db"
    shutil.copyfile(src, dest)  # contents only: the checkout's file modes do not matter
    os.chmod(dest, 0o644)
    return dest


@pytest.fixture
def fixture_copy(tmp_path):
    """``fixture_copy(name)`` -> path of a private copy of a fixture store."""

    def _copy(name: str, subdir: str | None = None) -> Path:
        return copy_fixture(name, tmp_path / (subdir or f"fixture-{name}"))

    return _copy


@pytest.fixture
def hermes_db(tmp_path, monkeypatch):
    """A :class:`HermesWriter` (real ``SessionDB``, simulated clock) on a temp store.

    ``HERMES_HOME`` points at a temp dir for the whole test.
    """
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    writer = HermesWriter(home / "state.db", home=home)
    try:
        yield writer
    finally:
        writer.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI a skip is a failure, whoever skipped (``pytest.skip``, a ``skipif`` mark, a
    missing import): ``.ci/run`` proves the suite runs whole, so 0 tests may be skipped."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI ({reason}): CI runs every test, so a skip is a broken set-up"
