"""Several hosts, one warehouse (SPEC §2): each host's files are its own, every row names its
host, a host whose label is set scopes its ids, and a warehouse from before moves in place.

Two hosts here are two :class:`Warehouse` objects on one root with their own labels, each
capturing its own store (written by the real Hermes writer) with the same session ids.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest
import structlog

from hermes_assets.defs import settings
from hermes_assets.lib.analytics import daily
from hermes_assets.lib.analytics.tools import daily_tools
from hermes_assets.lib.analytics.usage import daily_usage
from hermes_assets.lib.basics import ids
from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS, SIGHTINGS
from hermes_assets.lib.hosts import host_labels
from hermes_assets.lib.hosts.host_claims import CLAIMS
from hermes_assets.lib.source.stores import Store, on_host
from hermes_assets.lib.warehouse import partition_file, purge
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.host_layout import LAYOUT_MARK, PART_FILE, SIGHTINGS_STAMP
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
    assert host_labels.check_label("gateway-01.prod_2") == "gateway-01.prod_2"
    for bad in ("", "../x", "a/b", ".hidden", "-x", "x" * 64, "a b", "host=x"):
        with pytest.raises(ValueError):
            host_labels.check_label(bad)
    assert host_labels.default_label("Box-7.example.org") == "Box-7"
    assert host_labels.default_label("my box!") == "my-box-"
    assert host_labels.default_label("...") == "host"
    assert host_labels.check_label(host_labels.default_label())  # this machine's


#: labels a reader of hive partitions would type as a number, a date or a null
TYPED = ("123", "0x10", "20260601", "2026-06-01", "1e5", "epoch", "Inf", "infinity", "NULL", "true", "nan")


def test_a_label_a_reader_would_type_as_a_number_or_a_date_is_refused_and_a_hostname_made_text(tmp_path):
    for typed in TYPED:
        with pytest.raises(ValueError, match="starting with a letter"):
            host_labels.check_label(typed)
        with pytest.raises(ConfigurationError, match=re.escape(f"HERMES_ASSETS_HOST={typed!r}")):
            settings.load({"HERMES_ASSETS_WAREHOUSE": str(tmp_path), "HERMES_ASSETS_HOST": typed})
    assert host_labels.default_label("123.example.org") == "host-123"
    assert host_labels.default_label("epoch") == "host-epoch"
    assert host_labels.check_label("e5") == "e5" and host_labels.check_label("infinity1") == "infinity1"


def test_every_hosts_label_reads_back_as_text_whichever_hosts_a_glob_finds(two_hosts, tmp_path):
    """One host's files alone (a glob of ``host=<label>``) or every host's: ``host`` is text,
    in DuckDB and pyarrow, and equals the column in the files; a hostname of digits included."""
    root = tmp_path / "wh"
    labels = {"alpha": "alpha", "beta": host_labels.default_label("20260601")}  # a machine named by digits
    for name, path in two_hosts.items():
        wh = Warehouse(str(root), host=labels[name])
        capture_days([store_of(path, labels[name])], wh, days=[DAY])
    for label in labels.values():
        glob = f"{root}/{SESSIONS}/day=*/host={label}/*.parquet"
        typed = duckdb.sql(f"SELECT DISTINCT typeof(host), host FROM read_parquet('{glob}', hive_partitioning = true)")
        assert typed.fetchall() == [("VARCHAR", label)]
        one = pads.dataset(root / SESSIONS / f"day={DAY}" / f"host={label}", partitioning="hive").to_table()
        assert one.schema.field("host").type == pa.string() and set(one["host"].to_pylist()) == {label}
    every = pads.dataset(root / SESSIONS, format="parquet", partitioning="hive").to_table()
    assert every.schema.field("host").type == pa.string()
    assert sorted(set(every["host"].to_pylist())) == sorted(labels.values())


def test_the_host_setting_is_checked_and_defaults_to_the_hostname(tmp_path):
    unset = settings.load({"HERMES_ASSETS_WAREHOUSE": str(tmp_path)})
    assert unset.host is None and unset.host_label == host_labels.default_label()
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


def both_capture_the_day(kind, two_hosts, tmp_path):
    """Each host captures its store's ``DAY`` into one warehouse root: the root, and each host's warehouse."""
    root = tmp_path / "wh"
    wh = {name: open_host(kind, root, name, tmp_path) for name in two_hosts}
    for name, path in two_hosts.items():
        capture_days([store_of(path, name)], wh[name], days=[DAY])
    return root, wh


@pytest.mark.parametrize("kind", KINDS)
def test_two_hosts_write_one_day_and_neither_replaces_the_other(kind, two_hosts, tmp_path):
    root, wh = both_capture_the_day(kind, two_hosts, tmp_path)
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
    root, wh = both_capture_the_day(kind, two_hosts, tmp_path)
    inputs = {name: DatasetDays(wh["alpha"], name, [DAY], cols) for name, cols in daily.INPUTS.items()}
    _, figures = daily.write_current_day(
        wh["alpha"], daily.USAGE, DAY, functools.partial(daily.read_inputs, inputs, DAY)
    )
    assert figures.totals["sessions"] == 4 and figures.totals["tool_calls"] == 2
    # the same as a recomputation from each host's own files put together
    own = {
        name: pa.concat_tables([wh[h].read_own(name, DAY, columns=cols) for h in wh])
        for name, cols in daily.INPUTS.items()
    }
    assert wh["beta"].read(daily.USAGE, DAY) == daily_usage(DAY, own[SESSIONS], own[MESSAGES], own[GATEWAY]).table
    # the other host computing it again leaves the same file
    before = (root / daily.USAGE / f"day={DAY}" / PART_FILE).read_bytes()
    daily.write_current_day(wh["beta"], daily.USAGE, DAY, functools.partial(daily.read_inputs, inputs, DAY))
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
    assert alpha.read(daily.TOOLS, DAY) == daily_tools(DAY, alpha.read(GATEWAY, DAY), alpha.read(MESSAGES, DAY)).table


@pytest.mark.parametrize("kind", KINDS)
def test_a_host_whose_analytics_file_was_replaced_while_it_computed_computes_again(kind, two_hosts, tmp_path):
    """Two hosts finish the same day at once: the other host captures the day and writes its
    analytics while this one computes from the older files. This host's write is conditional
    on the file it read (no file yet): it is refused, and it computes again from every host's
    files, so neither host's rows are missing from the day's one figure."""
    root = tmp_path / "wh"
    alpha, beta = open_host(kind, root, "alpha", tmp_path), open_host(kind, root, "beta", tmp_path)
    capture_days([store_of(two_hosts["alpha"], "alpha")], alpha, days=[DAY])
    inputs = {h.host: {n: DatasetDays(h, n, [DAY], c) for n, c in daily.INPUTS.items()} for h in (alpha, beta)}
    reads = []

    def alpha_reads():
        tables = daily.read_inputs(inputs["alpha"], DAY)
        if not reads:  # beta finishes the day (its files, then its analytics) before alpha writes
            capture_days([store_of(two_hosts["beta"], "beta")], beta, days=[DAY])
            daily.write_current_day(beta, daily.TOOLS, DAY, functools.partial(daily.read_inputs, inputs["beta"], DAY))
        reads.append(tables)
        return tables

    with structlog.testing.capture_logs() as events:
        daily.write_current_day(alpha, daily.TOOLS, DAY, alpha_reads)
    assert "file_replaced" in [e.get("reason") for e in events if e["event"] == "hermes.analytics.recomputed"]
    assert alpha.read(daily.TOOLS, DAY) == daily_tools(DAY, alpha.read(GATEWAY, DAY), alpha.read(MESSAGES, DAY)).table
    assert pc.sum(alpha.read(daily.TOOLS, DAY)["calls"]).as_py() == 2  # both hosts' tool calls


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
    column, no sightings): what that version wrote. -> the host's files as they were, by dataset
    and day."""
    before = {}
    for path in sorted(root.glob(f"{SIGHTINGS}/day=*/{host_labels.folder(host)}/{PART_FILE}")):
        before[f"{SIGHTINGS}/{path.parent.parent.name}"] = path.read_bytes()
        shutil.rmtree(path.parent)
    for stamp in root.glob(f".staging/*/{SIGHTINGS_STAMP}"):
        stamp.unlink()
    found = [root.glob(f"{dataset}/day=*/{host_labels.folder(host)}/{PART_FILE}") for dataset in CAPTURE_DATASETS]
    for path in sorted(p for paths in found for p in paths):
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
    shutil.rmtree(root / CLAIMS, ignore_errors=True)  # nor any claim: on the ids, a label or a store
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
    assert not moved.ids_scoped  # the host that moved it keeps its ids: its rows stay identical
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


