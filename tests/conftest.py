"""Shared fixtures: copies of the shared Hermes stores, and real-writer scenario stores.

The shared fixtures (``../shared/fixtures/<name>/state.db``) are never opened in
place: even a ``mode=ro`` open of a WAL store creates ``-wal``/``-shm`` beside
it. :func:`fixture_copy` copies one into the test's ``tmp_path`` first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.hermes_writer import HermesWriter
from tests.support.skips import unavailable


def shared_dir() -> Path:
    """``../shared`` next to the repo, or ``$HERMES_ASSETS_SHARED``."""
    override = os.environ.get("HERMES_ASSETS_SHARED")
    return Path(override) if override else Path(__file__).resolve().parents[1].parent / "shared"


def fixture_store(name: str) -> Path:
    """Path of a shared fixture store (read it only through a copy)."""
    return shared_dir() / "fixtures" / name / "state.db"


def copy_fixture(name: str, dest_dir: Path) -> Path:
    """Copy ``fixtures/<name>/state.db`` to ``dest_dir/state.db`` (writable, no -wal/-shm)."""
    src = fixture_store(name)
    if not src.is_file():
        unavailable(f"shared fixture {src} is not available (set HERMES_ASSETS_SHARED)")
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / "state.db"
    shutil.copyfile(src, dest)  # contents only: the shared files are read-only
    os.chmod(dest, 0o644)
    return dest


@pytest.fixture
def fixture_copy(tmp_path):
    """``fixture_copy(name)`` -> path of a private copy of a shared fixture store."""

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
