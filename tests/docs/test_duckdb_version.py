"""One DuckDB everywhere: ``make query``'s shell (``duckdb-cli``) and the Python package the tests and
the docs' recipes use are the same release in ``uv.lock``, and the installed shell says so."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _locked(name: str) -> str:
    lock = tomllib.loads((REPO / "uv.lock").read_text(encoding="utf-8"))
    (version,) = [p["version"] for p in lock["package"] if p["name"] == name]
    return version


def test_the_shell_and_the_package_are_one_release_in_the_lock():
    assert _locked("duckdb-cli") == _locked("duckdb")


@pytest.mark.slow
def test_the_installed_shell_is_the_packages_duckdb():
    shell = Path(sys.executable).with_name("duckdb")
    said = subprocess.run([str(shell), "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert said.split()[0] == "v" + importlib.metadata.version("duckdb") == "v" + _locked("duckdb"), said
