"""Re-execute from failure: staged days survive a failed write step.

The capture graph hands the write op a small typed value (the staged days'
paths), kept by the run's IO manager. When the write fails (here: a dataset's
folder is in the way), the staged days stay on disk, so Dagster's "re-execute
from failure" runs the write op alone, from the first run's staged days, and the
files come out exactly as a clean run writes them.
"""

from __future__ import annotations

import dagster as dg
import pytest

from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib.basics.schemas import MESSAGES, SIGHTINGS
from hermes_assets.lib.warehouse import staging
from tests.defs.harness import DATASETS, RANGE_END, RANGE_START, SMALL_DAYS, part_files
from tests.support.definitions import load_definitions as defs
from tests.support.hosts import HOST_DIR

#: slow: Dagster runs, re-executed from failure
pytestmark = pytest.mark.slow

FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]
TAGS = {RANGE_START: FIRST, RANGE_END: LAST}


def capture_job() -> dg.JobDefinition:
    """The three captured datasets and their checks, loaded as ``dagster`` would, as a
    named job (reconstructable: a module-level function; the implicit job's name is reserved)."""
    d = defs()
    job = dg.define_asset_job("capture_everything", selection=dg.AssetSelection.assets(*DATASETS))
    return dg.Definitions(
        assets=d.assets, asset_checks=d.asset_checks, resources=d.resources, executor=d.executor, jobs=[job]
    ).resolve_job_def("capture_everything")


def _steps(result, event: str) -> set[str]:
    return {e.step_key for e in result.all_events if e.event_type_value == event}


def test_a_failed_write_is_re_executed_from_failure_with_the_staged_days(small, tmp_path, monkeypatch):
    # one redaction key for both installations (by default each DAGSTER_HOME has its own, and the
    # small store's fake keys would get other markers)
    monkeypatch.setenv("HERMES_ASSETS_REDACTION_KEY", str(tmp_path / "redaction.key"))
    reference = tmp_path / "reference"
    assert small.materialize(FIRST, LAST, defs=small.defs(warehouse=HermesWarehouse(root=str(reference)))).success
    want = part_files(reference)  # the three datasets, and the sightings of the small store's secrets
    assert len([p for p in want if p.split("/")[0] in DATASETS]) == 3 * len(SMALL_DAYS)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        small.warehouse.mkdir(parents=True)
        (small.warehouse / MESSAGES).write_text("a file where the dataset's folder should be\n")
        failed = dg.execute_job(dg.reconstructable(capture_job), instance, tags=TAGS, raise_on_error=False)
        assert not failed.success
        assert "hermes_capture.write_partitions" in _steps(failed, "STEP_FAILURE")
        assert {"hermes_capture.plan", "hermes_capture.project_rows"} <= _steps(failed, "STEP_SUCCESS")
        # the three datasets' files of each day (and a first capture's sightings file, encoded already)
        folder = small.warehouse / ".staging" / HOST_DIR / failed.run_id
        staged = [p for p in folder.iterdir() if not p.name.startswith(SIGHTINGS + ".")]
        assert len([p for p in staged if f".{FIRST}." in p.name]) == 3, (
            "the staged days did not survive the failed write"
        )
        assert len(staged) == 3 * len(SMALL_DAYS)
        sighted = {p.split("/")[1].removeprefix("day=") for p in want if p.startswith(SIGHTINGS + "/")}
        assert {p.name for p in folder.iterdir()} - {p.name for p in staged} == {
            staging.prepared_name(SIGHTINGS, day) for day in sighted
        }

        (small.warehouse / MESSAGES).unlink()  # the user fixes the cause, then re-executes from failure
        options = dg.ReexecutionOptions.from_failure(failed.run_id, instance)
        again = dg.execute_job(dg.reconstructable(capture_job), instance, reexecution_options=options, tags=TAGS)
        assert again.success
        ran = _steps(again, "STEP_SUCCESS")
        assert "hermes_capture.write_partitions" in ran
        assert not {"hermes_capture.plan", "hermes_capture.apply_usage_policy", "hermes_capture.project_rows"} & ran
        assert part_files(small.warehouse) == want
        assert not (small.warehouse / ".staging" / HOST_DIR / failed.run_id).exists(), (
            "staged days left after the write"
        )
