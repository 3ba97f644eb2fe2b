"""lib/warehouse/staging.py: the files a day is staged in between project_rows and write_partitions, and their cleanup."""

from __future__ import annotations

import errno
import os
import pickle
import stat
import time

import pyarrow as pa
import pytest

from hermes_assets.lib.basics.ipc import IpcTable
from hermes_assets.lib.basics.schemas import SESSIONS
from hermes_assets.lib.warehouse import staging
from tests.support.hermes_writer import START_S, HermesWriter
from tests.support.project import project_store


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> pa.Table:
    path = tmp_path_factory.mktemp("staging") / "state.db"
    with HermesWriter(path, start_s=START_S) as w:
        for sid in ("b", "a"):
            w.session(sid, "cli", system_prompt="the same long prompt " * 50)
    return project_store(path).sessions


@pytest.mark.parametrize("encoded", (False, True))
def test_a_staged_table_reads_back_as_it_was_in_its_own_form(sessions, tmp_path, encoded):
    name = staging.staged_name(SESSIONS, "2026-06-01", 3, encoded=encoded)
    assert name == f"hermes_sessions.2026-06-01.3{'.parquet' if encoded else '.arrow'}"
    path = str(tmp_path / name)
    staging.stage(SESSIONS, sessions, path, 0o640)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    back = staging.read_staged(SESSIONS, path)
    assert back.to_pylist() == sessions.sort_by("id").to_pylist() if encoded else back.equals(sessions)
    if encoded:  # the partition file itself: what the warehouse puts in place as it is
        assert open(path, "rb").read()[:4] == b"PAR1"


@pytest.mark.parametrize("rows", (2, 0))
def test_a_table_handed_to_the_write_step_comes_back_as_it_was(sessions, rows):
    table = sessions.slice(0, rows)
    back = pickle.loads(pickle.dumps(IpcTable.of(table))).table()
    assert back.schema.equals(table.schema, check_metadata=True) and back.to_pylist() == table.to_pylist()


def test_restage_replaces_a_staged_table_whole_and_in_its_form(sessions, tmp_path):
    path = str(tmp_path / staging.staged_name(SESSIONS, "2026-06-01", 0, encoded=False))
    staging.stage(SESSIONS, sessions, path)
    staging.restage(SESSIONS, path, sessions.slice(0, 1))
    assert staging.read_staged(SESSIONS, path).num_rows == 1
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temp file left, none taken for a staged one


def test_staged_tables_and_the_files_of_a_merge_are_found_apart(tmp_path):
    run = tmp_path / "run-1"
    run.mkdir()
    for name in (
        "hermes_sessions.2026-06-01.0.arrow",
        "hermes_messages.2026-06-01.0.parquet",
        staging.prepared_name("hermes_messages", "2026-06-02"),
        staging.pin_name("hermes_messages", "2026-06-02"),
        ".hermes_sessions.2026-06-01.0.arrow",  # a restage in progress
        "notes.arrow",
    ):
        (run / name).write_bytes(b"")
    assert [os.path.basename(p) for _, p in staging.staged_files(str(tmp_path))] == [
        "hermes_messages.2026-06-01.0.parquet",
        "hermes_sessions.2026-06-01.0.arrow",
    ]
    assert [os.path.basename(p) for _, p in staging.merge_files(str(tmp_path))] == [
        "hermes_messages.2026-06-02.pin",
        "hermes_messages.2026-06-02.prepared",
    ]


def test_a_full_disk_while_staging_names_the_file_and_says_nothing_changed(tmp_path):
    full = pytest.raises(OSError, match=r"while staging /x/y.arrow: no partition file was changed")
    with full as raised, staging.reporting_full_disk("/x/y.arrow"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert raised.value.errno == errno.ENOSPC
    with pytest.raises(PermissionError), staging.reporting_full_disk("/x/y.arrow"):  # any other error: as it is
        raise PermissionError(errno.EACCES, "denied")


def test_sweep_removes_the_folders_no_run_needs(tmp_path):
    now = time.time()
    for run_id in ("mine", "running", "ended", "unknown-young", "unknown-old"):
        (tmp_path / run_id).mkdir()
    old = now - staging.STALE_STAGING_S - 60
    os.utime(tmp_path / "unknown-old", (old, old))
    needs = {"running": True, "ended": False, "mine": False}.get
    removed = staging.sweep(str(tmp_path), needs, keep="mine", now_s=now)
    assert sorted(removed) == ["ended", "unknown-old"]
    assert sorted(os.listdir(tmp_path)) == ["mine", "running", "unknown-young"]
    assert staging.sweep(str(tmp_path / "none"), needs) == []
