"""A process that loaded the definitions takes Arrow's memory from the system allocator, and so do
the capture workers it starts; an allocator the user chose is followed
(``hermes_assets/defs/arrow_memory.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import REPO

#: each test starts a fresh interpreter
pytestmark = pytest.mark.slow


def backend(state: object, day: str) -> str:
    """The allocator of the process that takes ``day`` (a capture worker's, or the caller's)."""
    return pa.default_memory_pool().backend_name


def _allocators(tmp_path: Path, store: Path, chosen: str | None = None) -> dict:
    """What a fresh interpreter that loaded the definitions allocates from: itself, a capture
    worker and the caller's own share of the days, and the variable its children inherit."""
    code = f"""
        import json, os
        from pathlib import Path
        import pyarrow as pa
        from tests.defs.harness import new_capture

        cap = new_capture(Path({str(tmp_path / "cap")!r}))
        os.environ.update(cap.environ(), HERMES_STATE_DB={str(store)!r})
        from hermes_assets.definitions import defs
        from hermes_assets.lib.capture import pool
        from tests.defs.test_arrow_memory import backend

        defs()
        days = list(pool.map_days(backend, None, ["a", "b", "c"], workers=2))
        print(json.dumps({{"run": pa.default_memory_pool().backend_name, "days": days,
                          "variable": os.environ.get("ARROW_DEFAULT_MEMORY_POOL")}}))
        """
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env.update(
        PYTHONPATH=str(REPO), HOME=str(tmp_path / "home"), **({"ARROW_DEFAULT_MEMORY_POOL": chosen} if chosen else {})
    )
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_run_and_its_capture_workers_allocate_from_the_system_allocator(tmp_path, fixture_copy):
    """Days "a" and "b" go to the worker process, "c" to the caller (pool.py)."""
    found = _allocators(tmp_path, fixture_copy("small"))
    assert found == {"run": "system", "days": ["system", "system", "system"], "variable": "system"}


def test_an_allocator_the_user_chose_is_followed(tmp_path, fixture_copy):
    found = _allocators(tmp_path, fixture_copy("small"), chosen="jemalloc")
    assert found == {"run": "jemalloc", "days": ["jemalloc", "jemalloc", "jemalloc"], "variable": "jemalloc"}
