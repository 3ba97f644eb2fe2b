"""What to rotate over several hosts of one warehouse: one secret is one row only when the hosts
share the redaction key; each host's sightings are its own files; the table computed while another
host writes (its sightings, or the table) is computed again; a relabeled host's sightings move with
its files.

Two hosts are two :class:`Warehouse` objects on one root (a folder, and the same through
``file://``), each capturing its own store, written by Hermes's real writer, that holds the
same GitHub token (and one key of its own).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_assets.lib.basics.schemas import EXPOSURES, SIGHTINGS
from hermes_assets.lib.redaction import exposures, sighting_files
from hermes_assets.lib.redaction.redactor import RedactionConfig
from hermes_assets.lib.source.stores import Store, on_host
from hermes_assets.lib.warehouse import relabel
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.support import fake_keys
from tests.support.capture_run import capture_days
from tests.support.hermes_writer import START_S, HermesWriter

DAY = "2026-06-01"


@pytest.fixture
def shared_token(tmp_path) -> dict:
    token = fake_keys.github()
    own = {"alpha": fake_keys.stripe(), "beta": fake_keys.openai()}
    stores = {}
    for host in ("alpha", "beta"):
        path = tmp_path / host / "state.db"
        with HermesWriter(path, start_s=START_S) as w:
            w.msg(w.session("s1", "cli"), "user", f"{host} uses {token} and {own[host]}")
        stores[host] = on_host([Store(str(path))], host, scoped=True)[0]
    return {"token": token, "own": own, "stores": stores}


def key_file(path: Path) -> RedactionConfig:
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return RedactionConfig(str(path))


def open_host(kind: str, root: Path, host: str, tmp_path: Path) -> Warehouse:
    if kind == "local":
        return Warehouse(str(root), host=host)
    return Warehouse(root.as_uri(), spool=str(tmp_path / f"spool-{host}"), host=host)


@pytest.mark.parametrize("kind", ("local", "file"))
def test_one_secret_of_two_hosts_is_one_row_when_they_share_the_key(kind, shared_token, tmp_path):
    root = tmp_path / "wh"
    key = key_file(tmp_path / "shared.key")
    wh = {host: open_host(kind, root, host, tmp_path) for host in ("alpha", "beta")}
    for host in wh:
        capture_days([shared_token["stores"][host]], wh[host], days=[DAY], redaction=key)
    # each host wrote its own file of the day
    assert sorted(p.parent.name for p in (root / SIGHTINGS).rglob("part-0.parquet")) == ["host=alpha", "host=beta"]
    _, found = exposures.write_current(wh["alpha"])
    rows = {r["last4"]: r for r in found.table.to_pylist()}
    token = rows[shared_token["token"][-4:]]
    assert token["hosts"] == ["alpha", "beta"] and token["sessions"] == 2 and token["still_in_store"]
    assert len(rows) == 3  # the token once, and each host's own key
    assert found.totals["secrets"] == 3


def test_with_a_key_each_one_secret_of_two_hosts_is_two_rows(shared_token, tmp_path):
    root = tmp_path / "wh"
    for host in ("alpha", "beta"):
        wh = Warehouse(str(root), host=host)
        capture_days([shared_token["stores"][host]], wh, days=[DAY], redaction=key_file(tmp_path / f"{host}.key"))
    found = exposures.exposures(sighting_files.read_all(Warehouse(str(root), host="alpha")))
    rows = [r for r in found.table.to_pylist() if r["last4"] == shared_token["token"][-4:]]
    assert sorted(r["hosts"][0] for r in rows) == ["alpha", "beta"] and len({r["marker"] for r in rows}) == 2


def test_exposures_computed_while_another_host_writes_are_computed_again(shared_token, tmp_path, monkeypatch):
    root = tmp_path / "wh"
    key = key_file(tmp_path / "shared.key")
    alpha, beta = Warehouse(str(root), host="alpha"), Warehouse(str(root), host="beta")
    capture_days([shared_token["stores"]["alpha"]], alpha, days=[DAY], redaction=key)
    reads = []
    read_all = sighting_files.read_all

    def stale_first(warehouse):
        table = read_all(warehouse)
        if not reads:  # the other host writes its sightings right after the first read
            capture_days([shared_token["stores"]["beta"]], beta, days=[DAY], redaction=key)
        reads.append(table)
        return table

    monkeypatch.setattr(sighting_files, "read_all", stale_first)
    _, found = exposures.write_current(alpha)
    assert len(reads) == 2 and found.totals["secrets"] == 3
    assert alpha.read_whole("hermes_secret_exposures") == exposures.exposures(read_all(alpha)).table


def test_exposures_whose_file_another_host_replaced_meanwhile_are_computed_again(shared_token, tmp_path, monkeypatch):
    root = tmp_path / "wh"
    key = key_file(tmp_path / "shared.key")
    alpha, beta = Warehouse(str(root), host="alpha"), Warehouse(str(root), host="beta")
    capture_days([shared_token["stores"]["alpha"]], alpha, days=[DAY], redaction=key)
    capture_days([shared_token["stores"]["beta"]], beta, days=[DAY], redaction=key)
    read_all = sighting_files.read_all
    reads = []

    def replaced_first(warehouse):
        table = read_all(warehouse)
        if not reads:  # the other host writes the table after this one read its version
            monkeypatch.setattr(sighting_files, "read_all", read_all)
            exposures.write_current(beta)
            monkeypatch.setattr(sighting_files, "read_all", replaced_first)
            # and its file is then one this host did not read: a stale table must not replace it
            (root / EXPOSURES / "part-0.parquet").write_bytes(b"another host's table")
        reads.append(table)
        return table

    monkeypatch.setattr(sighting_files, "read_all", replaced_first)
    _, found = exposures.write_current(alpha)
    assert len(reads) == 2 and found.totals["secrets"] == 3
    assert alpha.read_whole(EXPOSURES) == exposures.exposures(read_all(alpha)).table


def test_a_relabeled_hosts_sightings_move_and_what_to_rotate_names_the_new_label(shared_token, tmp_path):
    key = key_file(tmp_path / "shared.key")
    path = shared_token["stores"]["alpha"].path
    # what the new label computes when it captures the store itself
    fresh = Warehouse(str(tmp_path / "fresh"), host="gamma")
    capture_days(on_host([Store(path)], "gamma", scoped=True), fresh, days=[DAY], redaction=key)
    _, expected = exposures.write_current(fresh)
    root = tmp_path / "wh"
    capture_days([shared_token["stores"]["alpha"]], Warehouse(str(root), host="alpha"), days=[DAY], redaction=key)
    gamma = Warehouse(str(root), host="gamma")
    moved = relabel.relabel(gamma, "alpha", str(tmp_path / "gamma.json"))
    assert moved.sightings == 1
    assert sorted(p.parent.name for p in (root / SIGHTINGS).rglob("part-0.parquet")) == ["host=gamma"]
    _, found = exposures.write_current(gamma)
    assert found.table == expected.table and {h for r in found.table.to_pylist() for h in r["hosts"]} == {"gamma"}
