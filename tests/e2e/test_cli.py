"""``dagster asset materialize`` as the README documents it.

Subprocesses from the repo root, a temp DAGSTER_HOME holding a copy of the
repo's dagster.yaml, and a copy of the small fixture store as the Hermes store.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from tests.defs.harness import (
    ANALYTICS,
    DATASETS,
    EXPOSURES,
    RANGE_END,
    RANGE_START,
    SIGHTINGS,
    SMALL_DAYS,
    SMALL_MESSAGES,
    SMALL_SESSIONS,
    day_path,
    days_on_disk,
    read_all,
    store_sessions,
)
from tests.e2e.conftest import REPO, dagster_bin

pytestmark = pytest.mark.e2e

DAY = "2026-06-07"
SESSIONS, MESSAGES = "hermes_sessions", "hermes_messages"


def materialize(env: dict, *partition_args: str) -> str:
    proc = subprocess.run(
        [dagster_bin(), "asset", "materialize", "-m", "hermes_assets.definitions", "--select", "*", *partition_args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def runs(installation) -> list:
    instance = dg.DagsterInstance.from_config(str(installation.dagster_home))
    try:
        return list(reversed(instance.get_runs()))  # oldest first
    finally:
        instance.dispose()


def rows(installation, dataset: str) -> int:
    return sum(
        pq.read_metadata(day_path(installation.warehouse, dataset, d)).num_rows
        for d in days_on_disk(installation.warehouse, dataset)
    )


def skill_days(db: Path) -> set[str]:
    """The days (of their session's start) whose assistant messages call a skill by its name, straight
    from a (copied) store: ``skill_view`` or ``skill_manage`` with a ``name`` argument."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT strftime('%Y-%m-%d', s.started_at, 'unixepoch'), m.tool_calls FROM messages m "
            "JOIN sessions s ON s.id = m.session_id WHERE m.role = 'assistant' AND m.tool_calls LIKE '%skill_%'"
        ).fetchall()
    finally:
        conn.close()
    days = set()
    for day, text in rows:
        for call in json.loads(text):
            function = call.get("function") or {}
            arguments = json.loads(function.get("arguments") or "{}")
            if function.get("name") in ("skill_view", "skill_manage") and str(arguments.get("name", "")).strip():
                days.add(day)
    return days


def test_materialize_one_partition(installation, dagster_env):
    materialize(dagster_env, "--partition", DAY)
    (run,) = runs(installation)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert run.tags.get("dagster/partition") == DAY
    for dataset in DATASETS:
        assert days_on_disk(installation.warehouse, dataset) == [DAY], dataset
    on_day = {sid for sid, s in store_sessions(installation.store).items() if s["day"] == DAY}
    assert {r["id"] for r in read_all(installation.warehouse, SESSIONS)} == on_day
    assert {r["session_id"] for r in read_all(installation.warehouse, MESSAGES)} <= on_day
    assert rows(installation, "ai_gateway_messages_hermes") > 0


def test_materialize_a_range_in_one_run_and_rerun_identically(installation, dagster_env):
    out = materialize(dagster_env, "--partition-range", f"{SMALL_DAYS[0]}...{SMALL_DAYS[-1]}")
    assert out.count('"hermes.run.done"') == 1, "a partition range must be ONE run"
    (run,) = runs(installation)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert (run.tags.get(RANGE_START), run.tags.get(RANGE_END)) == (SMALL_DAYS[0], SMALL_DAYS[-1])
    for dataset in DATASETS:
        assert days_on_disk(installation.warehouse, dataset) == SMALL_DAYS, dataset
    assert rows(installation, SESSIONS) == SMALL_SESSIONS
    assert rows(installation, MESSAGES) == SMALL_MESSAGES
    first = installation.files()
    # and the analytics layer, built in the same run: the per-session ones every day (each has
    # sessions), tools on the 13 days with a tool call, skills on the days a skill was called; the
    # sightings of the small store's secrets, and the exposures computed from them (one file)
    files = Counter(p.split("/")[0] for p in first)
    assert {ds: files[ds] for ds in DATASETS} == dict.fromkeys(DATASETS, len(SMALL_DAYS))
    every_day = ("hermes_daily_usage", "hermes_daily_channels", "hermes_activity", "hermes_top_sessions")
    assert {ds: files[ds] for ds in every_day} == dict.fromkeys(every_day, len(SMALL_DAYS))
    assert (files["hermes_daily_tools"], files[EXPOSURES]) == (13, 1)
    assert files["hermes_daily_skills"] == len(skill_days(installation.store)) > 0
    assert files[SIGHTINGS] and set(files) == {*DATASETS, *ANALYTICS, EXPOSURES, SIGHTINGS}

    # the same range again: one more run, byte-identical files (no duplicates)
    materialize(dagster_env, "--partition-range", f"{SMALL_DAYS[0]}...{SMALL_DAYS[-1]}")
    assert len(runs(installation)) == 2
    assert installation.files() == first
