"""lib/warehouse/datasets.py: a day's partition file written, merged, replaced, read back (SPEC §2, §6).

On a local folder and on the same disk as a ``file://`` URI (the pyarrow.fs code path);
real rows from a store written by the real Hermes writer.
"""

from __future__ import annotations

import os
import stat

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import SESSIONS
from hermes_assets.lib.hosts.host_labels import default_label, folder
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.warehouse import partition_file
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.host_layout import PART_FILE
from hermes_assets.lib.warehouse.read_marks import READ_AT_FILE
from tests.support.hermes_writer import START_S, HermesWriter
from tests.support.project import project_store

DAY = "2026-06-01"
#: this machine's folder in a day's folder (a warehouse opened without a host label)
HOST_DIR = folder(default_label())
KINDS = ("local", "file")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with three sessions on one day; ``rows``: its hermes_sessions rows."""
    path = tmp_path_factory.mktemp("warehouse") / "state.db"
    with HermesWriter(path, start_s=START_S) as w:
        for sid in ("a", "b", "c"):
            w.session(sid, "cli")
            w.msg(sid, "user", "hi")
            w.end(sid)
    return {"path": str(path), "rows": project_store(path).sessions}


def open_warehouse(kind: str, tmp_path) -> Warehouse:
    root = tmp_path / "wh"
    return Warehouse(str(root)) if kind == "local" else Warehouse(root.as_uri(), spool=str(tmp_path / "spool"))


def facts(store, sessions=("a", "b", "c"), path=None) -> StoreFacts:
    path = path or store["path"]
    return StoreFacts(path, Store(path).path_hash, {sid: DAY for sid in sessions})


def day_file(tmp_path) -> str:
    return str(tmp_path / "wh" / SESSIONS / f"day={DAY}" / HOST_DIR / PART_FILE)


def only(table: pa.Table, *sids: str) -> pa.Table:
    return table.filter(pc.is_in(table.column("id"), value_set=pa.array(sids)))


def as_store(table: pa.Table, path: str) -> pa.Table:
    idx = table.schema.get_field_index("store")
    return table.set_column(idx, table.schema.field(idx), pa.array([path] * table.num_rows, pa.string()))


@pytest.mark.parametrize("kind", KINDS)
def test_a_day_is_written_sorted_read_back_and_never_rewritten_unchanged(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    shuffled = store["rows"].take([2, 0, 1])
    first = wh.write_day(SESSIONS, DAY, {store["path"]: shuffled}, [facts(store)], read_at=100.0)
    assert first.changed and first.rows == 3 and first.path == day_file(tmp_path)
    assert wh.days(SESSIONS) == [DAY] and wh.existing(SESSIONS, [DAY, "2026-06-02"]) == {DAY}
    back = wh.read(SESSIONS, DAY)
    assert back.column("id").to_pylist() == ["a", "b", "c"]  # the file's order, whatever the input's
    assert wh.read(SESSIONS, DAY, columns=["id"]).column_names == ["id"]
    assert wh.read(SESSIONS, "2026-06-02") is None
    dictionary = wh.read(SESSIONS, DAY, read_dictionary=["store"])
    assert pa.types.is_dictionary(dictionary.schema.field("store").type)
    inode = os.stat(day_file(tmp_path)).st_ino
    again = wh.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)], read_at=200.0)
    assert not again.changed and again.rows == 3 and again.bytes == first.bytes
    assert os.stat(day_file(tmp_path)).st_ino == inode  # not even rewritten with the same bytes
    assert stat.S_IMODE(os.stat(day_file(tmp_path)).st_mode) == 0o600
    marks = (tmp_path / "wh" / SESSIONS / f"day={DAY}" / HOST_DIR / READ_AT_FILE).read_text()
    assert marks == f'{{"{store["path"]}": 200.0}}'


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_read_before_the_file_was_written_is_left_alone(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    wh.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)], read_at=200.0)
    before = open(day_file(tmp_path), "rb").read()
    late = wh.write_day(SESSIONS, DAY, {store["path"]: only(store["rows"], "a")}, [facts(store)], read_at=100.0)
    assert late.superseded and not late.changed and late.rows == 3
    assert open(day_file(tmp_path), "rb").read() == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_merge_prepared_before_the_write_is_put_in_place_as_the_write_would_make_it(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    wh.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)], read_at=100.0)
    new = {store["path"]: only(store["rows"], "a", "b")}
    gone_c = [facts(store, sessions=("a", "b"))]  # c is gone from the store: kept, flagged
    os.makedirs(tmp_path / "staging")
    old = wh.read_pinned(SESSIONS, DAY, str(tmp_path / "staging" / "pin"))
    assert old is not None and old.pin is not None
    prepared = wh.prepare_write(SESSIONS, DAY, new, gone_c, 200.0, old, str(tmp_path / "staging" / "prepared"))
    assert prepared.changed and prepared.rows == 3 and prepared.retained == 1
    written = wh.write_day(SESSIONS, DAY, new, gone_c, read_at=200.0, prepared=prepared)
    via_prepared = open(day_file(tmp_path), "rb").read()
    if kind == "local":
        assert os.path.samefile(day_file(tmp_path), tmp_path / "staging" / "prepared")  # put in place, not copied

    other = tmp_path / "other"
    wh2 = open_warehouse(kind, other)
    wh2.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)], read_at=100.0)
    merged_here = wh2.write_day(SESSIONS, DAY, new, gone_c, read_at=200.0)
    assert open(day_file(other), "rb").read() == via_prepared
    assert written.metadata() | {"path": ""} == merged_here.metadata() | {"path": ""}


@pytest.mark.parametrize("kind", KINDS)
def test_a_prepared_merge_of_a_file_replaced_since_is_done_again_and_loses_nothing(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    wh.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)], read_at=100.0)
    os.makedirs(tmp_path / "staging")
    old = wh.read_pinned(SESSIONS, DAY, str(tmp_path / "staging" / "pin"))
    new = {store["path"]: only(store["rows"], "a", "b")}
    gone_c = [facts(store, sessions=("a", "b"))]
    prepared = wh.prepare_write(SESSIONS, DAY, new, gone_c, 200.0, old, str(tmp_path / "staging" / "prepared"))
    # meanwhile another run writes the day with a second store's rows
    second = "/second/state.db"
    wh.write_day(SESSIONS, DAY, {second: as_store(store["rows"], second)}, [facts(store, path=second)], read_at=150.0)
    result = wh.write_day(SESSIONS, DAY, new, gone_c, read_at=200.0, prepared=prepared)
    table = wh.read(SESSIONS, DAY)
    assert result.rows == table.num_rows == 6  # the second store's three rows are not lost
    assert (
        sorted(zip(table.column("store").to_pylist(), table.column("source_deleted").to_pylist())).count(
            (store["path"], True)
        )
        == 1
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_prepared_merge_for_other_stores_than_the_write_is_not_used(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    wh.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)], read_at=100.0)
    os.makedirs(tmp_path / "staging")
    old = wh.read_pinned(SESSIONS, DAY, str(tmp_path / "staging" / "pin"))
    prepared = wh.prepare_write(
        SESSIONS,
        DAY,
        {store["path"]: only(store["rows"], "a")},
        [facts(store, sessions=("a",))],
        200.0,
        old,
        str(tmp_path / "staging" / "prepared"),
    )
    # the store failed on another day of the run: the write judges no store, and changes nothing
    result = wh.write_day(SESSIONS, DAY, {}, [], read_at=200.0, prepared=prepared)
    assert not result.changed and wh.read(SESSIONS, DAY).num_rows == 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_day_left_without_rows_has_no_file(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    wh.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)], read_at=100.0)
    ignored = facts(store)
    ignored.ignored = {"a", "b", "c"}
    result = wh.write_day(SESSIONS, DAY, {}, [ignored], read_at=200.0)
    assert result.changed and result.rows == 0 and result.dropped == 3
    assert wh.days(SESSIONS) == [] and wh.read(SESSIONS, DAY) is None


@pytest.mark.parametrize("kind", KINDS)
def test_replace_rewrite_and_current(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    replaced = wh.replace_day(SESSIONS, DAY, store["rows"], wh.read_versioned(SESSIONS, DAY))
    assert replaced is not None and replaced.changed and wh.current(SESSIONS, DAY).rows == 3
    removed, left = wh.rewrite_day(SESSIONS, DAY, lambda t: pc.not_equal(t.column("id"), "b"))
    assert (removed, left) == (1, 2) and wh.read(SESSIONS, DAY).column("id").to_pylist() == ["a", "c"]
    assert wh.rewrite_day(SESSIONS, "2026-06-09", lambda t: None) == (0, 0)
    assert wh.current(SESSIONS, "2026-06-09").rows == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_files_cells_rewritten_in_place_record_the_version_given(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    assert wh.rewrite_file(SESSIONS, DAY, lambda t: t, "v3") is None  # no file, nothing made
    wh.replace_day(SESSIONS, DAY, store["rows"], None)

    def titled(table: pa.Table) -> pa.Table:
        i = table.schema.get_field_index("title")
        return table.set_column(i, table.schema.field(i), pa.array(["t"] * table.num_rows, pa.string()))

    done = wh.rewrite_file(SESSIONS, DAY, titled, "v3")
    assert done is not None and done.changed and done.rows == 3
    assert set(wh.read(SESSIONS, DAY).column("title").to_pylist()) == {"t"}
    assert partition_file.redaction_version(pa.py_buffer(open(day_file(tmp_path), "rb").read())) == "v3"
    assert stat.S_IMODE(os.stat(day_file(tmp_path)).st_mode) == 0o600
    again = wh.rewrite_file(SESSIONS, DAY, lambda t: t, "v3")  # the same rows, the same version: untouched
    assert again is not None and not again.changed


@pytest.mark.parametrize("kind", KINDS)
def test_every_file_and_folder_is_made_private_again(kind, store, tmp_path):
    wh = open_warehouse(kind, tmp_path)
    wh.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)], read_at=100.0)
    staged = os.path.join(wh.staging_root, "run", "x.arrow")
    wh.make_spool_dirs(os.path.dirname(staged))
    with open(staged, "wb"):
        pass
    for path in (day_file(tmp_path), staged):
        os.chmod(path, 0o644)
    os.chmod(os.path.dirname(day_file(tmp_path)), 0o755)
    wh.fix_all_modes()
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in (day_file(tmp_path), staged)] == [0o600, 0o600]
    assert stat.S_IMODE(os.stat(os.path.dirname(day_file(tmp_path))).st_mode) == 0o700


def test_the_file_holds_the_datasets_own_types(store, tmp_path):
    wh = open_warehouse("local", tmp_path)
    wh.write_day(SESSIONS, DAY, {store["path"]: store["rows"]}, [facts(store)])
    assert partition_file.read(SESSIONS, day_file(tmp_path)).schema == schemas.HERMES_SESSIONS
