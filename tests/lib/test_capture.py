"""lib/capture/steps.py: days staged (in parallel), then written; a day's file is read once per run."""

from __future__ import annotations

import collections
import dataclasses
import os
import shutil
import threading

import pyarrow.compute as pc
import pytest

from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, MESSAGES, SESSIONS, SIGHTINGS
from hermes_assets.lib.capture import run_sightings, steps
from hermes_assets.lib.storage import local_files, local_storage
from hermes_assets.lib.warehouse.datasets import Warehouse, WriteResult
from tests.support.capture_run import capture_days, files, stage
from tests.support.hermes_writer import START_S, HermesWriter

#: the longest a day's write waits for the other days' sightings (they take well under a second)
SIGHTINGS_WAIT_S = 60


@pytest.fixture
def reads(monkeypatch):
    """Every read of a file through the storage, by file name: whole reads and opens."""
    seen: collections.Counter = collections.Counter()
    whole, opened = local_files.read_bytes, local_storage.LocalStorage.open_input

    def read_bytes(path):
        seen[os.path.basename(path)] += 1
        return whole(path)

    def open_input(self, path):
        seen["open " + os.path.basename(path)] += 1
        return opened(self, path)

    monkeypatch.setattr(local_files, "read_bytes", read_bytes)
    monkeypatch.setattr(local_storage.LocalStorage, "open_input", open_input)
    return seen


def test_a_rerun_reads_each_day_file_once_and_rewrites_nothing(fixture_copy, tmp_path, reads):
    small = fixture_copy("small")
    wh = Warehouse(str(tmp_path / "wh"))
    first_run, first = capture_days([small], wh)
    written = files(tmp_path / "wh")
    captured = [p for p in written if p.split("/")[0] in CAPTURE_DATASETS]
    assert len(captured) == 3 * len(first_run.plan.days) and all(r.changed for ds in first.results.values() for r in ds)
    sightings = [p for p in written if p.startswith(SIGHTINGS + "/")]
    assert len(sightings) == len(first.sightings) and all(r.changed for r in first.sightings)
    inodes = {p: os.stat(tmp_path / "wh" / p).st_ino for p in written}

    reads.clear()
    run = stage([small], wh, run_id="again")
    # the stage step read each file once, whole, through its pin; no column read of a day file
    pins = {name: n for name, n in reads.items() if name.endswith(".pin")}
    assert len(pins) == len(captured) and set(pins.values()) == {1}
    assert not [name for name in reads if name.startswith("open part-0")]
    assert sum(len(day.prepared) for day in run.days) == len(captured)
    reads.clear()
    again = steps.write_partitions(run, wh)
    # a day's captured files are not read again; its sightings file is read once, under its lock, to merge
    assert {name: n for name, n in reads.items() if "part-0" in name} == (
        {"part-0.parquet": len(sightings)} if sightings else {}
    ), "the write step read a day file again"
    assert not any(r.changed for r in again.sightings)
    assert not any(r.changed for ds in again.results.values() for r in ds)
    assert files(tmp_path / "wh") == written
    assert {p: os.stat(tmp_path / "wh" / p).st_ino for p in written} == inodes
    assert not os.path.exists(run.staging)  # staging, pins included, removed after the write
    for dataset in CAPTURE_DATASETS:
        assert again.totals(dataset)["rows_written"] == first.totals(dataset)["rows_written"]


@pytest.fixture
def changing_store(tmp_path):
    """A store captured once, then changed: a new message, a deleted session, a message id reused."""
    path = tmp_path / "hermes" / "state.db"
    w = HermesWriter(path, start_s=START_S)
    for sid in ("stays", "deleted", "restored"):
        w.session(sid, "cli")
        w.msg(sid, "user", f"question in {sid}")
        w.msg(sid, "assistant", f"answer in {sid}")
    yield w
    w.close()


def change(w: HermesWriter) -> None:
    w.msg("stays", "user", "one more")
    w.db.delete_session("deleted")
    first = w.mids("restored")[0]  # a restored store: the id now holds another message (D15)
    w.raw_sql("UPDATE messages SET role = 'tool', timestamp = timestamp + 3600 WHERE id = ?", (first,))


def test_the_stage_steps_merge_writes_the_bytes_the_write_steps_merge_would(changing_store, tmp_path):
    w = changing_store
    a, b = Warehouse(str(tmp_path / "a")), Warehouse(str(tmp_path / "b"))
    capture_days([w.path], a)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    change(w)
    run_a = stage([w.path], a)
    assert all(d.prepared for d in run_a.days)
    written_a = steps.write_partitions(run_a, a)
    run_b = stage([w.path], b)
    stripped = dataclasses.replace(run_b, days=[dataclasses.replace(d, prepared={}) for d in run_b.days])
    written_b = steps.write_partitions(stripped, b)
    assert files(tmp_path / "a") == files(tmp_path / "b")
    for dataset in CAPTURE_DATASETS:
        assert written_a.totals(dataset) == written_b.totals(dataset)
    # what the change did: the deleted session kept and flagged, the reused id a new generation
    sessions = a.read(SESSIONS, "2026-06-01")
    assert dict(zip(sessions.column("id").to_pylist(), sessions.column("source_deleted").to_pylist())) == {
        "deleted": True,
        "restored": False,
        "stays": False,
    }
    messages = a.read(MESSAGES, "2026-06-01").filter(pc.equal(pc.field("session_id"), "restored"))
    by_generation = sorted(zip(messages.column("generation").to_pylist(), messages.column("replaced").to_pylist()))
    assert by_generation == [(1, False), (1, True), (2, False)]
    assert written_a.totals(MESSAGES)["rows_replaced"] == 1


