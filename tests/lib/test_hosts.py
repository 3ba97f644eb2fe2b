"""Several hosts, one warehouse (SPEC §2): each host's files are its own, every row names its
host, a host whose label is set scopes its ids, and a warehouse from before moves in place.

Two hosts here are two :class:`Warehouse` objects on one root with their own labels, each
capturing its own store (written by the real Hermes writer) with the same session ids.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hermes_assets.defs import settings
from hermes_assets.lib import ids
from hermes_assets.lib.analytics import daily
from hermes_assets.lib.errors import ConfigurationError
from hermes_assets.lib.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.source.stores import Store, on_host
from hermes_assets.lib.warehouse import hosts, partition_file, purge
from hermes_assets.lib.warehouse.datasets import LAYOUT_MARK, PART_FILE, Warehouse
from hermes_assets.lib.warehouse.loading import DatasetDays
from hermes_assets.lib.warehouse.read_marks import READ_AT_FILE
from tests.support.capture_run import capture_days
from tests.support.hermes_writer import START_S, HermesWriter, openai_call

DAY = "2026-06-01"
KINDS = ("local", "file")


def write_store(path: Path, words: str) -> Path:
    """Sessions ``a`` and ``b`` (the same ids on every host), ``a`` in /work/secret with a tool call."""
    with HermesWriter(path, start_s=START_S) as w:
        w.session("a", "cli", cwd="/work/secret", model="m1")
        w.msg("a", "user", f"{words} one")
        w.msg("a", "assistant", "", tool_calls=[openai_call("c1", "terminal", {"cmd": "ls"})])
        w.msg("a", "tool", '{"exit_code": 0}', tool_call_id="c1", tool_name="terminal")
        w.end("a")
        w.session("b", "cli", cwd="/work/open", model="m2")
        w.msg("b", "user", f"{words} two")
    return path


def open_host(kind: str, root: Path, host: str | None, tmp_path: Path) -> Warehouse:
    if kind == "local":
        return Warehouse(str(root), host=host)
    return Warehouse(root.as_uri(), spool=str(tmp_path / f"spool-{host}"), host=host)


def store_of(path: Path, host: str, *, scoped: bool = True) -> Store:
    return on_host([Store(str(path))], host, scoped=scoped)[0]


@pytest.fixture
def two_hosts(tmp_path):
    return {
        "alpha": write_store(tmp_path / "alpha" / "state.db", "alpha says"),
        "beta": write_store(tmp_path / "beta" / "state.db", "beta says"),
    }


def test_a_host_label_is_a_safe_path_segment():
    assert hosts.check_label("gateway-01.prod_2") == "gateway-01.prod_2"
    for bad in ("", "../x", "a/b", ".hidden", "-x", "x" * 64, "a b", "host=x"):
        with pytest.raises(ValueError):
            hosts.check_label(bad)
    assert hosts.default_label("Box-7.example.org") == "Box-7"
    assert hosts.default_label("my box!") == "my-box-"
    assert hosts.default_label("...") == "host"
    assert hosts.check_label(hosts.default_label())  # this machine's


def test_the_host_setting_is_checked_and_defaults_to_the_hostname(tmp_path):
    unset = settings.load({"HERMES_ASSETS_WAREHOUSE": str(tmp_path)})
    assert unset.host is None and unset.host_label == hosts.default_label()
    named = settings.load({"HERMES_ASSETS_WAREHOUSE": str(tmp_path), "HERMES_ASSETS_HOST": "gw-1"})
    assert named.host == named.host_label == "gw-1"
    with pytest.raises(ConfigurationError, match=re.escape("HERMES_ASSETS_HOST='../etc'")):
        settings.load({"HERMES_ASSETS_WAREHOUSE": str(tmp_path), "HERMES_ASSETS_HOST": "../etc"})


def test_a_host_joins_the_id_scope_only_when_its_label_is_set():
    assert ids.host_scope(None, "") == "" and ids.host_scope(None, "work") == "work"
    assert ids.host_scope("gw", "") == "gw" and ids.host_scope("gw", "work") == "gw/work"
    assert ids.session_id(ids.host_scope("gw", "work"), "a") == "hermes-gw/work:a"
    single = store_of(Path("/h/state.db"), "box", scoped=False)
    assert (single.label, single.host) == ("", "box")  # one host: its ids as they always were


@pytest.mark.parametrize("kind", KINDS)
def test_two_hosts_write_one_day_and_neither_replaces_the_other(kind, two_hosts, tmp_path):
    root = tmp_path / "wh"
    wh = {name: open_host(kind, root, name, tmp_path) for name in two_hosts}
    for name, path in two_hosts.items():
        capture_days([store_of(path, name)], wh[name], days=[DAY])
    for dataset in CAPTURE_DATASETS:
        assert sorted(p.parent.name for p in (root / dataset / f"day={DAY}").glob(f"host=*/{PART_FILE}")) == [
            "host=alpha",
            "host=beta",
        ]
        assert not (root / dataset / f"day={DAY}" / PART_FILE).exists()
    # every row of both stores, each naming its host; the colliding ids kept apart
    sessions = wh["alpha"].read(SESSIONS, DAY)
    assert sorted(zip(sessions["host"].to_pylist(), sessions["id"].to_pylist())) == [
        ("alpha", "a"),
        ("alpha", "b"),
        ("beta", "a"),
        ("beta", "b"),
    ]
    gateway = wh["beta"].read(GATEWAY, DAY)
    part_ids = gateway["part_id"].to_pylist()
    assert len(part_ids) == len(set(part_ids))
    assert {s for s in gateway["session_id"].to_pylist()} == {
        "hermes-alpha:a",
        "hermes-alpha:b",
        "hermes-beta:a",
        "hermes-beta:b",
    }
    for row in gateway.select(["host", "session_id"]).to_pylist():
        assert row["session_id"].startswith(f"hermes-{row['host']}:")
    texts = pc.drop_null(wh["alpha"].read(MESSAGES, DAY)["content"]).to_pylist()
    assert {"alpha says one", "beta says one"} <= set(texts)
    # one glob, or a hive-partitioned read, finds every row
    for dataset in CAPTURE_DATASETS:
        glob = f"{root}/{dataset}/*/*/*.parquet"
        hive = duckdb.sql(f"SELECT host, count(*) FROM read_parquet('{glob}', hive_partitioning = true) GROUP BY host")
        assert sorted(hive.fetchall()) == sorted(
            (h, t.num_rows) for h in wh for t in [wh[h].read_own(dataset, DAY)] if t is not None
        )
    assert wh["alpha"].own_days(SESSIONS) == wh["beta"].days(SESSIONS) == [DAY]
    # a re-run of either host writes nothing new
    for name, path in two_hosts.items():
        _, again = capture_days([store_of(path, name)], wh[name], days=[DAY])
        assert not any(r.changed for results in again.results.values() for r in results)


@pytest.mark.parametrize("kind", KINDS)
def test_the_analytics_of_a_day_are_computed_over_every_host(kind, two_hosts, tmp_path):
    root = tmp_path / "wh"
    wh = {name: open_host(kind, root, name, tmp_path) for name in two_hosts}
    for name, path in two_hosts.items():
        capture_days([store_of(path, name)], wh[name], days=[DAY])
    inputs = {name: DatasetDays(wh["alpha"], name, [DAY], cols) for name, cols in daily.INPUTS.items()}
    _, figures = daily.write_current_day(
        wh["alpha"], daily.USAGE, DAY, lambda: {n: d.read(DAY) for n, d in inputs.items()}
    )
    assert figures.totals["sessions"] == 4 and figures.totals["tool_calls"] == 2
    # the same as a recomputation from each host's own files put together
    own = {
        name: pa.concat_tables([wh[h].read_own(name, DAY, columns=cols) for h in wh])
        for name, cols in daily.INPUTS.items()
    }
    assert wh["beta"].read(daily.USAGE, DAY) == daily.daily_usage(DAY, own[SESSIONS], own[MESSAGES], own[GATEWAY]).table
    # the other host computing it again leaves the same file
    before = (root / daily.USAGE / f"day={DAY}" / PART_FILE).read_bytes()
    daily.write_current_day(wh["beta"], daily.USAGE, DAY, lambda: {n: d.read(DAY) for n, d in inputs.items()})
    assert (root / daily.USAGE / f"day={DAY}" / PART_FILE).read_bytes() == before


def test_analytics_computed_while_another_host_writes_are_computed_again(two_hosts, tmp_path):
    """A host whose inputs changed under it (another host wrote the day) computes again, from
    the files as they are: the file it leaves equals a recomputation."""
    root = tmp_path / "wh"
    alpha, beta = Warehouse(str(root), host="alpha"), Warehouse(str(root), host="beta")
    capture_days([store_of(two_hosts["alpha"], "alpha")], alpha, days=[DAY])
    inputs = {name: DatasetDays(alpha, name, [DAY], cols) for name, cols in daily.INPUTS.items()}
    reads = []

    def read():
        tables = {n: d.read(DAY) for n, d in inputs.items()}
        if not reads:  # the first read is stale: the other host writes its files right after it
            capture_days([store_of(two_hosts["beta"], "beta")], beta, days=[DAY])
        reads.append(tables)
        return tables

    _, figures = daily.write_current_day(alpha, daily.TOOLS, DAY, read)
    assert len(reads) == 2 and figures.totals["tool_calls"] == 2
    assert alpha.read(daily.TOOLS, DAY) == daily.daily_tools(DAY, alpha.read(GATEWAY, DAY)).table


def test_a_purge_removes_a_scope_from_the_hosts_own_files_only(two_hosts, tmp_path):
    root = tmp_path / "wh"
    wh = {name: Warehouse(str(root), host=name) for name in two_hosts}
    for name, path in two_hosts.items():
        capture_days([store_of(path, name)], wh[name], days=[DAY])
    beta_files = {p: p.read_bytes() for p in root.glob(f"*/day=*/host=beta/{PART_FILE}")}
    result = purge.purge(wh["alpha"], scope="/work/secret")
    assert result.removed[SESSIONS] == 1 and result.sessions == 1
    sessions = wh["alpha"].read(SESSIONS, DAY)
    assert sorted(zip(sessions["host"].to_pylist(), sessions["id"].to_pylist())) == [
        ("alpha", "b"),
        ("beta", "a"),
        ("beta", "b"),
    ]
    assert {p: p.read_bytes() for p in beta_files} == beta_files


def make_legacy(root: Path, host: str) -> dict[str, bytes]:
    """Turn a host's files into the layout from before hosts (one file per day, no ``host``
    column): what that version wrote. -> the host's files as they were, by dataset and day."""
    before = {}
    for path in sorted(root.glob(f"*/day=*/{hosts.folder(host)}/{PART_FILE}")):
        dataset, day_dir = path.parts[-4], path.parent.parent
        before[f"{dataset}/{day_dir.name}"] = path.read_bytes()
        data = pa.py_buffer(path.read_bytes())
        old = partition_file.decode(dataset, data).drop_columns(["host"])
        legacy = partition_file.encode(dataset, old, partition_file.redaction_version(data))
        (day_dir / PART_FILE).write_bytes(legacy.to_pybytes())
        os.replace(path.parent / READ_AT_FILE, day_dir / READ_AT_FILE)
        for leftover in path.parent.iterdir():
            leftover.unlink()
        path.parent.rmdir()
    for mark in root.glob(f".staging/*/{LAYOUT_MARK}"):  # that version left no mark of the move
        mark.unlink()
    return before


