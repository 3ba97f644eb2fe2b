"""Helpers for the Dagster-level and end-to-end tests (tests/defs, tests/e2e).

A :class:`Capture` is one isolated installation: a Hermes home (with or
without a store), a warehouse and a machine-local policy list path, all in
the test's temp dir, wired through the environment variables of SPEC §10 the
way a user configures the project. Definitions are loaded fresh from
``hermes_assets.definitions`` after the environment is set, so resources see
it exactly as ``dagster dev`` would.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.host_layout import PART_FILE
from tests.conftest import copy_fixture
from tests.support.definitions import load_definitions
from tests.support.hosts import HOST_DIR, HOST_FILES

DATASETS = (GATEWAY, SESSIONS, MESSAGES)
#: the analytics layer built on them (SPEC §11)
ANALYTICS = tuple(schemas.ANALYTICS)
#: what to rotate: one row per secret seen, over every day (not partitioned; group hermes_analytics)
EXPOSURES = "hermes_secret_exposures"
#: where each secret was seen: written by the capture beside the three datasets, per day and host
SIGHTINGS = "hermes_secret_sightings"
#: the UTC days the small fixture covers (59 sessions, 1,142 messages)
SMALL_DAYS = [f"2026-06-{d:02d}" for d in range(1, 15)]
SMALL_SESSIONS = 59
SMALL_MESSAGES = 1142
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


# --------------------------------------------------------------------------
# fixture stores
# --------------------------------------------------------------------------


def copy_small(dest_dir: Path) -> Path:
    """Copy the small fixture store to ``dest_dir/state.db`` (never open it in place)."""
    return copy_fixture("small", dest_dir)


def store_sessions(db: Path) -> dict[str, dict]:
    """sid -> {source, cwd, parent, day} straight from a (copied) store."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT id, source, cwd, parent_session_id, strftime('%Y-%m-%d', started_at, 'unixepoch') FROM sessions"
        ).fetchall()
    finally:
        conn.close()
    return {str(r[0]): {"source": r[1], "cwd": r[2], "parent": r[3], "day": r[4]} for r in rows}


def with_descendants(sessions: dict[str, dict], roots: set[str]) -> set[str]:
    """``roots`` plus every session whose ``parent_session_id`` chain reaches one of them."""
    out = set(roots)
    changed = True
    while changed:
        changed = False
        for sid, s in sessions.items():
            if sid not in out and s["parent"] in out:
                out.add(sid)
                changed = True
    return out


def channel_scope(source: str, home: str | None = None) -> str:
    """``<user home>/.hermes/channels/<source>`` (the projection's home is the process HOME)."""
    return f"{(home or os.path.expanduser('~')).rstrip('/')}/.hermes/channels/{source}"


# --------------------------------------------------------------------------
# the warehouse on disk
# --------------------------------------------------------------------------


