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
import subprocess
from pathlib import Path

import pytest

from hermes_assets.defs import settings
from tests.support.hermes_writer import HermesWriter
from tests.support.skips import unavailable

#: ``slow`` marks (tests that start a process or run a Dagster job), kept honest
pytest_plugins = ["tests.support.fast_lane"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """The maintained secret rules, printed by their package's command once per test process
    before any test is watched (a fast test may not start a process): every redactor of the
    process then reads them from memory."""
    from hermes_assets.lib.redaction.redactor import rule_matcher

    rule_matcher()


REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"

#: The first partition of the suite's definitions: a start that holds every fixture's days and
#: today, set for every test (:func:`suite_start_date`), so a test's definitions do not start
#: where its Hermes home's history happens to. Tests of the start-from-history rule unset it.
SUITE_START_DATE = "2025-01-01"


@pytest.fixture(autouse=True, scope="session")
def suite_start_date():
    """``HERMES_ASSETS_START_DATE`` of every test, of the module fixtures that capture before them,
    and of the processes they start: the suite's start (a test may unset it with ``monkeypatch``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HERMES_ASSETS_START_DATE", SUITE_START_DATE)
        yield


def suite_days():
    """The daily partitions the suite's definitions are built on (:data:`SUITE_START_DATE`)."""
    from hermes_assets.defs import partitions

    return partitions.build(settings.load({"HERMES_ASSETS_START_DATE": SUITE_START_DATE}))


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


@pytest.fixture
def unwritable_folder(tmp_path):
    """A folder this user cannot write into: mode 0500, or, for root (whom modes do not stop),
    a read-only mount. Given back writable at the end."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
        return
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k,mode=0755", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mount.returncode != 0:
        unavailable(f"root cannot mount a read-only tmpfs here ({mount.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


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
