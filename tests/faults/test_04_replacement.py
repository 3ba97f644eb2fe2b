"""Fault 4: the store replaced under us (SPEC §1 "Corrupt or replaced store", §6 D13, §8).

A user restores ``state.db`` from a backup (fewer messages than we captured),
or Hermes starts over with a fresh empty store. Then Hermes carries on, and
``messages.id`` (AUTOINCREMENT) hands out again ids we have already captured.
"""

from __future__ import annotations

import os
import sqlite3

import pytest
import structlog

from hermes_assets.defs.resources import HermesWarehouse
from tests.faults.helpers import (
    DAY1,
    DAY2,
    GATEWAY,
    MESSAGES,
    SESSIONS,
    WarehouseState,
    grow,
    instance,
    is_flagged,
    remove_sqlite_sidecars,
    warehouse_state,
    write_scenario,
)
from tests.sensor.harness import checkpoint, snapshot
from tests.support.hermes_writer import START_S


def _alive(db) -> tuple[set[str], set[tuple[str, int]]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sids = {str(r[0]) for r in conn.execute("SELECT id FROM sessions")}
        mids = {(str(s), m) for s, m in conn.execute("SELECT session_id, id FROM messages")}
    finally:
        conn.close()
    return sids, mids


def _source(dataset: str, row: dict) -> tuple[str, int | None]:
    if dataset == GATEWAY:
        import json

        mid = row["provider_uuid"]
        return json.loads(row["attributes"])["gateway"]["native_id"], int(mid) if mid else None
    if dataset == SESSIONS:
        return row["id"], None
    return row["session_id"], row["id"]


def _replace(install, how: str, backup) -> None:
    remove_sqlite_sidecars(install.store)
    if how == "restored_backup":
        os.replace(backup, install.store)  # a restore: a new file (new inode), fewer messages
    else:
        install.store.unlink()  # Hermes reinstalled: it creates a fresh, empty store


def _captured_then_replaced(install, tmp_path, how: str, *, carry_on) -> WarehouseState:
    with install.writer() as w:
        write_scenario(w, 2)
        backup = snapshot(install.store, tmp_path / "backup" / "state.db")
        grow(w, 2)
    install.run(DAY1, DAY2).ok()
    install.sensor.tick()
    before = install.state()
    _replace(install, how, backup)
    with install.writer() as w:  # Hermes carries on
        w.at(START_S + 7200)
        carry_on(w)
    return before


def _new_session(w) -> None:
    w.msg(w.session("after-0", "cli", cwd="/work/repo-0"), "user", "asked after the replacement")
    w.msg("after-0", "assistant", "answered after the replacement", finish_reason="stop")


def _replaced(dataset: str, row: dict) -> bool:
    if dataset == GATEWAY:
        import json

        return bool(json.loads(row["attributes"])["hermes"].get("replaced"))
    return bool(row["replaced"])


@pytest.mark.parametrize("how", ["restored_backup", "fresh_empty_store"])
def test_replaced_store_keeps_every_captured_row_and_captures_new_data(install, tmp_path, how):
    """Protects D13/D15 against a store restored from a backup with fewer messages, and
    against a fresh empty store, after which Hermes writes a new session on a captured day
    (its new message ids are ids we captured before, of other sessions). If it fails,
    captured rows of the lost messages are gone or overwritten by the new session's. The
    sensor warns store_replaced and re-requests every captured day; the next run succeeds:
    every row captured before is still there with its content, flagged source_deleted
    exactly when its source is gone from the store (or replaced by a reused id), and the
    new session is captured under its own plain ids."""
    before = _captured_then_replaced(install, tmp_path, how, carry_on=_new_session)
    with structlog.testing.capture_logs() as logs:
        tick = install.sensor.tick()
    assert {DAY1, DAY2} <= set(tick.days)
    warnings = [e for e in logs if e["event"] == "hermes.sensor.store_replaced"]
    assert len(warnings) == 1 and warnings[0]["error_kind"] == "store_replaced"

    install.run(DAY1, DAY2).ok()
    after = install.state()
    sids, mids = _alive(install.store)
    for dataset in (GATEWAY, SESSIONS, MESSAGES):
        lost = before.keys(dataset) - after.keys(dataset)
        assert not lost, f"{dataset}: captured rows lost: {sorted(map(str, lost))}"
        for key in before.keys(dataset):
            old, new = before.rows[dataset][key], after.rows[dataset][key]
            sid, mid = _source(dataset, old)
            gone = sid not in sids or (mid is not None and (sid, mid) not in mids)
            assert is_flagged(dataset, new) == (gone or _replaced(dataset, new)), (dataset, key, gone)
            column = {GATEWAY: "content_text", MESSAGES: "content", SESSIONS: "title"}[dataset]
            assert new[column] == old[column], (dataset, key)
    new_rows = [r for r in after.rows[GATEWAY].values() if r["session_id"] == "hermes-after-0"]
    assert [r["content_text"] for r in new_rows] == ["asked after the replacement", "answered after the replacement"]
    assert not any(is_flagged(GATEWAY, r) for r in new_rows)
    assert install.sensor.tick().run_requests == []  # our run changed nothing in the store


# --------------------------------------------------------------------------
# D15: ids a restored store hands out again
# --------------------------------------------------------------------------


def _content(state: WarehouseState, dataset: str) -> list[str]:
    column = "content" if dataset == MESSAGES else "content_text"
    return sorted(str(r[column]) for r in state.rows[dataset].values())


def _assert_all_kept(before: WarehouseState, after: WarehouseState) -> None:
    """Every captured row is still there, under its own key, with its own content."""
    for dataset in (GATEWAY, MESSAGES, SESSIONS):
        lost = before.keys(dataset) - after.keys(dataset)
        assert not lost, f"{dataset}: captured rows lost: {sorted(map(str, lost))[:5]}"
        column = {GATEWAY: "content_text", MESSAGES: "content", SESSIONS: "title"}[dataset]
        for key in before.keys(dataset):
            assert after.rows[dataset][key][column] == before.rows[dataset][key][column], (dataset, key)


def _hermes_snapshot(install) -> str:
    """Hermes's own quick snapshot of its home (``/snapshot``, ``hermes backup --quick``)."""
    from hermes_cli.backup import create_quick_snapshot

    checkpoint(install.store)  # what a quiet Hermes has on disk: the WAL folded in
    snapshot_id = create_quick_snapshot(hermes_home=install.home)
    assert snapshot_id
    return snapshot_id


def _hermes_restore(install, snapshot_id: str) -> None:
    """Hermes's own restore: the snapshot's state.db replaces the live one (a new file)."""
    from hermes_cli.backup import restore_quick_snapshot

    remove_sqlite_sidecars(install.store)
    assert restore_quick_snapshot(snapshot_id, hermes_home=install.home)


def test_same_session_reuse_after_hermes_restores_its_snapshot(install):
    """After Hermes's own snapshot restore, the restored session goes on and its new
    messages reuse the ids of the messages the restore lost (same session). If it fails,
    the captured messages are overwritten by the new ones in both message datasets. Both
    are kept: the old rows flagged source_deleted + replaced, the new ones under
    generation-2 ids (``<mid>.g2``); a re-run writes identical files; the same store into
    an empty warehouse gets plain ids (generation 1)."""
    with install.writer() as w:
        write_scenario(w, 1)
    snap = _hermes_snapshot(install)
    with install.writer() as w:
        w.at(START_S + 3600)
        lost = [w.msg("tui-0", "assistant", f"lost answer {i}", finish_reason="stop") for i in range(3)]
    install.run(DAY1).ok()
    before = install.state()
    _hermes_restore(install, snap)
    with install.writer() as w:
        w.at(START_S + 7200)
        again = [w.msg("tui-0", "assistant", f"new answer {i}", finish_reason="stop") for i in range(3)]
    assert again == lost, "the restored store did not reuse the ids (the test proves nothing)"
    with structlog.testing.capture_logs() as logs:
        out = install.run(DAY1).ok()
    after = install.state()
    _assert_all_kept(before, after)
    assert set(_content(before, MESSAGES)) < set(_content(after, MESSAGES))
    assert {f"new answer {i}" for i in range(3)} <= set(_content(after, GATEWAY))
    messages = {(r["id"], r["generation"]): r for r in after.rows[MESSAGES].values() if r["session_id"] == "tui-0"}
    for mid in lost:
        old, new = messages[(mid, 1)], messages[(mid, 2)]
        assert (old["source_deleted"], old["replaced"]) == (True, True) and old["content"].startswith("lost")
        assert (new["source_deleted"], new["replaced"]) == (False, False) and new["content"].startswith("new")
    parts = {r["message_id"]: r for r in after.rows[GATEWAY].values() if r["provider_uuid"] == str(lost[0])}
    assert set(parts) == {f"hermes-tui-0-{lost[0]}-0", f"hermes-tui-0-{lost[0]}.g2-0"}
    assert _replaced(GATEWAY, parts[f"hermes-tui-0-{lost[0]}-0"])
    assert not is_flagged(GATEWAY, parts[f"hermes-tui-0-{lost[0]}.g2-0"])
    live = sorted(
        (r["message_index"], r["message_id"])
        for r in after.rows[GATEWAY].values()
        if r["session_id"] == "hermes-tui-0" and not is_flagged(GATEWAY, r)
    )
    assert [i for i, _ in live] == list(range(len(live)))  # the 0..n-1 rule holds for live rows
    md = out.materializations()
    assert md[(MESSAGES, DAY1)]["rows_replaced"] == 3 and md[(GATEWAY, DAY1)]["rows_replaced"] == 3
    warned = [e for e in logs if e["event"] == "hermes.capture.store_replaced"]
    assert len(warned) == 1 and warned[0]["error_kind"] == "store_replaced"
    assert out.metadata("hermes_capture.project_rows")["ids_reused"] == 3

    install.run(DAY1).ok()  # deterministic: nothing moves on a re-run
    assert install.state().files == after.files
    fresh = install.warehouse.parent / "fresh-warehouse"
    install.run(DAY1, defs=install.defs(warehouse=HermesWarehouse(root=str(fresh)))).ok()
    plain = warehouse_state(fresh)
    assert not any(r["generation"] != 1 for r in plain.rows[MESSAGES].values())
    assert not any(".g" in r["message_id"] for r in plain.rows[GATEWAY].values())


def test_cross_session_reuse_keeps_the_other_sessions_rows(install, tmp_path):
    """After a restore (a plain copy of the file, as a user restores a backup), Hermes
    writes a new session whose messages reuse ids captured for another session. If it
    fails, hermes_messages rows of the other session are overwritten (it was keyed by
    (store, id)). Both sessions' rows are kept, the lost ones flagged source_deleted."""
    before = _captured_then_replaced(install, tmp_path, "restored_backup", carry_on=_new_session)
    install.run(DAY1, DAY2).ok()
    after = install.state()
    _assert_all_kept(before, after)
    reused = {(r["session_id"], r["id"]) for r in after.rows[MESSAGES].values() if r["session_id"] == "after-0"}
    captured_mids = {r["id"] for r in before.rows[MESSAGES].values()}
    assert {mid for _, mid in reused} & captured_mids, "no id was reused (the test proves nothing)"
    for sid, mid in reused:
        others = [r for r in after.rows[MESSAGES].values() if r["id"] == mid and r["session_id"] != sid]
        assert others and all(r["source_deleted"] for r in others)


def test_a_fresh_store_that_reuses_every_id_keeps_both_generations(install):
    """Hermes reinstalled: a fresh store whose sessions carry the same ids (and whose
    messages reuse every mid) but started at other times. If it fails, every captured row
    of the first store is overwritten. The old sessions and messages are kept, flagged
    replaced; the new ones are generation 2 (``hermes-<sid>.g2`` in the canonical rows)."""
    with install.writer() as w:
        write_scenario(w, 1)
    install.run(DAY1).ok()
    before = install.state()
    remove_sqlite_sidecars(install.store)
    install.store.unlink()
    with install.writer() as w:  # the same session ids, the same day, other times and words
        w.at(START_S + 1800)
        for sid, source in (("cli-0", "cli"), ("tg-0", "telegram"), ("tui-0", "tui")):
            w.session(sid, source, cwd="/work/repo-0" if source != "telegram" else None)
            for i in range(4):
                w.msg(sid, "user" if i % 2 == 0 else "assistant", f"the reinstalled Hermes says {i}")
    install.run(DAY1).ok()
    after = install.state()
    reused = {r["id"] for r in after.rows[MESSAGES].values()} & {r["id"] for r in before.rows[MESSAGES].values()}
    assert len(reused) == len({r["id"] for r in before.rows[MESSAGES].values()}) == 7, (
        "no id reused (the test proves nothing)"
    )
    _assert_all_kept(before, after)
    sessions = {(r["id"], r["generation"]): r for r in after.rows[SESSIONS].values()}
    for sid in ("cli-0", "tg-0", "tui-0"):
        assert sessions[(sid, 1)]["replaced"] and not sessions[(sid, 2)]["replaced"]
    assert {r["session_id"] for r in after.rows[GATEWAY].values() if not is_flagged(GATEWAY, r)} == {
        "hermes-cli-0.g2",
        "hermes-tg-0.g2",
        "hermes-tui-0.g2",
    }
    assert install.run(DAY1).ok() and install.state().files == after.files
    # a purge of the session takes both generations (``hermes-tui-0`` and ``hermes-tui-0.g2``)
    job = install.definitions().resolve_job_def("purge_job")
    assert job.execute_in_process(
        instance=instance(), run_config={"ops": {"purge_scope": {"config": {"session_id": "tui-0"}}}}
    ).success
    purged = install.state()
    assert not [r for r in purged.rows[GATEWAY].values() if r["session_id"].startswith("hermes-tui-0")]
    assert not [r for r in purged.rows[SESSIONS].values() if r["id"] == "tui-0"]


def test_two_restores_in_a_row_make_three_generations(install):
    """Restored twice, the same session reuses the same ids twice. If it fails, the second
    generation overwrites the first, or the third the second. Three generations of each
    reused message are kept: 1 and 2 flagged replaced, 3 live."""
    with install.writer() as w:
        write_scenario(w, 1)
    snap = _hermes_snapshot(install)
    for round_, hour in enumerate((1, 2, 3)):
        if round_:
            _hermes_restore(install, snap)
        with install.writer() as w:
            w.at(START_S + hour * 3600)
            mids = [w.msg("tui-0", "user", f"round {round_} message {i}") for i in range(2)]
        install.run(DAY1).ok()
    state = install.state()
    rows = {(r["id"], r["generation"]): r for r in state.rows[MESSAGES].values() if r["session_id"] == "tui-0"}
    for mid in mids:
        assert [rows[(mid, g)]["replaced"] for g in (1, 2, 3)] == [True, True, False]
        assert [rows[(mid, g)]["content"][:7] for g in (1, 2, 3)] == ["round 0", "round 1", "round 2"]
    assert {f"hermes-tui-0-{mids[0]}{s}-0" for s in ("", ".g2", ".g3")} <= {
        r["message_id"] for r in state.rows[GATEWAY].values()
    }


def test_a_restore_between_the_sensors_tick_and_its_run_loses_nothing(install):
    """The sensor requests a day; before the run starts, Hermes restores its snapshot and
    writes again, reusing ids. If it fails, the run (planned on the old store) overwrites
    what was captured. The run captures the restored store with new generations; the next
    tick sees the replacement and re-requests the day; running it changes nothing."""
    with install.writer() as w:
        write_scenario(w, 1)
    snap = _hermes_snapshot(install)
    with install.writer() as w:
        w.at(START_S + 3600)
        lost = w.msg("tui-0", "user", "captured, then lost by the restore")
    install.sensor.tick()
    install.run(DAY1).ok()
    before = install.state()
    with install.writer() as w:
        w.at(START_S + 5400)
        w.msg("tui-0", "user", "a change the sensor sees")
    tick = install.sensor.tick()
    assert tick.days == [DAY1]
    _hermes_restore(install, snap)
    with install.writer() as w:
        w.at(START_S + 7200)
        assert w.msg("tui-0", "user", "written after the restore") == lost
    install.run(DAY1).ok()  # the run the tick requested
    after = install.state()
    _assert_all_kept(before, after)
    assert "written after the restore" in _content(after, MESSAGES)
    assert DAY1 in install.sensor.tick().days  # the replaced store: every day again
    install.run(DAY1).ok()
    assert install.state().files == after.files


def test_a_purge_removes_every_generation_of_the_purged_session(install):
    """A purge of a session (SPEC §7) removes its rows of every generation. If it fails, a
    purged transcript survives under its ``.g2`` ids."""
    with install.writer() as w:
        write_scenario(w, 1)
    snap = _hermes_snapshot(install)
    with install.writer() as w:
        w.at(START_S + 3600)
        w.msg("tui-0", "user", "PURGE-ME before the restore")
    install.run(DAY1).ok()
    _hermes_restore(install, snap)
    with install.writer() as w:
        w.at(START_S + 7200)
        w.msg("tui-0", "user", "PURGE-ME after the restore")
    install.run(DAY1).ok()
    state = install.state()
    assert any(r["session_id"] == "hermes-tui-0" and ".g2" in r["message_id"] for r in state.rows[GATEWAY].values())
    job = install.definitions().resolve_job_def("purge_job")
    result = job.execute_in_process(
        instance=instance(), run_config={"ops": {"purge_scope": {"config": {"session_id": "tui-0"}}}}
    )
    assert result.success
    after = install.state()
    for dataset in (GATEWAY, MESSAGES):
        column = "content" if dataset == MESSAGES else "content_text"
        assert not [r for r in after.rows[dataset].values() if "PURGE-ME" in str(r[column])], dataset
    assert not [r for r in after.rows[SESSIONS].values() if r["id"] == "tui-0"]
