"""No staging is left behind.

A failed write keeps its run's staged days (a re-execution from failure writes
them); a run killed mid-way leaves its own. Both are removed as soon as no run
needs them: when a later run of the same day succeeds, or when a run starts
staging and finds folders of runs no longer in progress. Real runs, real
instance (on disk); the folders of runs that may still write (in progress, a
retry coming) are kept.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
import pytest

from hermes_assets.defs.capture_assets import needs_staging
from hermes_assets.lib.basics.schemas import MESSAGES
from hermes_assets.lib.warehouse import staging
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.defs.harness import DATASETS, RANGE_END, RANGE_START, SMALL_DAYS, part_files

#: slow: Dagster runs, and a run killed in a subprocess
pytestmark = pytest.mark.slow

FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]
TAGS = {RANGE_START: FIRST, RANGE_END: LAST}


def _staging_root(warehouse) -> Path:
    """This host's staging folder: ``.staging/host=<label>/`` (each host sweeps only its own)."""
    return Path(Warehouse(str(warehouse)).staging_root)


def _staged(warehouse) -> set[str]:
    root = _staging_root(warehouse)
    return {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()


def test_a_failed_runs_staging_goes_when_a_later_run_of_its_days_succeeds(small, tmp_path):
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        small.warehouse.mkdir(parents=True)
        (small.warehouse / MESSAGES).write_text("a file where the dataset's folder should be\n")
        failed = small.materialize(FIRST, LAST, instance=instance, raise_on_error=False)
        assert not failed.success
        assert _staged(small.warehouse) == {failed.run_id}  # kept for a re-execution from failure
        (small.warehouse / MESSAGES).unlink()  # the cause goes; the sensor requests the days again
        again = small.materialize(FIRST, LAST, instance=instance)
        assert again.success
        assert _staged(small.warehouse) == set(), "the failed run's staged days outlived a later successful run"
        captured = [p for p in part_files(small.warehouse) if p.split("/")[0] in DATASETS]
        assert len(captured) == 3 * len(SMALL_DAYS)


def test_a_run_that_starts_removes_staging_of_runs_no_longer_in_progress(small, tmp_path):
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        job = small.defs().resolve_implicit_global_asset_job_def()
        root = _staging_root(small.warehouse)
        left = {}
        for name, status, tags in (
            ("killed", dg.DagsterRunStatus.FAILURE, {}),  # run monitoring marked it failed
            ("canceled", dg.DagsterRunStatus.CANCELED, {}),
            ("running", dg.DagsterRunStatus.STARTED, {}),  # another run, still staging
            ("retry_coming", dg.DagsterRunStatus.FAILURE, {"dagster/will_retry": "true"}),
        ):
            run = instance.create_run_for_job(job, tags={**TAGS, **tags})
            _set_status(instance, run, status)
            left[name] = run.run_id
            (root / run.run_id).mkdir(parents=True)
            (root / run.run_id / f"hermes_messages.{FIRST}.0.arrow").write_bytes(b"staged")
        (root / "unknown-young").mkdir()  # a run of another instance, say, writing to this warehouse
        (root / "unknown-old").mkdir()
        old = time.time() - staging.STALE_STAGING_S - 60
        os.utime(root / "unknown-old", (old, old))
        assert needs_staging(instance, left["killed"]) is False
        assert needs_staging(instance, left["running"]) is True
        assert needs_staging(instance, left["retry_coming"]) is True
        assert needs_staging(instance, "unknown-young") is None

        # a new capture run of other days starts: while staging it removes what no run needs
        done = small.materialize(LAST, instance=instance)
        assert done.success
        assert _staged(small.warehouse) == {left["running"], left["retry_coming"], "unknown-young"}


def _set_status(instance, run, status) -> None:
    """Put a created run in ``status`` the way its run worker and the daemon would (events)."""
    events = {
        dg.DagsterRunStatus.STARTED: [dg.DagsterEventType.RUN_START],
        dg.DagsterRunStatus.FAILURE: [dg.DagsterEventType.RUN_START, dg.DagsterEventType.RUN_FAILURE],
        dg.DagsterRunStatus.CANCELED: [dg.DagsterEventType.RUN_CANCELING, dg.DagsterEventType.RUN_CANCELED],
    }[status]
    for event_type in events:
        instance.report_dagster_event(dg.DagsterEvent(event_type.value, job_name=run.job_name), run_id=run.run_id)
    assert instance.get_run_by_id(run.run_id).status == status