def _two_unnamed_hosts(tmp_path) -> dict[str, Warehouse]:
    """Two hosts whose label is their hostname (``HERMES_ASSETS_HOST`` unset) on one folder."""
    return {name: Warehouse(str(tmp_path / "wh"), host=name) for name in ("alpha", "beta")}


def test_two_hosts_left_unnamed_never_share_an_id(two_hosts, tmp_path):
    """The first host of a warehouse keeps the ids a single host always had; every other host
    scopes its ids by its label, set or the hostname: colliding session ids stay unique."""
    wh = _two_unnamed_hosts(tmp_path)
    settled = {name: wh[name].adopt_legacy().ids_scoped for name in ("alpha", "beta")}
    assert settled == {"alpha": False, "beta": True}
    for name, path in two_hosts.items():
        capture_days([store_of(path, name, scoped=settled[name])], wh[name], days=[DAY])
    for dataset, key in ((SESSIONS, None), (MESSAGES, None), (GATEWAY, "part_id")):
        table = wh["alpha"].read(dataset, DAY)
        if key is None:  # a raw row: its session's id and its own
            key_rows = list(zip(*(table[c].to_pylist() for c in ("host", "id"))))
            assert len(set(key_rows)) == len(key_rows)
        else:
            assert len(set(table[key].to_pylist())) == table.num_rows, dataset
    sessions = {s for s in wh["alpha"].read(GATEWAY, DAY)["session_id"].to_pylist()}
    assert sessions == {"hermes-a", "hermes-b", "hermes-beta:a", "hermes-beta:b"}
    # settled once: the next runs, and a host whose spool was lost (a reboot), say the same
    for name in wh:
        assert wh[name].adopt_legacy().ids_scoped is settled[name]
        for mark in (tmp_path / "wh" / ".staging").glob(f"*/{LAYOUT_MARK}"):
            mark.unlink()
        assert Warehouse(str(tmp_path / "wh"), host=name).adopt_legacy().ids_scoped is settled[name]


