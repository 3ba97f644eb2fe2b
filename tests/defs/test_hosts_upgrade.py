"""A single-host warehouse from before hosts had their own files upgrades in place (SPEC §2).

The small fixture captured by the project's own run, its files then put back the way the
version before wrote them (``day=<day>/part-0.parquet``, no ``host`` column); the next run
moves every file to this host's folder, says so (a log event, the ``project_rows`` step's
metadata), and its rows are the ones captured before, byte for byte.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import structlog

from hermes_assets.lib.warehouse.datasets import PART_FILE
from tests.defs.harness import ANALYTICS, DATASETS, SMALL_DAYS, step_output_metadata
from tests.lib.test_hosts import make_legacy
from tests.support.hosts import HOST, HOST_FILES

pytestmark = pytest.mark.slow

FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[4]
PROJECT_STEP = "hermes_capture.project_rows"


def test_a_warehouse_from_before_moves_to_this_hosts_folders_on_its_first_run(small, instance):
    assert small.materialize(FIRST, LAST, instance=instance).success
    before = make_legacy(small.warehouse, HOST)
    assert len(before) == 3 * 5 and not list(small.warehouse.glob(f"*/{HOST_FILES}"))
    assert all("host" not in pq.read_schema(p).names for p in small.warehouse.glob(f"*/day=*/{PART_FILE}"))

    with structlog.testing.capture_logs() as events:
        result = small.materialize(FIRST, LAST, instance=instance)
    assert result.success
    (md,) = [m for m in step_output_metadata(result, PROJECT_STEP) if "layout_files_moved" in m]
    assert (md["layout_files_moved"], md["layout_days_moved"], md["host"]) == (15, 5, HOST)
    (moved,) = [e for e in events if e["event"] == "hermes.warehouse.layout_moved"]
    assert moved["files"] == 15 and moved["rows"] == md["layout_rows_moved"] > 0
    after = {
        f"{p.parts[-4]}/{p.parent.parent.name}": p.read_bytes() for p in sorted(small.warehouse.glob(f"*/{HOST_FILES}"))
    }
    assert after == before  # the same rows, with their host: the run found nothing else to change
    captured = [p for p in small.warehouse.glob(f"*/day=*/{PART_FILE}") if p.parts[-3] not in ANALYTICS]
    assert not captured and all(p.parts[-3] in ANALYTICS for p in small.warehouse.glob(f"*/day=*/{PART_FILE}"))

    again = small.materialize(FIRST, LAST, instance=instance)
    (md,) = [m for m in step_output_metadata(again, PROJECT_STEP) if "layout_files_moved" in m]
    assert md["layout_files_moved"] == 0
    for dataset in DATASETS:
        assert sorted(p.parent.parent.name[4:] for p in (small.warehouse / dataset).glob(HOST_FILES)) == SMALL_DAYS[:5]
