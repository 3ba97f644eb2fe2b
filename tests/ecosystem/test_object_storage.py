"""A warehouse on object storage through pyarrow's filesystem layer.

``HERMES_ASSETS_WAREHOUSE`` takes any URI ``pyarrow.fs`` opens. Two are run
here end to end, by the project's own definitions:

* ``file:///…``: the local disk through ``pyarrow.fs`` (reads, listing by
  selector, temp file + ``FileSystem.move``, locks and staging in the local
  spool), not the POSIX warehouse's own rename and fsync;
* ``s3://…``: pyarrow's real S3 client against an S3-compatible server
  (moto's, on loopback), where a file is replaced by one upload and folders
  do not exist.

Both must hold exactly the rows a plain-path warehouse holds, re-run without
change, keep rows whose source vanished, and leave nothing but
``day=*/host=*/part-0.parquet`` (and its read watermark) in the bucket.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pytest

from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.storage.arrow_storage import ArrowStorage
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.host_layout import PART_FILE
from hermes_assets.lib.warehouse.purge import purge
from hermes_assets.lib.warehouse.read_marks import READ_AT_FILE
from tests.defs.conftest import instance, small  # noqa: F401  (fixtures: the small store in an isolated installation)
from tests.defs.harness import (
    ANALYTICS,
    SIGHTINGS,
    SMALL_DAYS,
    partition_metadata,
    source_deleted,
    store_sessions,
)
from tests.support.hermes_writer import HermesWriter
from tests.support.hosts import HOST_DIR
from tests.support.processes import dead_pid

DATASETS = (GATEWAY, SESSIONS, MESSAGES)
DAYS = SMALL_DAYS[2:6]


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def contents(wh: Warehouse) -> dict[tuple[str, str], list[dict]]:
    """(dataset, day) -> every row of that day's file, read through the warehouse."""
    out = {}
    for dataset in DATASETS:
        for day in wh.days(dataset):
            out[(dataset, day)] = wh.read(dataset, day).to_pylist()
    return out


def object_names(wh: Warehouse) -> list[str]:
    """Every file under the warehouse root, relative to it."""
    infos = wh.storage.fs.get_file_info(pafs.FileSelector(wh.root, recursive=True, allow_not_found=True))
    return sorted(i.path[len(wh.root) + 1 :] for i in infos if i.type == pafs.FileType.File)


def assert_only_data_files(wh: Warehouse) -> None:
    names = object_names(wh)
    assert names, "the warehouse is empty"
    # the day files and read marks, and the hosts' claims: on the ids (.hosts/host=<label>), on
    # their labels (.hosts/labels/<label>.json) and on their stores (.hosts/stores/<digest>.json)
    stray = [n for n in names if n.rsplit("/", 1)[-1] not in (PART_FILE, READ_AT_FILE) and not n.startswith(".hosts/")]
    assert not stray, f"not data: {stray}"


def local_reference(capture, tmp_path: Path) -> dict:
    """What a plain-path warehouse holds after the same run."""
    path = tmp_path / "posix-warehouse"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HERMES_ASSETS_WAREHOUSE", str(path))
        assert capture.materialize(DAYS[0], DAYS[-1]).success
    return contents(Warehouse(str(path)))


def use_warehouse(monkeypatch, uri: str, spool: Path) -> Warehouse:
    monkeypatch.setenv("HERMES_ASSETS_WAREHOUSE", uri)
    monkeypatch.setenv("HERMES_ASSETS_SPOOL", str(spool))
    return Warehouse(uri)


def changed_files(result) -> dict[tuple[str, str], bool]:
    return {key: md["file_changed"] for key, md in partition_metadata(result).items()}