def test_a_warehouse_from_before_moves_to_the_hosts_layout_with_identical_rows(two_hosts, tmp_path):
    root = tmp_path / "wh"
    first = Warehouse(str(root), host="alpha")
    capture_days([store_of(two_hosts["alpha"], "alpha", scoped=False)], first, days=[DAY])
    before = make_legacy(root, "alpha")
    assert len(before) == 3 and not list(root.glob(f"*/day=*/host=*/{PART_FILE}"))
    # read before the move (the legacy file), its rows are there
    legacy = Warehouse(str(root), host="alpha")
    assert legacy.read(SESSIONS, DAY).num_rows == 2 and legacy.days(SESSIONS) == [DAY]
    moved = legacy.adopt_legacy()
    assert (moved.files, moved.days) == (3, {DAY}) and moved.rows > 0
    after = {
        f"{p.parts[-4]}/{p.parent.parent.name}": p.read_bytes()
        for p in sorted(root.glob(f"*/day=*/host=alpha/{PART_FILE}"))
    }
    assert after == before  # the same bytes: the same rows, their host filled in
    assert not list(root.glob(f"*/day=*/{PART_FILE}")) and not list(root.glob(f"*/day=*/{READ_AT_FILE}"))
    assert legacy.adopt_legacy().files == 0
    # the next run reads, merges and writes as if nothing had happened
    _, again = capture_days([store_of(two_hosts["alpha"], "alpha", scoped=False)], legacy, days=[DAY])
    assert not any(r.changed for results in again.results.values() for r in results)


