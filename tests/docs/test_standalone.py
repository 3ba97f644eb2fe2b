"""The repository stands alone: nothing in it reaches for a folder beside the clone.

Fixtures, tools and the data contract all live in the repository; a clone with
nothing beside it runs the whole suite (``.ci/run`` proves it). This test
reads every tracked file, so a new reference to a sibling folder fails here
before it fails on someone else's machine.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import REPO

SIBLING = "shared"
#: a path to the sibling folder, its override variable, or code that builds either
FORBIDDEN = re.compile(
    "|".join(
        [
            re.escape("../" + SIBLING),
            re.escape("HERMES_ASSETS_" + SIBLING.upper()),
            re.escape("/work/" + SIBLING),
            r"parents?(\[\d\])?(\.parent)*\s*/\s*[\"']" + SIBLING + r"[\"']",
        ]
    )
)
#: folders a checkout may hold that are not the project's files
NOT_OURS = {
    ".git",
    ".venv",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    "warehouse",
    "storage",
    "history",
    "logs",
    "schedules",
    ".logs_queue",
    ".nux",
    ".telemetry",
    "node_modules",
}


def repository_files() -> list[str]:
    """The tracked files (``git ls-files``), or every file of a copy that is not a git checkout."""
    if (REPO / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
        return [name for name in out.decode().split("\0") if name]
    files = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in NOT_OURS and not d.endswith(".egg-info")]
        files += [os.path.relpath(os.path.join(root, n), REPO) for n in names]
    return files


@pytest.mark.slow
def test_nothing_refers_to_a_folder_beside_the_clone():
    offenders = []
    for name in repository_files():
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # a store, a picture, a gzip: no paths to read
        for n, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                offenders.append(f"{name}:{n}: {line.strip()[:120]}")
    assert offenders == [], "the repository must stand alone:\n" + "\n".join(offenders)


def test_the_pattern_catches_what_it_should():
    for line in (
        'SPEC = "../' + SIBLING + '/SPEC.md"',
        "os.environ['HERMES_ASSETS_" + SIBLING.upper() + "']",
        'REPO.parent / "' + SIBLING + '" / "tools"',
        "Path(__file__).parents[2].parent / '" + SIBLING + "'",
    ):
        assert FORBIDDEN.search(line), line
    assert not FORBIDDEN.search('w.msg("b", "tool", "x", tool_call_id="' + SIBLING + '")')


#: a comment, docstring or page that cites the project's development history instead of its rule
HISTORY = re.compile(r"\b" + "issue" + r"s? \d+\b", re.IGNORECASE)


def test_the_code_says_the_rule_not_the_history():
    """A maintainer who never saw the tracker reads what must hold and why, never "issue N"."""
    where = ("hermes_assets", "tests", "docs", "bench", "tools", "deploy", "README.md", "Makefile")
    tracked = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in NOT_OURS and not d.endswith(".egg-info")]
        tracked += [os.path.relpath(os.path.join(root, n), REPO) for n in names]
    tracked = [name for name in tracked if name.split(os.sep)[0] in where]
    cited = []
    for name in tracked:
        path = REPO / name
        if path.suffix not in {".py", ".md", ".toml", ".yaml", ""} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                cited.append(f"{name}:{number}: {line.strip()}")
    assert cited == []
    assert HISTORY.search("as " + "issue" + " 21 asked") and not HISTORY.search("Hermes's issues #54027")