# --------------------------------------------------------------------------
# an S3-compatible server on loopback
# --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """``host:port`` of moto's S3 server, run as its own process for this module."""
    port = _free_port()
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 server did not start (see {log.name})") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def s3_uri(s3_endpoint, monkeypatch, request) -> str:
    """A fresh bucket for one test, and the credentials pyarrow's S3 client reads."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bucket = "hermes-" + request.node.name.replace("_", "-").lower()[:40].strip("-")
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", region="us-east-1", allow_bucket_creation=True)
    fs.create_dir(bucket)
    return f"s3://{bucket}/team/warehouse?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"


# --------------------------------------------------------------------------
# file:/// (the object-store code path on the local disk)
# --------------------------------------------------------------------------


def test_file_uri_warehouse_holds_what_a_local_one_holds(small, monkeypatch, tmp_path):
    expected = local_reference(small, tmp_path)
    root = tmp_path / "uri-warehouse"
    wh = use_warehouse(monkeypatch, root.as_uri(), tmp_path / "spool")
    assert isinstance(wh.storage, ArrowStorage)  # the pyarrow.fs code path

    result = small.materialize(DAYS[0], DAYS[-1])
    assert result.success
    assert contents(wh) == expected
    assert len(expected) == 3 * len(DAYS)
    # staging and the day locks stay in the local spool, never among the data
    assert_only_data_files(wh)
    assert list((tmp_path / "spool").rglob(".lock"))
    md = partition_metadata(result)[(GATEWAY, DAYS[0])]
    assert md["path"] == str(root / GATEWAY / f"day={DAYS[0]}" / HOST_DIR / PART_FILE)
    assert md["dagster/row_count"] == len(expected[(GATEWAY, DAYS[0])])
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)

    # a re-run changes no file
    again = small.materialize(DAYS[0], DAYS[-1])
    assert again.success
    assert changed_files(again) and not any(changed_files(again).values())
    assert contents(wh) == expected


def test_file_uri_warehouse_keeps_rows_whose_source_vanished(small, monkeypatch, tmp_path):
    wh = use_warehouse(monkeypatch, (tmp_path / "uri-warehouse").as_uri(), tmp_path / "spool")
    day = DAYS[1]
    assert small.materialize(day).success
    before = {ds: wh.read(ds, day).num_rows for ds in DATASETS}
    gone = sorted(sid for sid, s in store_sessions(small.store).items() if s["day"] == day and s["parent"] is None)[0]

    with HermesWriter(small.store, home=small.home) as w:
        w.delete_session(gone)
    assert small.materialize(day).success

    for ds in DATASETS:
        rows = wh.read(ds, day).to_pylist()
        assert len(rows) == before[ds], ds
        flagged = [r for r in rows if source_deleted(_parsed(r, ds), ds)]
        assert flagged, f"{ds}: the deleted session's rows are not flagged"
    assert_only_data_files(wh)


def _parsed(row: dict, dataset: str) -> dict:
    if dataset == GATEWAY and isinstance(row["attributes"], str):
        row = {**row, "attributes": json.loads(row["attributes"])}
    return row


def test_a_temp_file_left_by_a_killed_writer_is_never_data_and_is_replaced(small, monkeypatch, tmp_path):
    wh = use_warehouse(monkeypatch, (tmp_path / "uri-warehouse").as_uri(), tmp_path / "spool")
    day = DAYS[0]
    assert small.materialize(day).success
    folder = f"{wh.file_dir(GATEWAY, day)}"
    pid = dead_pid()
    dead = f"{folder}/.{PART_FILE}.{wh.host}.{pid}.0123abcd.tmp"  # this host's writer, killed
    # another host's writer of the same name, alive (a shared folder): not ours to remove
    other = f"{folder}/.{PART_FILE}.{wh.host}.b.{pid}.0123abcd.tmp"
    for path in (dead, other):
        with wh.storage.fs.open_output_stream(path) as out:
            out.write(b"half a parquet file")
    assert wh.days(GATEWAY) == [day]
    rows = wh.read(GATEWAY, day).num_rows

    wh.rewrite_day(GATEWAY, day, lambda t: _all_but_first(t))  # the next write of the day cleans up
    assert wh.storage.fs.get_file_info(dead).type == pafs.FileType.NotFound
    assert wh.storage.fs.get_file_info(other).type == pafs.FileType.File
    assert wh.read(GATEWAY, day).num_rows == rows - 1


def _all_but_first(table):
    return pa.array([i > 0 for i in range(table.num_rows)])


def test_purge_on_a_uri_warehouse(small, monkeypatch, tmp_path):
    wh = use_warehouse(monkeypatch, (tmp_path / "uri-warehouse").as_uri(), tmp_path / "spool")
    assert small.materialize(DAYS[0], DAYS[-1]).success
    sid = wh.read(SESSIONS, DAYS[2]).column("id")[0].as_py()
    result = purge(Warehouse(wh.uri), session_id=sid)
    assert sum(result.removed.values()) > 0
    for ds, column in ((SESSIONS, "id"), (MESSAGES, "session_id")):
        assert all(sid not in wh.read(ds, d).column(column).to_pylist() for d in wh.days(ds))
    assert_only_data_files(wh)


def test_an_unknown_scheme_is_refused_when_the_definitions_load(small, monkeypatch, tmp_path):
    """A scheme pyarrow does not open is a bad setting (SPEC §10): one line naming it, before
    any run starts (the form is checked at load; whether the bucket answers, at the run)."""
    use_warehouse(monkeypatch, "nosuchfs://bucket/warehouse", tmp_path / "spool")
    with pytest.raises(Exception) as err:
        small.materialize(DAYS[0])
    cause = err.value
    while cause is not None and not isinstance(cause, ConfigurationError):
        cause = cause.__cause__ or cause.__context__
    assert cause is not None, err.value
    assert str(cause).startswith("HERMES_ASSETS_WAREHOUSE='nosuchfs://bucket/warehouse' is not a folder path or a URI")


def test_definitions_with_an_s3_warehouse_load_without_touching_the_network(capture, monkeypatch, tmp_path):
    """Loading code (``dagster dev``, the daemon) must not reach the bucket: the client opens on first use."""
    use_warehouse(monkeypatch, "s3://no-such-bucket/wh?endpoint_override=127.0.0.1:9&scheme=http", tmp_path / "s")
    defs = capture.defs()
    defs.validate_loadable(defs)
    assert defs.resources["warehouse"].root.startswith("s3://no-such-bucket/")
    assert Warehouse(defs.resources["warehouse"].root).path(GATEWAY, "2026-06-01") == (
        f"no-such-bucket/wh/{GATEWAY}/day=2026-06-01/{HOST_DIR}/{PART_FILE}"
    )


# --------------------------------------------------------------------------
# s3:// (pyarrow's S3 client, an S3-compatible server)
# --------------------------------------------------------------------------


def test_s3_warehouse_end_to_end(small, monkeypatch, tmp_path, s3_uri):
    expected = local_reference(small, tmp_path)
    wh = use_warehouse(monkeypatch, s3_uri, tmp_path / "spool")

    result = small.materialize(DAYS[0], DAYS[-1])
    assert result.success
    assert contents(wh) == expected
    assert_only_data_files(wh)
    # the day locks, on local disk: the three datasets' and the sightings' of the days whose sessions hold secrets
    locks = [p.relative_to(tmp_path / "spool").parts for p in (tmp_path / "spool").rglob(".lock")]
    assert len([p for p in locks if p[2] != SIGHTINGS]) == 3 * len(DAYS)
    assert {p[3] for p in locks if p[2] == SIGHTINGS} <= {f"day={day}" for day in DAYS}
    md = partition_metadata(result)[(SESSIONS, DAYS[1])]
    bucket = s3_uri.split("/")[2]
    assert md["path"] == f"s3://{bucket}/team/warehouse/{SESSIONS}/day={DAYS[1]}/{HOST_DIR}/{PART_FILE}"
    assert all(c.passed for c in result.get_asset_check_evaluations())

    # idempotent: nothing is rewritten
    again = small.materialize(DAYS[0], DAYS[-1])
    assert again.success and not any(changed_files(again).values())

    # what a user does with it: one hive-partitioned dataset over the bucket
    fs, root = pafs.FileSystem.from_uri(s3_uri)
    table = pads.dataset(
        f"{root}/{GATEWAY}", filesystem=fs, format="parquet", partitioning="hive", exclude_invalid_files=False
    ).to_table()
    assert table.num_rows == sum(len(rows) for (ds, _), rows in expected.items() if ds == GATEWAY)
    assert sorted({str(d) for d in table.column("day").to_pylist()}) == DAYS


def test_s3_warehouse_keeps_rows_when_the_store_is_replaced(small, monkeypatch, tmp_path, s3_uri):
    wh = use_warehouse(monkeypatch, s3_uri, tmp_path / "spool")
    assert small.materialize(DAYS[0], DAYS[1]).success
    before = contents(wh)

    small.store.unlink()  # Hermes reinstalled: a fresh, empty store
    with HermesWriter(small.store, home=small.home) as w:
        w.session("fresh-1")
    assert small.materialize(DAYS[0], DAYS[1]).success

    after = contents(wh)
    assert after.keys() == before.keys()
    for (ds, day), rows in after.items():
        assert len(rows) == len(before[(ds, day)])
        assert all(source_deleted(_parsed(r, ds), ds) for r in rows), (ds, day)


def test_the_analytics_layer_and_loading_on_an_s3_warehouse(small, monkeypatch, tmp_path, s3_uri, instance):
    """On object storage: the analytics assets write their days into the bucket
    (one upload each, the same bytes as on a local disk), and the ``hermes_datasets`` IO
    manager loads any dataset's day back from it, in the same types as from a local path."""
    everything = (*DATASETS, *ANALYTICS)
    local = tmp_path / "posix-warehouse"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HERMES_ASSETS_WAREHOUSE", str(local))
        assert small.materialize(DAYS[0], DAYS[-1], select=everything).success
        local_defs = small.defs()
        expected = {
            (name, day): local_defs.load_asset_value(name, partition_key=day, python_type=pa.Table, instance=instance)
            for name in everything
            for day in (DAYS[1], SMALL_DAYS[-1])
        }
    wh = use_warehouse(monkeypatch, s3_uri, tmp_path / "spool")
    assert small.materialize(DAYS[0], DAYS[-1], select=everything).success
    assert_only_data_files(wh)
    for name in ANALYTICS:
        # the days the local run wrote: a derived day without a row has no file (no skill loaded, say)
        written = sorted(path.parent.name.removeprefix("day=") for path in (local / name).glob(f"day=*/{PART_FILE}"))
        assert written and set(written) <= set(DAYS), name
        assert wh.days(name) == written, name
        for day in written:
            with wh.storage.fs.open_input_file(wh.path(name, day)) as f:
                assert f.read() == (local / name / f"day={day}" / PART_FILE).read_bytes(), (name, day)
    defs = small.defs()
    for (name, day), table in expected.items():
        got = defs.load_asset_value(name, partition_key=day, python_type=pa.Table, instance=instance)
        assert got.equals(table), (name, day)
        if day == SMALL_DAYS[-1]:  # not captured into the bucket: an empty day, typed all the same
            assert got.num_rows == 0 and got.schema == table.schema
    frame = defs.load_asset_value(
        GATEWAY, partition_key=DAYS[1], instance=instance, metadata={"columns": ["session_id", "attributes"]}
    )
    assert list(frame.columns) == ["session_id", "attributes"] and str(frame["attributes"].dtype) == "str"