def test_a_move_killed_after_the_hosts_file_was_written_keeps_that_file(two_hosts, tmp_path):
    root = tmp_path / "wh"
    wh = Warehouse(str(root), host="alpha")
    capture_days([store_of(two_hosts["alpha"], "alpha", scoped=False)], wh, days=[DAY])
    own = root / SESSIONS / f"day={DAY}" / "host=alpha" / PART_FILE
    written = own.read_bytes()
    # the old file still beside it: killed between writing the host's file and removing the old one
    (own.parent.parent / PART_FILE).write_bytes(written)
    assert wh.read(SESSIONS, DAY).num_rows == 2  # a reader never counts a row twice
    assert wh.adopt_legacy().files == 1
    assert own.read_bytes() == written and not (own.parent.parent / PART_FILE).exists()


def test_staging_left_by_a_warehouse_from_before_becomes_the_moving_hosts(two_hosts, tmp_path):
    """A run of the version from before staged under ``.staging/<run id>``: the host that moves
    the warehouse takes it into its own staging folder, where its sweep and purge find it."""
    root = tmp_path / "wh"
    wh = Warehouse(str(root), host="alpha")
    old_run = root / ".staging" / "0b7a4c1e-old-run"
    old_run.mkdir(parents=True)
    (old_run / f"{SESSIONS}.{DAY}.0.arrow").write_bytes(b"staged")
    wh.adopt_legacy()
    assert not old_run.exists()
    assert (Path(wh.staging_root) / old_run.name / f"{SESSIONS}.{DAY}.0.arrow").read_bytes() == b"staged"
    assert sorted(p.name for p in (root / ".staging").iterdir()) == ["host=alpha"]
