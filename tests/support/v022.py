"""The Hermes v0.22.2 fixtures and their oracles (``tests/fixtures/hermes_v022``, ``tests/fixtures/upgrade``).

Each store sits beside ``oracle/``: Hermes's own reading of it, exported by
``tests/fixtures/hermes_v022/oracle.py`` in Hermes's venv (``get_session``,
``export_session(include_inactive=True)``, the display view
``get_messages(include_compacted=True)`` and its counts). Tests never import that
Hermes: they read these files.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from hermes_assets.lib.basics import schemas
from tests.defs.harness import Capture, new_capture
from tests.support.environ import use_environment
from tests.support.skips import unavailable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
V022 = FIXTURES / "hermes_v022"
#: every asset of a capture: the three datasets and the analytics built on them
ALL_ASSETS = (*schemas.DATASETS, *schemas.ANALYTICS)


def store(folder: Path = V022) -> Path:
    path = folder / "state.db"
    if not path.is_file():
        unavailable(f"{path} is missing (its make_fixture script writes it)")
    return path


def oracle(name: str, folder: Path = V022):
    """One oracle file: ``get_session``, ``export_session``, ``display`` (gzipped JSON) or ``counts``."""
    path = folder / "oracle" / (f"{name}.json" if name == "counts" else f"{name}.json.gz")
    if name == "counts":
        return json.loads(path.read_text(encoding="utf-8"))
    return json.loads(gzip.decompress(path.read_bytes()))


def manifest(folder: Path = V022) -> dict:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def days(folder: Path = V022) -> list[str]:
    return sorted(oracle("counts", folder)["by_day"])


def capture_fixture(root: Path, folder: Path = V022) -> Capture:
    """A private copy of the fixture store captured by ONE real Dagster run over all its days,
    every asset (the analytics included)."""
    cap = new_capture(root)
    shutil.copyfile(store(folder), cap.store)
    span = days(folder)
    with pytest.MonkeyPatch.context() as mp, dg.DagsterInstance.ephemeral() as instance:
        use_environment(mp, {**cap.environ(), "HERMES_ASSETS_WORKERS": "1"})
        result = cap.materialize(span[0], span[-1], instance=instance, select=ALL_ASSETS)
    assert result.success
    return cap
