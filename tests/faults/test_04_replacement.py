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

from tests.faults.helpers import (
    DAY1,
    DAY2,
    GATEWAY,
    MESSAGES,
    SESSIONS,
    WarehouseState,
    grow,
    is_flagged,
    remove_sqlite_sidecars,
    write_scenario,
)
from tests.sensor.harness import snapshot
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


@pytest.mark.parametrize("how", ["restored_backup", "fresh_empty_store"])
def test_replaced_store_keeps_every_captured_row_and_captures_new_data(install, tmp_path, how):
    """Protects D13 against a store restored from a backup with fewer messages, and against
    a fresh empty store, after which Hermes writes a new session on a captured day (its
    new message ids are ids we captured before, of other sessions). The sensor warns
    store_replaced (a warning kind, not a failure) and re-requests every captured day; the
    next run succeeds: every canonical and session row captured before is still there with
    its content, flagged source_deleted exactly when its source is gone from the store,
    and the new session is captured. (hermes_messages: see the xfail test below.)"""
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
        reused = {k for k in before.keys(dataset) & after.keys(dataset)
                  if _source(dataset, before.rows[dataset][k]) != _source(dataset, after.rows[dataset][k])}
        if dataset != MESSAGES:
            assert not reused
        lost = before.keys(dataset) - after.keys(dataset)
        assert not lost, f"{dataset}: captured rows lost: {sorted(map(str, lost))}"
        for key in before.keys(dataset) - reused:
            old, new = before.rows[dataset][key], after.rows[dataset][key]
            sid, mid = _source(dataset, old)
            gone = sid not in sids or (mid is not None and (sid, mid) not in mids)
            assert is_flagged(dataset, new) == gone, (dataset, key, gone)
            column = {GATEWAY: "content_text", MESSAGES: "content", SESSIONS: "title"}[dataset]
            assert new[column] == old[column], (dataset, key)
    new_rows = [r for r in after.rows[GATEWAY].values() if r["session_id"] == "hermes-after-0"]
    assert [r["content_text"] for r in new_rows] == ["asked after the replacement", "answered after the replacement"]
    assert not any(is_flagged(GATEWAY, r) for r in new_rows)
    assert install.sensor.tick().run_requests == []  # our run changed nothing in the store


@pytest.mark.xfail(strict=True, reason=(
    "SPEC §6 gap: ids are functions of (sid, mid) and a restored or fresh store hands out "
    "old mids again. hermes_messages is keyed by (store, id), so a new message that reuses "
    "a captured mid replaces the captured row of another session; ai_gateway_messages_hermes "
    "keys part_id by (sid, mid, k), so a message Hermes appends to a restored session "
    "reuses the part_id of the captured message it lost. Either way the captured content "
    "is overwritten. Needs a store generation in the key (or keeping both rows)."))
@pytest.mark.parametrize("case", ["hermes_messages_other_session", "gateway_same_session"])
def test_rows_whose_message_ids_a_restored_store_reuses_are_kept(install, tmp_path, case):
    """Protects D13 ("nothing captured is lost") where it is not yet honoured: after a
    restore from a backup, Hermes writes new messages whose ids we captured before (of
    another session on the same day, or of the same session); the captured rows must
    survive with their content (flagged source_deleted)."""
    if case == "hermes_messages_other_session":
        dataset, carry_on = MESSAGES, _new_session
    else:
        dataset = GATEWAY

        def carry_on(w):  # the restored session goes on: its next message reuses a lost message's id
            w.msg("tui-0", "assistant", "a different answer after the restore", finish_reason="stop")
    before = _captured_then_replaced(install, tmp_path, "restored_backup", carry_on=carry_on)
    install.run(DAY1, DAY2).ok()
    after = install.state()
    column = "content" if dataset == MESSAGES else "content_text"
    captured = sorted(str(r[column]) for r in before.rows[dataset].values())
    now = sorted(str(r[column]) for r in after.rows[dataset].values())
    missing = [text for text in captured if text not in now]
    assert not missing, f"{dataset}: captured content overwritten: {missing}"
