"""The relabel job's core: a label's files move to another label in place, each row as the new
label writes it, nothing lost, and running it again (or after a kill half-way) finishes it.

The expected rows are the ones the new label writes itself when it captures the same store
into a warehouse of its own (every column, every value; the Parquet bytes may differ in how
a dictionary column is laid out).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS
from hermes_assets.lib.hosts import host_claims, host_identity
from hermes_assets.lib.hosts.unscoped_ids import CLAIM_GIVEN_UP, CLAIM_HELD
from hermes_assets.lib.source.stores import Store, on_host
from hermes_assets.lib.storage.local_files import PRIVATE
from hermes_assets.lib.warehouse import relabel
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.support.capture_run import capture_days

SMALL = Path(__file__).resolve().parents[1] / "fixtures" / "small" / "state.db"


def host_files(root: Path, label: str) -> dict[str, pa.Table]:
    """A label's files, read back (``dataset/day=…`` -> rows)."""
    return {
        f"{p.parts[-4]}/{p.parts[-3]}": pq.read_table(p)
        for p in sorted(root.glob(f"*/day=*/host={label}/part-0.parquet"))
    }


def fresh_files(tmp_path: Path, label: str, store: Path, *, scoped: bool) -> dict[str, pa.Table]:
    """What ``label`` writes when it captures ``store`` itself (into a warehouse of its own)."""
    capture_as(tmp_path / f"fresh-{label}", label, store, scoped=scoped)
    return host_files(tmp_path / f"fresh-{label}", label)


def capture_as(root: Path, label: str, store: Path, *, scoped: bool, days: list[str] | None = None) -> Warehouse:
    wh = Warehouse(str(root), host=label, host_named=scoped)
    wh.settle_ids()
    capture_days(on_host([Store(str(store), label="work")], label, scoped=scoped), wh, days=days)
    return wh


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "hermes" / "state.db"
    path.parent.mkdir()
    shutil.copy(SMALL, path)
    return path


@pytest.mark.parametrize("scoped", [True, False])
def test_a_labels_files_move_to_this_host_as_it_would_write_them(store, tmp_path, scoped):
    root = tmp_path / "wh"
    alpha = capture_as(root, "alpha", store, scoped=scoped)
    held = {str(store): "a" * 32}
    host_claims.settle_host(
        alpha.storage, alpha.root, str(tmp_path / "alpha.json"), "alpha", held, named=scoped, modes=PRIVATE
    )
    expected = fresh_files(tmp_path, "beta", store, scoped=scoped)
    count = len(host_files(root, "alpha"))
    beta = Warehouse(str(root), host="beta")
    moved = relabel.relabel(beta, "alpha", str(tmp_path / "beta.json"))
    assert (moved.files, moved.duplicates) == (count, 0) and moved.rows > 0
    assert host_files(root, "alpha") == {} and host_files(root, "beta") == expected
    assert host_layout_claims(root) == {"host=beta": CLAIM_GIVEN_UP if scoped else CLAIM_HELD}
    claims = host_claims.store_claims(beta.storage, beta.root)
    assert [c.label for c in claims.values()] == ["beta"]
    assert host_identity.read(str(tmp_path / "beta.json")).label == "beta"
    # again: nothing left to move, nothing changes
    again = relabel.relabel(beta, "alpha", str(tmp_path / "beta.json"))
    assert again.files == 0 and host_files(root, "beta") == expected


def host_layout_claims(root: Path) -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in sorted((root / ".hosts").glob("host=*"))}


def test_a_relabel_killed_half_way_is_finished_by_the_next(store, tmp_path, monkeypatch):
    root = tmp_path / "wh"
    capture_as(root, "alpha", store, scoped=True)
    expected = fresh_files(tmp_path, "beta", store, scoped=True)
    moves = 0
    real = relabel._move_day

    def killed(*args, **kwargs):
        nonlocal moves
        moves += 1
        if moves == 5:
            raise KeyboardInterrupt  # the job dies after four days were written under the new label
        return real(*args, **kwargs)

    monkeypatch.setattr(relabel, "_move_day", killed)
    beta = Warehouse(str(root), host="beta")
    with pytest.raises(KeyboardInterrupt):
        relabel.relabel(beta, "alpha", str(tmp_path / "beta.json"))
    assert 0 < len(host_files(root, "beta")) < len(expected)
    monkeypatch.setattr(relabel, "_move_day", real)
    relabel.relabel(beta, "alpha", str(tmp_path / "beta.json"))
    assert host_files(root, "alpha") == {} and host_files(root, "beta") == expected


def test_a_store_captured_under_two_labels_is_held_once_after_a_relabel(store, tmp_path):
    root = tmp_path / "wh"
    capture_as(root, "alpha", store, scoped=True)
    capture_as(root, "beta", store, scoped=True)  # the hostname changed: everything written again
    expected = host_files(root, "beta")
    moved = relabel.relabel(Warehouse(str(root), host="beta"), "alpha", str(tmp_path / "beta.json"))
    assert moved.duplicates == sum(t.num_rows for t in expected.values())  # every row of alpha was beta's too
    assert host_files(root, "alpha") == {} and host_files(root, "beta") == expected


def test_a_host_renames_itself_and_other_hosts_labels_are_not_its_to_move(store, tmp_path):
    root = tmp_path / "wh"
    capture_as(root, "alpha", store, scoped=True)
    identity = str(tmp_path / "alpha.json")
    host_claims.settle_host(Warehouse(str(root)).storage, str(root), identity, "alpha", {}, named=True, modes=PRIVATE)
    expected = fresh_files(tmp_path, "gw-1", store, scoped=True)
    moved = relabel.relabel(Warehouse(str(root), host="alpha"), "alpha", identity, to_label="gw-1")
    assert moved.files == len(expected) and host_files(root, "gw-1") == expected
    assert host_identity.read(identity).label == "gw-1"
    with pytest.raises(ValueError, match="run it on the host"):
        relabel.relabel(Warehouse(str(root), host="gw-1"), "other", identity, to_label="third")
    for dataset in CAPTURE_DATASETS:
        assert not list((root / dataset).glob("day=*/host=alpha"))
