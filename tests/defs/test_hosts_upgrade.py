"""A single-host warehouse from before hosts had their own files upgrades in place, and hosts
that name no label keep their ids apart (SPEC §2).

The small fixture captured by the project's own run, its files then put back the way the
version before wrote them (``day=<day>/part-0.parquet``, no ``host`` column); the next run
moves every file to this host's folder, says so (a log event, the ``project_rows`` step's
metadata), and its rows are the ones captured before, byte for byte.
"""

from __future__ import annotations

import socket

import pyarrow.parquet as pq
import pytest
import structlog

from hermes_assets.lib.basics.schemas import GATEWAY
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.host_layout import PART_FILE
from tests.defs.harness import ANALYTICS, DATASETS, SMALL_DAYS, new_capture, step_output_metadata
from tests.lib.test_hosts import make_legacy
from tests.support.hermes_writer import HermesWriter
from tests.support.hosts import HOST, HOST_FILES

pytestmark = pytest.mark.slow

FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[4]
PROJECT_STEP = "hermes_capture.project_rows"


def test_a_warehouse_from_before_moves_to_this_hosts_folders_on_its_first_run(small, instance):
    assert small.materialize(FIRST, LAST, instance=instance).success
    before = make_legacy(small.warehouse, HOST)  # the small store's secrets: sightings too, which that version had not
    assert len([k for k in before if k.split("/")[0] in DATASETS]) == 3 * 5
    assert not list(small.warehouse.glob(f"*/{HOST_FILES}"))
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


def test_two_hosts_left_unnamed_keep_every_id_unique(tmp_path, monkeypatch):
    """Two machines share a warehouse, neither sets ``HERMES_ASSETS_HOST`` (their labels are
    their hostnames) and their Hermes session ids collide: the first keeps the ids a single
    host always had, the second scopes its ids by its hostname (the project's own runs)."""
    day, warehouse = "2026-06-01", tmp_path / "shared-warehouse"
    scoped = {}
    for name in ("alpha", "beta"):
        cap = new_capture(tmp_path / name)
        env = {**cap.environ(), "HERMES_ASSETS_WAREHOUSE": str(warehouse), "HERMES_ASSETS_START_DATE": "2026-05-25"}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("HERMES_STATE_DB", raising=False)
        monkeypatch.delenv("HERMES_ASSETS_HOST", raising=False)
        monkeypatch.setattr(socket, "gethostname", lambda name=name: f"{name}.example.org")
        with HermesWriter(cap.store, home=cap.home) as writer:
            sid = writer.session("s1", "cli", model="model-a")  # the same id on both machines
            writer.msg(sid, "user", f"hello from {name}")
        result = cap.materialize(day)
        assert result.success
        (md,) = [m for m in step_output_metadata(result, PROJECT_STEP) if "ids_scoped_by_host" in m]
        scoped[name] = md["ids_scoped_by_host"]
    assert scoped == {"alpha": False, "beta": True}
    reader = Warehouse(str(warehouse), host="reader")
    gateway = reader.read(GATEWAY, day)
    ids = gateway["part_id"].to_pylist()
    assert len(ids) == len(set(ids)) and gateway.num_rows > 0
    by_host = {(r["host"], r["session_id"]) for r in gateway.select(["host", "session_id"]).to_pylist()}
    assert by_host == {("alpha", "hermes-s1"), ("beta", "hermes-beta:s1")}


def test_a_run_of_a_host_whose_label_another_installation_owns_fails_before_it_writes(tmp_path, monkeypatch):
    """In a server (the daemon's runs, the UI's launches) the refusal is the run's failure, its
    one line the step's error: ``project_rows`` claims the label before anything is written,
    and the first host's files are untouched."""
    from hermes_assets.lib.basics.errors import HOST_CONFLICT
    from tests.support.capture_run import files

    day, warehouse = "2026-06-01", tmp_path / "shared-warehouse"
    outcomes = {}
    for name in ("alpha", "beta"):
        cap = new_capture(tmp_path / name)
        env = {**cap.environ(), "HERMES_ASSETS_WAREHOUSE": str(warehouse), "HERMES_ASSETS_HOST": "gateway-1"}
        for key, value in {**env, "HERMES_ASSETS_START_DATE": "2026-05-25"}.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("HERMES_STATE_DB", raising=False)
        with HermesWriter(cap.store, home=cap.home) as writer:
            writer.msg(writer.session("s1", "cli", model="model-a"), "user", f"hello from {name}")
        before = files(warehouse) if warehouse.exists() else {}
        outcomes[name] = cap.materialize(day, raise_on_error=False)
    assert outcomes["alpha"].success and not outcomes["beta"].success
    (failure,) = [e for e in outcomes["beta"].all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == PROJECT_STEP
    data = failure.event_specific_data
    assert "host label 'gateway-1' is taken" in data.error.message
    assert data.user_failure_data.metadata["error_kind"].value == HOST_CONFLICT
    assert files(warehouse) == before and before