def test_two_unnamed_hosts_settling_at_once_never_both_keep_the_unscoped_ids(tmp_path):
    wh = _two_unnamed_hosts(tmp_path)
    # beta has written its claim and not yet listed the others when alpha settles
    (tmp_path / "wh" / CLAIMS).mkdir(parents=True)
    (tmp_path / "wh" / CLAIMS / "host=beta").write_text("trying\n")
    assert wh["alpha"].settle_ids() is True  # it saw beta's claim: it scopes its ids
    # beta lists the claims now: alpha gave up, so beta keeps them; one host at most ever does
    assert wh["beta"].settle_ids() is False
    assert wh["alpha"].claims() == {"alpha": "scoped", "beta": "unscoped"}
    assert wh["alpha"].settle_ids() is True and wh["beta"].settle_ids() is False  # settled: kept


def _open_vm(kind: str, root: Path, spool: Path) -> Warehouse:
    return Warehouse(str(root), host="vm") if kind == "local" else Warehouse(root.as_uri(), spool=str(spool), host="vm")


def _settle_at_once(kind: str, root: Path, spool: Path, runs: int) -> list[bool]:
    """``runs`` runs of host ``vm`` (threads; each its own warehouse) adopting the warehouse at once."""
    barrier = threading.Barrier(runs)

    def start(_: int) -> bool:
        wh = _open_vm(kind, root, spool)
        barrier.wait()
        return wh.adopt_legacy().ids_scoped

    with ThreadPoolExecutor(runs) as pool:
        return list(pool.map(start, range(runs)))


@pytest.mark.parametrize("kind", ["local", "uri"])
def test_runs_of_one_host_starting_at_once_settle_it_once(kind, tmp_path):
    """The sensor's first runs on a new warehouse start together: one settles the host (its
    claim on the ids), the others find it settled; none fails on another's claim write."""
    for attempt in range(20):
        root, spool = tmp_path / f"wh{attempt}", tmp_path / f"spool{attempt}"
        # a host alone keeps the unscoped ids, settled once
        assert _settle_at_once(kind, root, spool, 4) == [False] * 4, attempt
        assert _open_vm(kind, root, spool).claims() == {"vm": "unscoped"}


