"""The project's own tools (``tools/``) make the fixtures it ships.

The fixture stores of ``tests/fixtures`` are generated, not hand-made: these
tests run the generators the way ``tools/README.md`` says and compare what
they write with the shipped files, so the recipes stay true. (``gen_oldest_db.py``
needs hermes-agent 0.13.0, which cannot share the test venv with 0.19.0; it is
documented, not run here.)
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_fixture, fixture_dir, fixture_store

#: slow: every test runs a tool in a subprocess
pytestmark = pytest.mark.slow

TOOLS = REPO / "tools"
#: the tables a Hermes store's rows live in (FTS shadow tables follow from them)
TABLES = ("sessions", "messages", "session_model_usage", "schema_version")


def run_tool(name: str, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(TOOLS / name), *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def rows(db: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Each table's column names (in physical order) and its rows, of a copy of ``db``."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {
            t: (
                [r[1] for r in conn.execute(f"PRAGMA table_info({t})")],
                sorted(repr(r) for r in conn.execute(f"SELECT * FROM {t}")),
            )
            for t in TABLES
            if t in tables
        }
    finally:
        conn.close()


def test_gen_state_db_makes_the_small_fixture_again(tmp_path):
    manifest = json.loads((fixture_dir("small") / "manifest.json").read_text())
    args = manifest["args"]
    assert manifest["generator"] == "gen_state_db.py"
    run_tool(
        "gen_state_db.py",
        str(tmp_path / "small"),
        "--sessions",
        str(args["sessions"]),
        "--seed",
        str(args["seed"]),
        "--days",
        str(args["days"]),
        "--start-date",
        args["start_date"],
        "--quiet",
    )
    made = json.loads((tmp_path / "small" / "manifest.json").read_text())
    # the generator's digest covers every row of sessions, messages and session_model_usage
    assert made["canonical_sha256"] == manifest["canonical_sha256"]
    assert made["stats"] == manifest["stats"] and made["features"] == manifest["features"]
    assert rows(tmp_path / "small" / "state.db") == rows(copy_fixture("small", tmp_path / "shipped"))


def test_upgrade_store_makes_oldest_upgraded_from_oldest(tmp_path):
    source = copy_fixture("oldest", tmp_path / "oldest")
    run_tool("upgrade_store.py", str(source), str(tmp_path / "upgraded"))
    assert sorted(p.name for p in (tmp_path / "upgraded").iterdir()) == ["state.db"], (
        "one self-contained file, like the fixtures"
    )
    upgraded = rows(tmp_path / "upgraded" / "state.db")
    assert upgraded == rows(copy_fixture("oldest_upgraded", tmp_path / "shipped"))
    assert rows(source)["sessions"][0] == upgraded["sessions"][0][: len(rows(source)["sessions"][0])], (
        "an in-place upgrade appends its columns at the end"
    )
    assert len(upgraded["session_model_usage"][1]) == 12


def test_multiply_db_makes_copies_further_in_the_past(tmp_path):
    source = copy_fixture("small", tmp_path / "small")
    run_tool("multiply_db.py", str(source), str(tmp_path / "double"), "--copies", "2")
    conn = sqlite3.connect(f"file:{tmp_path / 'double' / 'state.db'}?mode=ro", uri=True)
    try:
        sessions, messages, first, last = conn.execute(
            "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM messages), "
            "min(started_at), max(started_at) FROM sessions"
        ).fetchone()
    finally:
        conn.close()
    assert (sessions, messages) == (2 * 59, 2 * 1142)
    assert last - first > 14 * 86_400, "the older copy is shifted by the source's span"


def test_every_tool_is_documented_and_runs():
    documented = (TOOLS / "README.md").read_text()
    for tool in sorted(TOOLS.glob("*.py")):
        assert f"`{tool.name}" in documented, f"{tool.name} is not described in tools/README.md"
        if tool.name != "gen_oldest_db.py":  # hermes-agent 0.13.0 only
            assert "usage:" in run_tool(tool.name, "--help").stdout
    assert fixture_store("small").is_file()
