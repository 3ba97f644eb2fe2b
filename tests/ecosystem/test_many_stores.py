"""Many machines: ``HERMES_STATE_DB`` names a folder of stores.

A team syncs each machine's ``state.db`` into one folder, one sub-folder per
machine. Here the three stores are copies of the same fixture, so EVERY
session id collides across them. Each store's folder is its label (SPEC §1):
ids are scoped ``hermes-<label>:<sid>`` and stay unique, every row says which
store it came from (``hermes_sessions.store``/``store_label``,
``attributes.hermes.store``, ``attributes.gateway.source_path_hash``), and the
sensor keeps one cursor entry per store: a change in one store reads that
store only.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from hermes_assets.defs.resources import HermesStores
from hermes_assets.lib.source.stores import Store
from tests.defs.harness import SMALL_DAYS, copy_small, read_all, store_sessions
from tests.sensor.harness import SensorDriver
from tests.support.hermes_writer import HermesWriter

LABELS = ("machine-a", "machine-b", "machine-c")
DAYS = SMALL_DAYS[2:5]


@pytest.fixture
def fleet(capture, monkeypatch) -> Path:
    """``<root>/stores/machine-{a,b,c}/state.db``, and ``HERMES_STATE_DB`` naming the folder."""
    root = capture.root / "stores"
    for label in LABELS:
        copy_small(root / label)
    monkeypatch.setenv("HERMES_STATE_DB", str(root))
    return root


def test_colliding_session_ids_stay_unique_and_say_their_store(capture, fleet):
    result = capture.materialize(DAYS[0], DAYS[-1])
    assert result.success
    paths = {label: str(fleet / label / "state.db") for label in LABELS}
    hashes = {label: Store(p, label=label).path_hash for label, p in paths.items()}

    # hermes_sessions: each session three times, once per store, told apart by store/store_label
    sessions = read_all(capture.warehouse, "hermes_sessions")
    by_label = {label: {r["id"] for r in sessions if r["store_label"] == label} for label in LABELS}
    assert by_label["machine-a"] and by_label["machine-a"] == by_label["machine-b"] == by_label["machine-c"]
    assert {(r["store_label"], r["store"]) for r in sessions} == set(paths.items())
    assert len({(r["store"], r["id"]) for r in sessions}) == len(sessions) == 3 * len(by_label["machine-a"])

    messages = read_all(capture.warehouse, "hermes_messages")
    assert len({(r["store"], r["id"]) for r in messages}) == len(messages)
    assert Counter(r["store_label"] for r in messages) == {label: len(messages) // 3 for label in LABELS}

    # the canonical rows: scoped ids, unique part_id, provenance in attributes
    rows = read_all(capture.warehouse, "ai_gateway_messages_hermes")
    assert len({r["part_id"] for r in rows}) == len(rows)
    for r in rows:
        label = r["attributes"]["hermes"]["store"]
        sid = r["attributes"]["gateway"]["native_id"]
        assert r["session_id"] == f"hermes-{label}:{sid}"
        assert r["message_id"].startswith(f"hermes-{label}:{sid}-")
        assert r["attributes"]["gateway"]["source_path_hash"] == hashes[label]
    per_label = Counter(r["attributes"]["hermes"]["store"] for r in rows)
    assert per_label == {label: len(rows) // 3 for label in LABELS}
    # the very same sids in each store
    native = {
        label: {r["attributes"]["gateway"]["native_id"] for r in rows if r["attributes"]["hermes"]["store"] == label}
        for label in LABELS
    }
    assert native["machine-a"] == native["machine-b"] == native["machine-c"]


def test_each_store_keeps_its_own_sensor_cursor(capture, fleet):
    driver = SensorDriver(capture.home)
    driver.resource = HermesStores(state_db=str(fleet))
    first = driver.tick()
    assert first.days == SMALL_DAYS  # three new stores, all days (one request per day, not per store)
    entries = driver.state["stores"]
    assert {e["label"] for e in entries.values()} == set(LABELS)
    assert set(entries) == {str(fleet / label / "state.db") for label in LABELS}
    assert driver.tick().skip.startswith("no change: nothing new in the 3 Hermes stores")
    driver.settle()  # the tier-2 rotation stops 16 ticks after the files last changed
    assert driver.tick().skip == "no change: nothing new in the 3 Hermes stores since the last check"

    # one machine's Hermes writes a message into a session of DAYS[1]
    db_b = fleet / "machine-b" / "state.db"
    sid = sorted(s for s, info in store_sessions(db_b).items() if info["day"] == DAYS[1])[0]
    before = json.loads(json.dumps(driver.state["stores"]))
    with HermesWriter(db_b, home=capture.root / "hermes-b") as w:
        w.msg(sid, "user", "one more question")
    tick = driver.tick()
    assert tick.days == [DAYS[1]]
    after = driver.state["stores"]
    for label in ("machine-a", "machine-c"):  # untouched stores: entries unchanged (no SQL ran on them)
        path = str(fleet / label / "state.db")
        assert after[path] == before[path]
    b = str(db_b)
    assert after[b]["max_mid"] > before[b]["max_mid"]

    # the run that request starts captures the new message under machine-b's scoped id only
    assert capture.materialize(DAYS[1]).success
    rows = read_all(capture.warehouse, "hermes_messages")
    new = [r for r in rows if r["id"] == after[b]["max_mid"]]
    assert [(r["store_label"], r["session_id"]) for r in new] == [("machine-b", sid)]
    gateway = [
        r
        for r in read_all(capture.warehouse, "ai_gateway_messages_hermes")
        if r["provider_uuid"] == str(after[b]["max_mid"])
    ]
    assert {r["session_id"] for r in gateway} == {f"hermes-machine-b:{sid}"}


def test_an_empty_folder_skips_saying_no_store_was_found(capture, tmp_path):
    empty = tmp_path / "no-stores-yet"
    empty.mkdir()
    driver = SensorDriver(capture.home)
    driver.resource = HermesStores(state_db=str(empty))
    tick = driver.tick()
    assert not tick.run_requests
    assert tick.skip == (
        f"no Hermes store found: HERMES_STATE_DB={empty} holds no state.db (folders are searched for **/state.db)"
    )