def part_files(warehouse: Path) -> dict[str, str]:
    """relative path -> sha256 of every Parquet file under the warehouse."""
    return {
        str(p.relative_to(warehouse)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(warehouse.rglob("*.parquet"))
    }


def day_path(warehouse: Path, dataset: str, day: str) -> Path:
    """A day's file of this host (a captured dataset), or the day's file (a derived one)."""
    if dataset in DATASETS:
        return warehouse / dataset / f"day={day}" / HOST_DIR / PART_FILE
    return warehouse / dataset / f"day={day}" / PART_FILE


def days_on_disk(warehouse: Path, dataset: str) -> list[str]:
    base = warehouse / dataset
    if not base.is_dir():
        return []
    if dataset in DATASETS:
        return sorted({p.parent.parent.name[4:] for p in base.glob(HOST_FILES)})
    return sorted(p.parent.name[4:] for p in base.glob(f"day=*/{PART_FILE}"))


def read_day(warehouse: Path, dataset: str, day: str) -> pa.Table | None:
    path = day_path(warehouse, dataset, day)
    return pq.read_table(path, schema=schemas.DATASETS[dataset].schema) if path.exists() else None


def read_all(warehouse: Path, dataset: str) -> list[dict]:
    """Every row of a dataset (all days) as dicts; JSON columns parsed, ``_day`` added."""
    json_cols = {f.name for f in schemas.DATASETS[dataset].schema if f.type == schemas.JSON}
    out = []
    for day in days_on_disk(warehouse, dataset):
        for row in read_day(warehouse, dataset, day).to_pylist():
            for name in json_cols:
                if isinstance(row.get(name), str):
                    row[name] = json.loads(row[name])
            row["_day"] = day
            out.append(row)
    return out


def raw_sid(row: dict, dataset: str) -> str:
    """The Hermes sid a row belongs to, in any of the three datasets (default store)."""
    if dataset == GATEWAY:
        return row["attributes"]["gateway"]["native_id"]
    return row["id"] if dataset == SESSIONS else row["session_id"]


def sids_in(warehouse: Path, dataset: str) -> set[str]:
    return {raw_sid(r, dataset) for r in read_all(warehouse, dataset)}


def source_deleted(row: dict, dataset: str) -> bool:
    if dataset == GATEWAY:
        return bool(row["attributes"].get("hermes", {}).get("source_deleted"))
    return bool(row["source_deleted"])


def row_key(row: dict, dataset: str):
    """A row's key (SPEC §6): part_id; (store, session_id, id, generation); (store, id, generation)."""
    if dataset == GATEWAY:
        return row["part_id"]
    if dataset == MESSAGES:
        return row["store"], row["session_id"], row["id"], row["generation"]
    return row["store"], row["id"], row["generation"]


# --------------------------------------------------------------------------
# run results
# --------------------------------------------------------------------------


def md_values(metadata) -> dict:
    return {k: (v.value if isinstance(v, dg.MetadataValue) else v) for k, v in metadata.items()}


def partition_metadata(result) -> dict[tuple[str, str], dict]:
    """(asset name, partition) -> metadata of that partition's materialization."""
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        key = (mat.asset_key.to_user_string(), mat.partition)
        assert key not in out, f"two materializations of {key} in one run"
        out[key] = md_values(mat.metadata)
    return out


def step_output_metadata(result, step_key: str) -> list[dict]:
    """Metadata of each output a step yielded (ops of the graph asset: ``<asset>.<op>``)."""
    return [
        md_values(e.event_specific_data.metadata)
        for e in result.all_events
        if e.event_type_value == "STEP_OUTPUT" and e.step_key == step_key
    ]


def check_results(result) -> dict[tuple[str, str], object]:
    """The run's check evaluations by (asset, check); a check evaluated per day: its last day's."""
    return {(c.asset_key.to_user_string(), c.check_name): c for c in result.get_asset_check_evaluations()}


def day_check_results(result) -> dict[tuple[str, str, str | None], object]:
    """The run's check evaluations by (asset, check, partition); each key once."""
    found: dict[tuple[str, str, str | None], object] = {}
    for c in result.get_asset_check_evaluations():
        key = (c.asset_key.to_user_string(), c.check_name, c.partition)
        assert key not in found, f"{key} evaluated twice in one run"
        found[key] = c
    return found


# --------------------------------------------------------------------------
# one isolated installation
# --------------------------------------------------------------------------


@dataclass
class Capture:
    root: Path
    home: Path  # HERMES_HOME
    warehouse: Path  # HERMES_ASSETS_WAREHOUSE
    policy_list: Path  # HERMES_ASSETS_POLICY_LIST (absent until a test writes it)
    dagster_home: Path

    @property
    def store(self) -> Path:
        return self.home / "state.db"

    def environ(self) -> dict[str, str]:
        return {
            "HERMES_HOME": str(self.home),
            "HERMES_ASSETS_WAREHOUSE": str(self.warehouse),
            "HERMES_ASSETS_POLICY_LIST": str(self.policy_list),
            "DAGSTER_HOME": str(self.dagster_home),
        }

    def write_policy(self, entries: list[tuple[str, str]]) -> None:
        self.policy_list.parent.mkdir(parents=True, exist_ok=True)
        doc = {"version": 2, "entries": [{"dir": d, "class": c} for d, c in entries]}
        self.policy_list.write_text(json.dumps(doc), encoding="utf-8")

    def defs(self, **resource_overrides) -> dg.Definitions:
        """The project's definitions, loaded now (resources read the environment).

        A ``warehouse`` override also moves the ``hermes_datasets`` IO manager (which
        loads the datasets back) to that warehouse, unless it is overridden too.
        """
        from hermes_assets.defs.io_manager import DATASETS_IO_MANAGER, datasets_io_manager

        defs = load_definitions()
        if not resource_overrides:
            return defs
        if "warehouse" in resource_overrides and DATASETS_IO_MANAGER not in resource_overrides:
            resource_overrides[DATASETS_IO_MANAGER] = datasets_io_manager(resource_overrides["warehouse"])
        return dg.Definitions(
            assets=defs.assets,
            asset_checks=defs.asset_checks,
            jobs=defs.jobs,
            executor=defs.executor,
            resources={**defs.resources, **resource_overrides},
        )

    def materialize(
        self, start: str, end: str | None = None, *, instance=None, defs=None, raise_on_error=True, select=None
    ):
        """One run of the three captured datasets (or of ``select``, asset names) and
        their checks over the days ``start..end``, in process."""
        defs = defs or self.defs()
        job = defs.resolve_implicit_global_asset_job_def()
        if instance is None:
            with dg.DagsterInstance.ephemeral() as own:
                return self.materialize(
                    start, end, instance=own, defs=defs, raise_on_error=raise_on_error, select=select
                )
        return job.execute_in_process(
            instance=instance,
            tags={RANGE_START: start, RANGE_END: end or start},
            raise_on_error=raise_on_error,
            asset_selection=[dg.AssetKey(name) for name in (select or DATASETS)],
        )

    def files(self) -> dict[str, str]:
        return part_files(self.warehouse)


def new_capture(root: Path) -> Capture:
    cap = Capture(
        root=root,
        home=root / "hermes-home",
        warehouse=root / "warehouse",
        policy_list=root / "hyp" / "usage-policy" / "local-only.json",
        dagster_home=root / "dagster-home",
    )
    cap.home.mkdir(parents=True, exist_ok=True)
    cap.dagster_home.mkdir(parents=True, exist_ok=True)
    return cap
