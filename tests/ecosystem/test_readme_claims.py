"""What the README and its pages tell a newcomer, held against what the project does.

The recipes are run by ``test_readme_recipes.py``; these are the other
promises: the system packages the suite needs (the ones ``.ci/run`` installs,
``docs/development.md``), what a run without Hermes leaves (no file,
``docs/running.md``), which files may appear beside a store that is read
(SQLite's own ``-wal``/``-shm``, the README), the make targets the README
names, and the Hermes versions table (``docs/development.md``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.defs.harness import SMALL_DAYS, copy_small

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
RUNNING = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
DEVELOPMENT = (REPO / "docs" / "development.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_lists_the_system_packages_ci_installs():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    needed = re.findall(r"need\+=\((\w+)\)", ci)
    assert sorted(needed) == ["chromium", "git", "postgresql", "strace"]
    (listed,) = re.findall(r"apt-get install ([a-z ]+)`", DEVELOPMENT)
    assert sorted(listed.split()) == sorted(needed)
    for package in needed:
        assert re.search(rf"^\| `{package}`", DEVELOPMENT, re.M), f"{package} has no row saying what needs it"
    flat = _flat(DEVELOPMENT)
    assert "skipped with a reason" in flat and "Under CI" in flat


def test_the_readme_says_a_run_without_hermes_writes_no_file(capture):
    flat = _flat(RUNNING)
    assert "empty partitions" not in flat
    assert "writes no file (a day with no rows never has one)" in flat
    assert capture.materialize(SMALL_DAYS[0]).success
    assert capture.files() == {}


def test_the_readme_says_which_files_appear_beside_a_store(capture, monkeypatch):
    """A WAL store copied without its -wal/-shm: reading it creates them, and nothing else."""
    flat = _flat(README)
    assert "it never writes to it" in flat and "`-wal` and `-shm` files SQLite itself needs" in flat
    monkeypatch.setenv("HERMES_ASSETS_WORKERS", "1")
    copy_small(capture.home)
    assert sorted(p.name for p in capture.home.iterdir()) == ["state.db"]
    assert capture.materialize(SMALL_DAYS[0]).success
    assert sorted(p.name for p in capture.home.iterdir()) == ["state.db", "state.db-shm", "state.db-wal"]


@pytest.mark.parametrize("target", ["run", "test", "query"])
def test_every_make_target_the_readme_names_exists(target):
    assert f"make {target}" in README
    assert re.search(rf"^{target}:", (REPO / "Makefile").read_text(encoding="utf-8"), re.M)


def test_the_hermes_versions_table_names_stores_that_exist():
    """Each store or test the table says a Hermes version is tested on is there."""
    (table,) = re.findall(r"## Hermes versions read\n(.*?)(?:\n## |\Z)", DEVELOPMENT, re.S)
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| Hermes")]
    assert [row.split("|")[2].strip() for row in rows] == ["11", "12-21", "22", "31"]
    named = set(re.findall(r"`((?:tests/fixtures|tests/lib)/[\w./]+)`", table))
    assert {
        "tests/fixtures/oldest",
        "tests/fixtures/small",
        "tests/fixtures/hermes_v022",
        "tests/fixtures/upgrade",
        "tests/lib/test_schema31.py",
    } <= named
    for path in named:
        assert (REPO / path).exists(), path
