"""A process that loaded the definitions freezes the objects it imported at its first load, so
Python's full collections leave them while it runs, and its objects at its exit, so its last
collection leaves them (``hermes_assets/defs/process_exit.py``); one that did not is unchanged."""

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


def _at_exit(tmp_path: Path, store: Path, load: str) -> dict:
    """What a fresh interpreter that runs ``load`` sees at its exit, after every other exit step
    (its probe is registered first, so it runs last): the objects frozen, how many times
    :func:`gc.freeze` was called, and the objects frozen when ``load`` had run."""
    code = f"""
        import atexit, gc, json, os
        from pathlib import Path
        from tests.defs.harness import new_capture

        freezes = []
        python_freeze = gc.freeze

        def freeze():
            freezes.append(1)
            python_freeze()

        def probe():
            print(json.dumps({{"frozen": gc.get_freeze_count(), "freezes": len(freezes), "loaded": loaded}}))

        gc.freeze = freeze
        atexit.register(probe)
        cap = new_capture(Path({str(tmp_path / "cap")!r}))
        os.environ.update(cap.environ(), HERMES_STATE_DB={str(store)!r})
        {load}
        loaded = gc.get_freeze_count()
        """
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_process_that_loaded_the_definitions_freezes_its_objects_at_the_first_load_and_at_exit(
    tmp_path, fixture_copy
):
    """Loaded twice (a code server's reload): one freeze at the first load (what it had imported),
    none at the second, one exit step, and the objects frozen when it ran."""
    found = _at_exit(
        tmp_path,
        fixture_copy("small"),
        "from hermes_assets.definitions import defs\n        defs(); defs()",
    )
    assert found["freezes"] == 2
    assert found["loaded"] > 10_000  # every imported module's objects, not a handful
    assert found["frozen"] > found["loaded"]


def test_a_process_that_only_imported_the_project_keeps_pythons_exit(tmp_path, fixture_copy):
    """The probe can fail: importing the definitions (without loading them) freezes nothing."""
    found = _at_exit(tmp_path, fixture_copy("small"), "import hermes_assets.definitions")
    assert found == {"frozen": 0, "freezes": 0, "loaded": 0}
