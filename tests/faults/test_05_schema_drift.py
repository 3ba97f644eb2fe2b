"""Fault 5: schema drift (SPEC §1 "Schema versions", "By name").

Hermes has changed its schema many times and will again: the oldest released
schema, a store from a newer Hermes with columns and tables we do not know, a
store without ``session_model_usage``, and a SQLite file that is not Hermes's.
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3

from tests.conftest import fixture_store
from tests.faults.helpers import (
    DAY1,
    DAY2,
    GATEWAY,
    MESSAGES,
    SESSIONS,
    assert_failed_with,
    assert_nothing_lost,
    assert_sound,
    assert_untouched,
    remove_sqlite_sidecars,
    tick_failure,
    write_scenario,
)

OLDEST_DAYS = ("2026-05-15", "2026-05-17")


def _sql(db, *statements) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(*statement) if isinstance(statement, tuple) else conn.execute(statement)
    finally:
        conn.close()


def _copy_fixture(name: str, dest) -> None:
    src = fixture_store(name)
    assert src.is_file(), f"fixture store {src} is missing from the checkout"
    shutil.copyfile(src, dest)  # in place over the old file: the same inode, as an upgrade leaves it


def test_oldest_released_schema_then_its_in_place_upgrade(install):
    """Protects SPEC §1 schema probing: a store written by hermes-agent 0.13.0 (schema v11:
    no active/compacted/observed/cwd columns, no session_model_usage) is captured whole;
    when Hermes 0.19 upgrades it in place (new columns appended at the end, usage rows
    seeded), the next run succeeds, loses nothing and now carries the per-model usage."""
    _copy_fixture("oldest", install.store)
    install.run(*OLDEST_DAYS).ok()
    before = install.state()
    assert len(before.rows[SESSIONS]) == 12 and len(before.rows[MESSAGES]) == 92
    assert all(r["usage_by_model"] is None for r in before.rows[SESSIONS].values())

    remove_sqlite_sidecars(install.store)
    _copy_fixture("oldest_upgraded", install.store)
    install.run(*OLDEST_DAYS).ok()
    after = install.state()
    assert_nothing_lost(before, after, datasets=(GATEWAY, MESSAGES))
    assert after.keys(SESSIONS) == before.keys(SESSIONS)
    assert sum(r["usage_by_model"] is not None for r in after.rows[SESSIONS].values()) > 0
    assert_sound(install.warehouse)


def test_columns_and_tables_of_a_newer_hermes_are_kept_in_extra_columns(install):
    """Protects SPEC §1 "By name" and D22: a newer Hermes adds columns to sessions and
    messages (one a BLOB) and a table of its own. The sensor notices (its fingerprint covers
    every column) and the next run succeeds: the canonical files are byte-identical, and the
    raw rows differ only in ``extra_columns``, which keeps the new cells (the BLOB as base64);
    no value shifts into another column, the unknown table is never read, and the run's plan
    names the columns once (``unknown_columns``)."""
    with install.writer() as w:
        write_scenario(w, 2)
    install.run(DAY1, DAY2).ok()
    install.sensor.tick()
    before = install.state()
    _sql(
        install.store,
        "ALTER TABLE sessions ADD COLUMN future_flag INTEGER DEFAULT 7",
        "ALTER TABLE messages ADD COLUMN future_payload BLOB",
        ("UPDATE messages SET future_payload = ?", (b"\x00\xff binary",)),
        "CREATE TABLE future_things (id INTEGER PRIMARY KEY, session_id TEXT, body TEXT)",
        "INSERT INTO future_things (session_id, body) VALUES ('cli-0', 'not ours')",
    )
    assert install.sensor.tick().days == [DAY1, DAY2]
    run = install.run(DAY1, DAY2).ok()
    plan = run.metadata("hermes_capture.plan")
    assert plan["warnings_by_kind"] == {"unknown_columns": 1}
    assert plan["unknown_columns"] == [
        {"path": str(install.store), "sessions": ["future_flag"], "messages": ["future_payload"]}
    ]
    after = install.state()
    assert {f: h for f, h in after.files.items() if f.startswith(GATEWAY)} == {
        f: h for f, h in before.files.items() if f.startswith(GATEWAY)
    }
    payload = base64.b64encode(b"\x00\xff binary").decode()
    for dataset, extra in ((SESSIONS, {"future_flag": 7}), (MESSAGES, {"future_payload": payload})):
        assert after.keys(dataset) == before.keys(dataset)
        for key, row in after.rows[dataset].items():
            assert json.loads(row.pop("extra_columns")) == extra, (dataset, key)
            assert row == {k: v for k, v in before.rows[dataset][key].items() if k != "extra_columns"}, key
    assert_sound(install.warehouse)


def test_store_without_session_model_usage(install):
    """Protects SPEC §1/§3: a store lacking the session_model_usage table (Hermes before
    0.19, or a partial restore) is captured: usage_by_model reads as NULL and the
    canonical end rows carry no per-model usage, and nothing else captured is lost."""
    with install.writer() as w:
        write_scenario(w, 2)
    install.run(DAY1, DAY2).ok()
    before = install.state()
    assert any(r["usage_by_model"] for r in before.rows[SESSIONS].values())
    _sql(install.store, "DROP TABLE session_model_usage")
    install.run(DAY1, DAY2).ok()
    after = install.state()
    assert_nothing_lost(before, after)
    assert all(r["usage_by_model"] is None for r in after.rows[SESSIONS].values())
    ends = [
        json.loads(r["attributes"]) for r in after.rows[GATEWAY].values() if r["message_id"].endswith("session_end")
    ]
    assert ends and all("usage_by_model" not in a.get("hermes", {}) for a in ends)


def test_a_sqlite_file_that_is_not_hermes_is_not_a_hermes_store(install, tmp_path):
    """Protects SPEC §1 "not a Hermes store": state.db replaced by another program's SQLite
    file fails the run with not_a_hermes_store naming the file, the sensor tick reports it the
    same way (cursor kept), changes no partition file; with the store back, the next run
    succeeds and writes the same files."""
    with install.writer() as w:
        write_scenario(w, 2)
    install.run(DAY1, DAY2).ok()
    install.sensor.tick()
    before = install.state()
    cursor = install.sensor.cursor
    kept = tmp_path / "kept-state.db"
    shutil.move(install.store, kept)
    remove_sqlite_sidecars(install.store)
    _sql(
        install.store, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)", "INSERT INTO notes (body) VALUES ('x')"
    )

    assert_failed_with(install.run(DAY1, DAY2), "not_a_hermes_store", path=str(install.store))
    assert tick_failure(install.sensor, install.store) == "not_a_hermes_store"
    assert install.sensor.cursor == cursor
    assert_untouched(install.warehouse, before)

    remove_sqlite_sidecars(install.store)
    shutil.move(kept, install.store)
    install.run(DAY1, DAY2).ok()
    assert install.state().files == before.files
