"""Private by default (SPEC §2, D16): folders 0700, files 0600, whatever the umask.

Transcripts are as private as Hermes's own home. Every folder the project
creates and every file it writes, in the warehouse (datasets, days, part
files, ``.lock``, ``.read_at``), in staging while a run holds its days there,
and in the spool of a URI warehouse, is ``0700``/``0600`` under umask ``022``
and ``000``; ``HERMES_ASSETS_FILE_MODE=group`` gives ``0750``/``0640`` and keeps
a setgid bit on the root. Runs requested by the sensor and the purge job are
covered here, in process; ``dagster asset materialize`` in ``tests/e2e``.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from hermes_assets.defs import capture_assets as capture_defs
from hermes_assets.lib.capture import steps
from hermes_assets.lib.plan import capture_plan
from hermes_assets.lib.plan.policy import PolicyResolver
from hermes_assets.lib.projection.context import ProjectionContext
from hermes_assets.lib.source.stores import discover_stores
from hermes_assets.lib.storage.local_files import FileModes
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.defs.harness import SMALL_DAYS, step_output_metadata
from tests.sensor.harness import SensorDriver
from tests.support.hosts import HOST_DIR
from tests.support.modes import GROUP, PRIVATE, names, open_up, umask, wrong_modes
from tests.support.skips import unavailable

UMASKS = pytest.mark.parametrize("mask", [0o022, 0o000], ids=["umask022", "umask000"])
FIRST, THIRD, LAST = SMALL_DAYS[0], SMALL_DAYS[2], SMALL_DAYS[-1]
#: every kind of thing a capture leaves in a POSIX warehouse
WAREHOUSE_NAMES = {".lock", ".read_at", "part-0.parquet", ".staging", "hermes_sessions", "day=" + FIRST, HOST_DIR}


@pytest.fixture(autouse=True)
def _days_in_this_process(monkeypatch):
    monkeypatch.setenv("HERMES_ASSETS_WORKERS", "1")


@pytest.mark.slow
@UMASKS
def test_runs_the_sensor_requests_write_private_files(small, instance, mask):
    tick = SensorDriver(small.home).tick()
    assert len(tick.run_requests) == len(SMALL_DAYS)
    job = small.defs().resolve_implicit_global_asset_job_def()
    with umask(mask):
        for request in sorted(tick.run_requests, key=lambda r: r.partition_key)[:3]:
            result = job.execute_in_process(partition_key=request.partition_key, tags=request.tags, instance=instance)
            assert result.success
    assert names(small.warehouse) >= WAREHOUSE_NAMES
    assert wrong_modes(small.warehouse) == {}


@UMASKS
@pytest.mark.parametrize("mode", ["private", "group"])
def test_staged_days_are_private_while_they_exist(small, tmp_path, mask, mode):
    modes = FileModes.named(mode)
    wh = Warehouse(str(small.warehouse), modes=modes)
    with umask(mask):
        plan = capture_plan.plan_capture(
            discover_stores(None, str(small.home)), SMALL_DAYS[:3], user_home=str(tmp_path)
        )
        plan = capture_plan.apply_usage_policy(plan, PolicyResolver(str(small.policy_list)))
        staging = capture_defs.staging_dir(wh, "a-run", dg.DagsterInstance.ephemeral())
        run = steps.project_rows(
            plan, ProjectionContext(user_home=str(tmp_path), now_s=plan.read_at), wh, staging=staging
        )
        staged = list(Path(staging).iterdir())  # new days: their partition files, encoded once
        assert len(staged) == 3 * 3 and all(p.suffix == ".parquet" for p in staged)
        assert wrong_modes(small.warehouse, (modes.folder, modes.file)) == {}
        steps.write_partitions(run, wh)
    assert not Path(staging).exists()
    assert wrong_modes(small.warehouse, (modes.folder, modes.file)) == {}


@pytest.mark.slow
@UMASKS
def test_group_mode_gives_0750_0640_and_keeps_the_roots_setgid_bit(small, instance, monkeypatch, mask):
    """A team's warehouse: the root is a setgid folder of the team's group."""
    monkeypatch.setenv("HERMES_ASSETS_FILE_MODE", "group")
    small.warehouse.mkdir()
    os.chmod(small.warehouse, 0o2775)
    with umask(mask):
        assert small.materialize(FIRST, THIRD, instance=instance).success
    assert stat.S_IMODE(small.warehouse.stat().st_mode) == 0o2750
    assert names(small.warehouse) >= WAREHOUSE_NAMES
    assert wrong_modes(small.warehouse, GROUP, setgid_ok=True) == {}


@pytest.mark.slow
@UMASKS
def test_a_rerun_closes_what_an_older_version_left_open(small, instance, mask):
    assert small.materialize(FIRST, THIRD, instance=instance).success
    files = small.files()
    open_up(small.warehouse)  # 0755 / 0644, as under umask 022 before D16
    with umask(mask):
        assert small.materialize(FIRST, THIRD, instance=instance).success
    assert small.files() == files  # no file changed: the modes are fixed all the same
    assert wrong_modes(small.warehouse) == {}


@pytest.mark.slow
@UMASKS
def test_a_file_uri_warehouse_and_its_default_spool_are_private(small, instance, tmp_path, monkeypatch, mask):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # the default spool: <tmp>/hermes_assets-spool-<uid>
    warehouse = tmp_path / "uri-warehouse"
    monkeypatch.setenv("HERMES_ASSETS_WAREHOUSE", warehouse.as_uri())
    with umask(mask):
        assert small.materialize(FIRST, THIRD, instance=instance).success
    spool = temp / f"hermes_assets-spool-{os.getuid()}"
    assert {"part-0.parquet", ".read_at", "day=" + FIRST} <= names(warehouse)
    assert {".lock", ".staging", "locks"} <= names(spool)
    assert wrong_modes(warehouse) == {}
    assert wrong_modes(spool) == {}


@pytest.mark.slow
def test_a_default_spool_left_open_is_closed_and_one_of_another_user_refused(small, instance, tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    spool = temp / f"hermes_assets-spool-{os.getuid()}"
    spool.mkdir(parents=True)
    os.chmod(spool, 0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("HERMES_ASSETS_WAREHOUSE", (tmp_path / "uri-warehouse").as_uri())
    assert small.materialize(FIRST, instance=instance).success
    assert wrong_modes(spool) == {}

    try:
        os.chown(spool, os.getuid() + 4242, -1)  # someone else's folder, created first in a shared /tmp
    except PermissionError:
        unavailable("changing a folder's owner needs root")
    result = small.materialize(FIRST, instance=instance, raise_on_error=False)
    assert not result.success
    (failure,) = [e.event_specific_data.error for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    while failure.cause is not None and failure.cls_name.startswith("Dagster"):
        failure = failure.cause
    assert str(spool) in failure.message and "HERMES_ASSETS_SPOOL" in failure.message


@pytest.mark.slow
@UMASKS
def test_the_purge_job_makes_every_file_private(small, instance, mask):
    """The purge rewrites every day, and sets the modes of everything it keeps: days it
    did not change, the root, and what a killed run left staged."""
    assert small.materialize(FIRST, LAST, instance=instance).success
    leftover = small.warehouse / ".staging" / HOST_DIR / "a-run-killed-long-ago"
    leftover.mkdir()
    (leftover / "hermes_sessions.2026-06-01.0.arrow.tmp").write_bytes(b"half a file")
    open_up(small.warehouse)
    job = small.defs().resolve_job_def("purge_job")
    with umask(mask):
        result = job.execute_in_process(
            run_config={"ops": {"purge_scope": {"config": {"session_id": "20260607_124243_712ecb"}}}}, instance=instance
        )
    assert result.success
    (md,) = step_output_metadata(result, "purge_scope")
    assert md["days_rewritten"] == {"ai_gateway_messages_hermes": 1, "hermes_sessions": 1, "hermes_messages": 1}
    assert wrong_modes(small.warehouse, PRIVATE) == {}
