"""Golden rows: the three datasets of each fixture store, as readable JSONL.

One row per line, keys sorted, JSON columns as nested JSON, timestamps as ISO
``...Z`` strings. ``tests/golden/regen.py`` writes them; ``test_golden.py``
recomputes them and compares.

Every golden projection uses the same fixed inputs: the store copy is projected
as if it lived at ``/home/hermes-user/.hermes/state.db`` (the path HypAware's
parity rows hash) on host ``hermes-host``, user home ``/home/hermes-user``, now = 1790000000.0, no git,
every session ``full`` (policy is tested on its own in ``test_policy.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa

from hermes_assets.lib.source.stores import Store
from tests.support.project import CANONICAL_STORE_PATH, JSON_COLUMNS, NOW_S, iso, project_store

#: the host every golden row names (the ``host`` column; a host that was not named joins no id)
GOLDEN_HOST = "hermes-host"
GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
FIXTURES = ("small", "oldest", "oldest_upgraded")
DATASETS = ("ai_gateway_messages_hermes", "hermes_messages", "hermes_sessions")


def golden_path(fixture: str, dataset: str) -> Path:
    return GOLDEN_DIR / f"{fixture}.{dataset}.jsonl"


def render_rows(table: pa.Table) -> list[str]:
    """One JSON text per row (the table is already in canonical order)."""
    lines = []
    for row in table.to_pylist():
        for name, value in row.items():
            if name in JSON_COLUMNS and isinstance(value, str):
                row[name] = json.loads(value)
            elif isinstance(value, dt.datetime):
                row[name] = iso(value)
            elif isinstance(value, bytes):  # a BLOB column (display_identity): its hex
                row[name] = value.hex()
        lines.append(json.dumps(row, sort_keys=True, ensure_ascii=False))
    return lines


def project_fixture(store_file: Path):
    """Project a private copy of ``store_file`` with the golden inputs."""
    with tempfile.TemporaryDirectory(prefix="hermes-golden-") as tmp:
        copy = Path(tmp) / "state.db"
        shutil.copyfile(store_file, copy)
        return project_store(copy, as_store=Store(CANONICAL_STORE_PATH, host=GOLDEN_HOST), now_s=NOW_S)


def render_fixture(store_file: Path) -> dict[str, list[str]]:
    """dataset name -> golden lines for one fixture store."""
    proj = project_fixture(store_file)
    return {
        "ai_gateway_messages_hermes": render_rows(proj.gateway),
        "hermes_messages": render_rows(proj.messages),
        "hermes_sessions": render_rows(proj.sessions),
    }


def read_golden(fixture: str, dataset: str) -> list[str]:
    return golden_path(fixture, dataset).read_text(encoding="utf-8").splitlines()


def write_golden(fixture: str, dataset: str, lines: list[str]) -> Path:
    path = golden_path(fixture, dataset)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