def test_a_write_after_another_run_merges_again_and_loses_nothing(changing_store, tmp_path):
    w = changing_store
    wh = Warehouse(str(tmp_path / "wh"))
    capture_days([w.path], wh)
    slow = stage([w.path], wh, run_id="slow")  # a long run stages first ...
    change(w)
    capture_days([w.path], wh)  # ... another run captures the change meanwhile ...
    after_fast = files(tmp_path / "wh")
    steps.write_partitions(slow, wh)  # ... and the slow run's older read does not undo it
    assert files(tmp_path / "wh") == after_fast


@pytest.mark.slow  # worker processes
def test_days_staged_on_workers_write_the_bytes_one_process_writes(fixture_copy, tmp_path):
    small = fixture_copy("small")
    one, two = Warehouse(str(tmp_path / "one")), Warehouse(str(tmp_path / "two"))
    capture_days([small], one)
    run, _ = capture_days([small], two, workers=2)
    assert files(tmp_path / "one") == files(tmp_path / "two")
    assert [d.day for d in run.days] == run.plan.days


def test_each_days_sightings_follow_its_files_on_its_thread_and_come_back_in_day_order(
    fixture_copy, tmp_path, monkeypatch
):
    """The write step writes a day's sightings on the thread that put its files in place, right
    after them (they are read from those files); days finish in any order, the run's results of
    the sightings are in the run's order of days."""
    small = fixture_copy("small")
    wh = Warehouse(str(tmp_path / "wh"))
    run = stage([small], wh, run_id="sightings")
    days = [staged.day for staged in run.days]
    assert len(days) > 2
    seen: list[tuple[str, str, bool]] = []
    others_sighted = threading.Event()
    write_day = steps._write_day

    def first_day_last(run, warehouse, failed, staged):
        # the first day finishes last: its files are written once every other day's sightings are
        # (not after a sleep: on a loaded machine the other days can take longer than any sleep)
        if staged.day == days[0]:
            assert others_sighted.wait(SIGHTINGS_WAIT_S), "the other days' sightings wait for the first day's"
        return write_day(run, warehouse, failed, staged)

    def sighted(writer, day, staged):
        in_place = all(os.path.exists(wh.path(ds, day)) for ds, d in staged.datasets.items() if d.rows)
        seen.append((day, threading.current_thread().name, in_place))
        if len(seen) == len(days) - 1:
            others_sighted.set()
        return WriteResult(SIGHTINGS, day, wh.location(SIGHTINGS, day), 1, 0, 0, 1, True)

    monkeypatch.setattr(steps, "_write_day", first_day_last)
    monkeypatch.setattr(run_sightings.Writer, "_write", sighted)
    written = steps.write_partitions(run, wh, workers=3)
    assert [r.day for r in written.sightings] == days
    assert seen[-1][0] == days[0]  # written when its own files were, not in the run's order
    assert all(in_place for _, _, in_place in seen)
    assert all(thread != threading.main_thread().name for _, thread, _ in seen)


def test_the_write_step_syncs_each_folder_of_its_files_once_before_it_returns(fixture_copy, tmp_path, monkeypatch):
    """Each file is put in place whole (its bytes synced first); the folders of the run's files are
    synced together once every day is written, before the step returns (and reports them)."""
    small = fixture_copy("small")
    wh = Warehouse(str(tmp_path / "wh"))
    run = stage([small], wh, run_id="syncs")
    synced: list[str] = []
    monkeypatch.setattr(local_files, "_fsync_dir_now", synced.append)
    day_task, synced_by_then = steps._day_and_sightings, []

    def day_and_sightings(*args):  # each day's files in place, none of their folders synced yet
        out = day_task(*args)
        synced_by_then.append(len(synced))
        return out

    monkeypatch.setattr(steps, "_day_and_sightings", day_and_sightings)
    written = steps.write_partitions(run, wh, workers=3)
    assert len(synced_by_then) == len(run.days) and set(synced_by_then) == {0}
    folders = {os.path.dirname(r.path) for results in written.results.values() for r in results if r.changed}
    folders |= {os.path.dirname(r.path) for r in written.sightings if r.changed}
    assert len(folders) > 3
    assert folders <= set(synced) and len(synced) == len(set(synced)), "a folder synced more than once"
