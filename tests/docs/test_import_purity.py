"""Importing any module of ``hermes_assets`` changes nothing and reads nothing.

Every module is imported in a fresh interpreter (``tests/support/import_probe.py``), with an
environment that names a Hermes home, a store and a warehouse, so a module that read a setting
or a store at import would have something to find. Structlog's configuration, the logging
configuration, ``sys.excepthook``, the warnings filters, the environment, the working directory
and the signal handlers must be as they were, and the project's own code must have read no
environment variable, file or database. Only the definitions function
(``hermes_assets/definitions.py``) does any of that, when Dagster calls it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

#: each test starts a fresh interpreter
pytestmark = pytest.mark.slow


def _probe(package: str, root: Path, env_extra: dict[str, str] | None = None) -> dict:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root / "home"),
        "PYTHONPATH": os.pathsep.join([str(root), str(REPO)]),
        **(env_extra or {}),
    }
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.import_probe", package, str(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_every_module_changes_nothing_and_reads_nothing(tmp_path, fixture_copy):
    store = fixture_copy("small")
    env = {
        "HERMES_HOME": str(store.parent),
        "HERMES_STATE_DB": str(store),
        "DAGSTER_HOME": str(tmp_path / "dagster-home"),
        "HERMES_ASSETS_WAREHOUSE": str(tmp_path / "warehouse"),
    }
    (tmp_path / "dagster-home").mkdir()
    found = _probe("hermes_assets", REPO, env)
    modules = set(found["modules"])
    every = {
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for p in (REPO / "hermes_assets").rglob("*.py")
    }
    assert modules == every, every ^ modules
    assert found["changed"] == {}, found["changed"]
    assert found["reads"] == [], found["reads"]
    assert not (tmp_path / "warehouse").exists() and list((tmp_path / "dagster-home").iterdir()) == []


def test_the_probe_sees_a_module_that_changes_the_process_or_reads_at_import(tmp_path):
    """The probe can fail: a package whose modules do each forbidden thing at import is caught."""
    package = tmp_path / "noisy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hooks.py").write_text(
        textwrap.dedent(
            """
            import sys, warnings, logging
            sys.excepthook = lambda *a: None
            warnings.filterwarnings("ignore", message="x")
            logging.getLogger().setLevel(logging.DEBUG)
            """
        )
    )
    (package / "reads.py").write_text(
        textwrap.dedent(
            """
            import os
            from pathlib import Path
            START = os.environ.get("HERMES_ASSETS_START_DATE")
            TEXT = Path(__file__).read_text()
            """
        )
    )
    (package / "sets.py").write_text('import os, structlog\nos.environ["X_SET"] = "1"\nstructlog.configure()\n')
    found = _probe("noisy", tmp_path)
    assert set(found["changed"]) == {"excepthook", "warnings_filters", "loggers", "environ", "structlog_configured"}
    assert found["changed"]["environ"] == {"X_SET": "1"}
    kinds = {(r["read"], r["at"].split(":")[0]) for r in found["reads"]}
    assert kinds == {("environ", "reads.py"), ("open", "reads.py")}, found["reads"]


@pytest.mark.parametrize("module", ["hermes_assets.definitions", "hermes_assets.defs.partitions"])
def test_the_definitions_function_is_where_the_settings_are_read(tmp_path, module):
    """The other side: the definitions function reads the settings (a bad one stops it), so the
    purity above is not a module that never reads them at all."""
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        "from hermes_assets.definitions import defs\n"
        "try:\n    defs()\nexcept BaseException as exc:\n    print(type(exc).__name__, exc)\n"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "DAGSTER_HOME": str(tmp_path),
        "HERMES_ASSETS_START_DATE": "2026/11/01",
    }
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert "HERMES_ASSETS_START_DATE='2026/11/01' is not a date" in out.stdout + out.stderr
