"""One store, one host, once: a host's identity is made once and kept, its label is its own in
the warehouse, and a store is captured under one label only.

Hosts here are identity files of their own (as two ``DAGSTER_HOME``s have) and
:class:`Warehouse` objects on one root; stores are written by the real Hermes writer.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hermes_assets.defs import settings
from hermes_assets.lib.basics.errors import ConfigurationError, HostConflict
from hermes_assets.lib.hosts import host_claims, host_identity
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.store_identity import identities
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.storage.local_files import PRIVATE
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.lib.test_hosts import KINDS, open_host, write_store

LABEL = "gateway-1"


def settle(wh: Warehouse, identity_file: Path, stores: dict[str, str] | None = None, label: str | None = None):
    return host_claims.settle_host(
        wh.storage, wh.root, str(identity_file), label or wh.host, stores or {}, named=True, modes=PRIVATE
    )


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_identity_is_made_once_private_and_random_and_its_label_settled_once(tmp_path):
    path = tmp_path / "home" / host_identity.IDENTITY_FILE
    made = host_identity.load_or_make(str(path))
    assert made.label is None and len(made.id) == 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert host_identity.load_or_make(str(path)) == made  # made once
    other = host_identity.load_or_make(str(tmp_path / "other" / host_identity.IDENTITY_FILE))
    assert other.id != made.id and other.digest != made.digest
    settled = host_identity.settle(str(path), made, "alpha", named=False)
    assert host_identity.read(str(path)) == settled and settled.label == "alpha"
    assert host_identity.settle(str(path), settled, "beta", named=True).label == "alpha"  # settled once
    assert made.id not in settled.digest and json.loads(path.read_text())["id"] == made.id


def test_an_identity_file_that_is_not_one_is_one_line_naming_it(tmp_path):
    path = tmp_path / host_identity.IDENTITY_FILE
    path.write_text("not json")
    with pytest.raises(ConfigurationError, match=re.escape(str(path))):
        host_identity.read(str(path))
    path.write_text(json.dumps({"id": "x" * 32, "label": "../etc"}))
    with pytest.raises(ConfigurationError, match="not a hermes_assets host identity"):
        host_identity.read(str(path))


def test_the_settled_label_wins_over_a_new_hostname_and_a_setting_naming_another_is_refused(tmp_path, monkeypatch):
    home = tmp_path / "dagster"
    home.mkdir()
    env = {"DAGSTER_HOME": str(home), "HERMES_ASSETS_WAREHOUSE": str(tmp_path / "wh")}
    loaded = settings.load(env)
    assert loaded.host_identity == str(home / host_identity.IDENTITY_FILE) and loaded.settled_host is None
    made = host_identity.load_or_make(loaded.host_identity)
    host_identity.settle(loaded.host_identity, made, "pod-7f9c", named=False)
    monkeypatch.setattr("socket.gethostname", lambda: "pod-other")  # the container restarted
    again = settings.load(env)
    assert again.host_label == "pod-7f9c" and not again.host_named
    assert settings.load({**env, "HERMES_ASSETS_HOST": "pod-7f9c"}).host_label == "pod-7f9c"
    with pytest.raises(ConfigurationError) as refused:
        settings.load({**env, "HERMES_ASSETS_HOST": "gw-2"})
    line = str(refused.value)
    assert "\n" not in line and "HERMES_ASSETS_HOST='gw-2'" in line and "'pod-7f9c'" in line
    assert "relabel_host" in line


@pytest.mark.parametrize("kind", KINDS)
def test_a_label_another_identity_owns_is_refused_before_anything_is_written(kind, tmp_path):
    root = tmp_path / "wh"
    first = open_host(kind, root, LABEL, tmp_path)
    settle(first, tmp_path / "first" / host_identity.IDENTITY_FILE)
    since = json.loads((root / ".hosts" / "labels" / f"{LABEL}.json").read_text())["since"]
    assert settle(first, tmp_path / "first" / host_identity.IDENTITY_FILE).label == LABEL  # itself, again
    before = tree(root)
    second = open_host(kind, root, LABEL, tmp_path)
    with pytest.raises(HostConflict) as refused:
        settle(second, tmp_path / "second" / host_identity.IDENTITY_FILE)
    line = str(refused.value)
    assert "\n" not in line and f"'{LABEL}'" in line and since in line and "HERMES_ASSETS_HOST" in line
    assert tree(root) == before
    assert host_identity.read(str(tmp_path / "second" / host_identity.IDENTITY_FILE)).label is None  # not settled
    with pytest.raises(HostConflict):  # a host with no identity yet: every owner is another
        host_claims.check_host(second.storage, second.root, str(tmp_path / "none.json"), LABEL, {})


def test_the_same_dagster_home_restored_elsewhere_is_the_same_host(tmp_path):
    root = tmp_path / "wh"
    settle(Warehouse(str(root), host=LABEL), tmp_path / "home" / host_identity.IDENTITY_FILE)
    restored = tmp_path / "restored"
    restored.mkdir()
    (restored / host_identity.IDENTITY_FILE).write_bytes((tmp_path / "home" / host_identity.IDENTITY_FILE).read_bytes())
    assert settle(Warehouse(str(root), host=LABEL), restored / host_identity.IDENTITY_FILE).label == LABEL


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_captured_under_one_label_is_refused_under_another_naming_both_and_the_relabel_job(kind, tmp_path):
    store = write_store(tmp_path / "hermes" / "state.db", "alpha says")
    held = identities([Store(str(store))], ReaderFactory())
    assert list(held) == [str(store)] and re.fullmatch(r"[0-9a-f]{32}", held[str(store)])
    root = tmp_path / "wh"
    settle(open_host(kind, root, "alpha", tmp_path), tmp_path / "a" / host_identity.IDENTITY_FILE, held)
    before = tree(root)
    with pytest.raises(HostConflict) as refused:  # the container restarted with a new hostname, its home lost
        settle(open_host(kind, root, "beta", tmp_path), tmp_path / "b" / host_identity.IDENTITY_FILE, held)
    line = str(refused.value)
    assert "\n" not in line and str(store) in line and "'alpha'" in line and "'beta'" in line
    assert "relabel_host" in line and "from_label='alpha'" in line
    assert tree(root) == before
    # another store (other sessions) under another label is welcome
    other = identities([Store(str(write_store(tmp_path / "other" / "state.db", "beta says")))], ReaderFactory())
    assert other.values() != held.values()
    settle(open_host(kind, root, "beta", tmp_path), tmp_path / "b" / host_identity.IDENTITY_FILE, other)


def test_a_store_is_known_by_what_it_holds_not_its_path(tmp_path):
    store = write_store(tmp_path / "one" / "state.db", "same words")
    copy = tmp_path / "two" / "state.db"
    copy.parent.mkdir()
    copy.write_bytes(store.read_bytes())
    ids = identities([Store(str(store)), Store(str(copy))], ReaderFactory())
    assert ids[str(store)] == ids[str(copy)]
    assert identities([Store(str(tmp_path / "none" / "state.db"))], ReaderFactory()) == {}


@pytest.mark.parametrize("kind", KINDS)
def test_of_two_installations_claiming_one_label_at_once_exactly_one_wins(kind, tmp_path):
    root = tmp_path / "wh"
    outcomes: list[str] = []
    start = threading.Barrier(4)

    def claim(n: int) -> None:
        wh = open_host(kind, root, LABEL, tmp_path / f"h{n}")
        start.wait()
        try:
            settle(wh, tmp_path / f"h{n}" / host_identity.IDENTITY_FILE)
            outcomes.append("won")
        except HostConflict:
            outcomes.append("refused")

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused", "refused", "refused", "won"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_conditional_write_never_loses_another_writers_file(kind, tmp_path):
    import pyarrow as pa

    wh = open_host(kind, tmp_path / "wh", "alpha", tmp_path)
    path = wh.storage.join(wh.root, "x", "shared.bin")
    assert wh.storage.read_versioned(path) is None
    assert wh.storage.put_if(path, pa.py_buffer(b"one"), None)
    assert not wh.storage.put_if(path, pa.py_buffer(b"two"), None)  # it exists now
    data, version = wh.storage.read_versioned(path)
    assert data.to_pybytes() == b"one"
    assert wh.storage.put_if(path, pa.py_buffer(b"two"), version)
    assert not wh.storage.put_if(path, pa.py_buffer(b"three"), version)  # replaced since that version
    assert wh.storage.read_versioned(path)[0].to_pybytes() == b"two"


def test_an_object_stores_conditional_writes_and_versions(monkeypatch):
    """The object store's side (obstore, here its in-memory store): a create-only put, a put
    conditional on the version read, and listings that carry each object's version."""
    from obstore.store import MemoryStore

    from hermes_assets.lib.storage.object_store import ObjectStore

    objects = ObjectStore("s3://bucket/prefix", "bucket")
    objects._store = MemoryStore()
    path = "bucket/prefix/hermes_daily_usage/day=2026-06-01/part-0.parquet"
    assert objects.read(path) is None
    assert objects.put_if(path, b"one", None) and not objects.put_if(path, b"two", None)
    data, version = objects.read(path)
    assert data == b"one"
    assert objects.put_if(path, b"two", version) and not objects.put_if(path, b"three", version)
    listed = list(objects.list_under("bucket/prefix/hermes_daily_usage"))
    assert [(o.path, o.size) for o in listed] == [("day=2026-06-01/part-0.parquet", 3)]
    assert listed[0].version == objects.read(path)[1] != version