def test_a_named_host_scopes_its_ids_unless_it_moved_the_warehouse_from_before(two_hosts, tmp_path):
    assert Warehouse(str(tmp_path / "wh"), host="gw", host_named=True).adopt_legacy().ids_scoped is True
    # the host that moves a warehouse from before keeps its ids, named or not: its rows stay identical
    root = tmp_path / "old"
    first = Warehouse(str(root), host="alpha")
    capture_days([store_of(two_hosts["alpha"], "alpha", scoped=False)], first, days=[DAY])
    before = make_legacy(root, "alpha")
    moved = Warehouse(str(root), host="alpha", host_named=True).adopt_legacy()
    assert moved.files == 3 and moved.ids_scoped is False
    assert {
        f"{p.parts[-4]}/{p.parent.parent.name}": p.read_bytes() for p in root.glob(f"*/day=*/host=alpha/{PART_FILE}")
    } == before
    # a host that comes after it scopes its ids, its label set or not
    assert Warehouse(str(root), host="beta").adopt_legacy().ids_scoped is True


@pytest.mark.parametrize("kind", KINDS)
def test_a_days_analytics_whose_inputs_moved_after_they_were_computed_are_computed_again(kind, two_hosts, tmp_path):
    """Several analytics of a day written from figures computed before another host wrote the day:
    the inputs' stamps, taken once after every dataset's write, tell each dataset computed from
    the older files, which is computed again from the files as they are (only those)."""
    root = tmp_path / "wh"
    alpha, beta = open_host(kind, root, "alpha", tmp_path), open_host(kind, root, "beta", tmp_path)
    capture_days([store_of(two_hosts["alpha"], "alpha")], alpha, days=[DAY])
    inputs = {name: DatasetDays(alpha, name, [DAY], cols) for name, cols in daily.INPUTS.items()}
    read = functools.partial(daily.read_inputs, inputs, DAY)
    first = daily.read_day(alpha, DAY, read)
    stale = daily.compute_days(list(daily.ANALYTICS), DAY, first.tables)
    capture_days([store_of(two_hosts["beta"], "beta")], beta, days=[DAY])  # after alpha's read

    # figures said computed from the gateway's older file alone: only the datasets that read it are
    # computed again (the skills, from the messages alone, are taken as they are)
    stamps = {**{name: alpha.day_stamp(name, DAY) for name in daily.INPUTS}, GATEWAY: first.stamps[GATEWAY]}
    with structlog.testing.capture_logs() as events:
        out = daily.write_current_datasets(alpha, [daily.SKILLS, daily.TOOLS], DAY, read, stamps, stale)
    assert [(e["dataset"], e["reason"]) for e in events if e["event"] == "hermes.analytics.recomputed"] == [
        (daily.TOOLS, "inputs_moved")
    ]
    skills = out[daily.SKILLS]
    assert not isinstance(skills, Exception) and skills[1] is stale[daily.SKILLS]
    assert not isinstance(out[daily.TOOLS], Exception) and out[daily.TOOLS][1].totals["tool_calls"] == 2

    # every input moved: each dataset computed again, its file the one a recomputation gives
    with structlog.testing.capture_logs() as events:
        out = daily.write_current_datasets(alpha, list(daily.ANALYTICS), DAY, read, first.stamps, stale)
    recomputed = [e["dataset"] for e in events if e["event"] == "hermes.analytics.recomputed"]
    assert recomputed == list(daily.ANALYTICS)
    fresh = daily.compute_days(list(daily.ANALYTICS), DAY, read())
    for dataset in daily.ANALYTICS:
        got = out[dataset]
        assert not isinstance(got, Exception) and got[1].table == fresh[dataset].table
        assert alpha.read(dataset, DAY) == (fresh[dataset].table if fresh[dataset].table.num_rows else None)
    assert out[daily.USAGE][1].totals["sessions"] == 4 != stale[daily.USAGE].totals["sessions"]

    # nothing moved since: each written from its figures, the inputs' stamps taken once for them all
    now = daily.read_day(alpha, DAY, read)
    figures = daily.compute_days(list(daily.ANALYTICS), DAY, now.tables)
    looked: list[str] = []
    stamp = alpha.day_stamp

    def counted(dataset, day):
        looked.append(dataset)
        return stamp(dataset, day)

    alpha.day_stamp = counted  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as events:
        out = daily.write_current_datasets(alpha, list(daily.ANALYTICS), DAY, read, now.stamps, figures)
    assert not [e for e in events if e["event"] == "hermes.analytics.recomputed"]
    assert sorted(looked) == sorted(daily.INPUTS)
    assert all(not isinstance(got, Exception) and got[1] is figures[dataset] for dataset, got in out.items())
