"""The core's folders follow the data's path, and nothing imports against it.

``hermes_assets/lib`` holds one package of basics (errors, ids, logs, schemas,
timestamps) and one package per step: a store read read-only, what changed, the plan, the projection, the
warehouse, the redaction (its redactor, and its pass over the warehouse's
stored files), then the capture run (read, redact, project, write) and the
analytics on top. A module may import
the basics, its own package and the packages before it, never one after it:
the reader never depends on the projection, the projection never on the
warehouse. The Dagster shell (``defs/``) sits above all of them, and no module
name there repeats one of ``lib/``, so an import never needs an alias.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "hermes_assets" / "lib"
DEFS = REPO / "hermes_assets" / "defs"

#: the data's path, in order; a package may import those at or below its own rank
RANKS = {
    "": 0,  # lib/ itself (its __init__ only)
    "basics": 0,  # errors, ids, logs, schemas, timestamps: what every step uses
    "storage": 1,  # where files live (local, object stores, locks, conditional writes): under the data's path
    "hosts": 2,  # who writes: a host's identity, its label, its claims in the warehouse
    "source": 3,
    "changes": 4,
    "plan": 5,
    "projection": 6,
    "warehouse": 7,
    "redaction": 8,
    "capture": 9,
    "analytics": 9,
}


def _package(module: str) -> str:
    """``hermes_assets.lib.plan.policy`` -> ``plan``; ``hermes_assets.lib.basics.ids`` -> ``basics``."""
    parts = module.split(".")[2:]
    return parts[0] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (REPO / relative).with_suffix(".py").exists() or (REPO / relative).is_dir()


def test_every_lib_package_has_a_rank():
    packages = {p.name for p in LIB.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(RANKS) - {""}


def test_the_core_stays_small_at_its_root():
    entries = [p.name for p in LIB.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 12, sorted(entries)


def _against(path: Path, own: str) -> list[str]:
    """The imports of one file that run against the data's path (``own``: the file's package)."""
    against, shell_lines = [], set()
    for line, name in _imports(path):
        if (
            name.split(".")[:2] in (["hermes_assets", "defs"], ["hermes_assets", "definitions"])
            and line not in shell_lines
        ):
            shell_lines.add(line)
            against.append(f"{path.name}:{line} imports the Dagster shell ({name})")
        if not name.startswith("hermes_assets.lib.") or not _is_module(name):
            continue
        other = _package(name)
        if other != own and RANKS[other] >= RANKS[own]:
            against.append(f"{path.name}:{line} imports {name} ({other or 'basics'} after {own or 'basics'})")
    return against


def test_no_import_runs_against_the_data_path():
    against = [v for path in sorted(LIB.rglob("*.py")) for v in _against(path, _package(_module(path)))]
    assert against == []


def test_no_module_name_is_shared_by_lib_and_defs():
    lib_names = {p.stem for p in LIB.rglob("*.py") if p.name != "__init__.py"} | {
        p.name for p in LIB.iterdir() if p.is_dir()
    }
    defs_names = {p.stem for p in DEFS.rglob("*.py") if p.name != "__init__.py"}
    assert lib_names & defs_names == set()


def test_an_import_against_the_path_is_found(tmp_path):
    reader = tmp_path / "state_db.py"
    reader.write_text(
        "from hermes_assets.lib.basics import errors\n"
        "from hermes_assets.lib.source import prompts\n"
        "from hermes_assets.lib.projection import copies\n"
        "from hermes_assets.defs import settings\n"
    )
    found = _against(reader, "source")
    assert len(found) == 2 and "projection after source" in found[0] and "Dagster shell" in found[1]
    assert _against(reader, "projection") == [found[1]]  # the projection may read the source and itself