def test_a_warehouse_uri_names_its_bucket_for_both_clients():
    from hermes_assets.lib.storage.object_store import store_config

    url, config, client = store_config(
        "s3://team-bucket/wh?endpoint_override=127.0.0.1:9000&scheme=http&region=eu-west-1&anonymous=true"
    )
    assert url == "s3://team-bucket" and client == {"allow_http": True}
    assert config == {"endpoint": "http://127.0.0.1:9000", "region": "eu-west-1", "skip_signature": True}
    assert store_config("s3://b/p", region="us-west-2")[1] == {"region": "us-west-2"}
    assert store_config("gs://b/p")[0] == "gs://b"
    url, config, _ = store_config("abfs://data@acct.dfs.core.windows.net/wh")
    assert (url, config) == ("az://data", {"account_name": "acct"})
    with pytest.raises(ValueError, match="hdfs"):
        store_config("hdfs://nn/wh")


def test_an_identity_file_others_can_read_or_that_cannot_be_made_is_a_bad_setting(tmp_path):
    env = {"HERMES_ASSETS_WAREHOUSE": str(tmp_path / "wh"), "DAGSTER_HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    path = tmp_path / "home" / host_identity.IDENTITY_FILE
    host_identity.load_or_make(str(path))
    os.chmod(path, 0o644)
    with pytest.raises(ConfigurationError, match=re.escape(f"HERMES_ASSETS_HOST_IDENTITY='{path}' can be read by")):
        settings.check(env)
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    with pytest.raises(ConfigurationError, match=r"HERMES_ASSETS_HOST_IDENTITY=.* cannot be created"):
        settings.check({**env, "HERMES_ASSETS_HOST_IDENTITY": str(blocked / "id.json")})


def test_runs_of_one_host_settling_its_identity_at_once_write_it_once(tmp_path):
    """The sensor's first runs start together: each settles the identity's label; one writes
    the file, the others read it (none fails on another's temp file)."""
    for attempt in range(20):
        path = str(tmp_path / f"home{attempt}" / host_identity.IDENTITY_FILE)
        made = host_identity.load_or_make(path)
        barrier = threading.Barrier(4)

        def settle(_: int, path: str = path, made: host_identity.Identity = made, barrier=barrier):
            barrier.wait()
            return host_identity.settle(path, made, "vm", named=False)

        with ThreadPoolExecutor(4) as pool:
            settled = list(pool.map(settle, range(4)))
        assert {(i.id, i.label) for i in settled} == {(made.id, "vm")}, attempt
        assert host_identity.read(path) == settled[0]
