"""The sensor, tick by tick, against stores written by the real Hermes writer (SPEC §8).

Each test changes the store the way Hermes does (``SessionDB``'s own methods)
and evaluates the real ``hermes_state_sensor`` from the project's definitions
with ``build_sensor_context`` + ``evaluate_tick``, carrying the cursor from
tick to tick as the daemon does. It asserts the partition keys requested, the
run keys (``day@h``, never reused) and the cursor.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time

import pytest
import structlog

from hermes_assets.defs import settings
from tests.sensor import harness
from tests.sensor.harness import SensorDriver, checkpoint, snapshot
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

A, B, C = "2026-06-01", "2026-06-02", "2026-06-03"


class World:
    """A Hermes home with one store, its writer, and the sensor driven over it."""

    def __init__(self, tmp_path, monkeypatch):
        monkeypatch.delenv("HERMES_STATE_DB", raising=False)
        self.home = tmp_path / "hermes-home"
        self.home.mkdir()
        monkeypatch.setenv("HERMES_HOME", str(self.home))
        self.db = self.home / "state.db"
        self.sensor = SensorDriver(self.home)
        self.w: HermesWriter | None = None

    def open(self) -> HermesWriter:
        self.w = HermesWriter(self.db, home=self.home)
        return self.w

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
            self.w = None

    def settle(self) -> None:
        """Tick until the rotation stops (it runs for 16 ticks after the files last changed)."""
        self.sensor.settle()
        assert self.sensor.tick().skip == "no change: nothing new in the Hermes store since the last check"

    def build(self) -> None:
        """Three days: A (open a1 with 4 messages, ended a2), B (open b1), C (ended c1)."""
        w = self.open()
        self.a1 = w.session("a1", "cli", cwd="/work/repo")
        self.a1_users = [w.msg(self.a1, "user", "hello")]
        w.msg(self.a1, "assistant", "hi")
        self.a1_users.append(w.msg(self.a1, "user", "and now?"))
        w.msg(self.a1, "assistant", "done")
        self.a2 = w.session("a2", "telegram")
        w.msg(self.a2, "user", "ping")
        w.msg(self.a2, "assistant", "pong")
        w.end(self.a2, "session_reset")
        w.at(START_S + DAY_S)
        self.b1 = w.session("b1", "tui")
        w.msg(self.b1, "user", "build it")
        w.msg(self.b1, "assistant", "built")
        w.at(START_S + 2 * DAY_S)
        self.c1 = w.session("c1", "cli")
        for i in range(3):
            w.msg(self.c1, "user", f"question {i}")
            w.msg(self.c1, "assistant", f"answer {i}")
        first = self.sensor.tick()
        assert first.days == [A, B, C]
        self.baseline_keys = first.run_keys
        assert self.sensor.tick().skip.startswith("no change")


@pytest.fixture
def world(tmp_path, monkeypatch):
    wd = World(tmp_path, monkeypatch)
    try:
        yield wd
    finally:
        wd.close()


@pytest.fixture
def built(world):
    world.build()
    return world


# --------------------------------------------------------------------------
# no store, no change
# --------------------------------------------------------------------------


def test_missing_store_skips_saying_so(world):
    first = world.sensor.tick()
    assert first.run_requests == []
    assert first.skip == f"no Hermes installation at {world.db}"
    remembered = world.sensor.cursor
    again = world.sensor.tick()
    assert again.skip == f"no Hermes installation at {world.db}"
    assert world.sensor.cursor == remembered
    assert not world.db.exists()  # we never create the store


def test_a_named_store_that_vanishes_fails_the_tick_naming_it_and_its_return_heals_it(built, tmp_path):
    """Named in ``HERMES_STATE_DB`` and gone: a mistake in the setting, not the idle case. The tick
    raises the one line (``BadSetting``: Dagster marks the tick failed and shows that line), requests
    nothing and leaves the cursor as it was; back, with what Hermes wrote meanwhile, it is requested."""
    from hermes_assets.defs.console import BadSetting

    built.close()
    sensor = SensorDriver(state_db=built.db)
    first = sensor.tick()
    assert first.days == [A, B, C]
    remembered = sensor.cursor
    away = tmp_path / "away"
    away.mkdir()
    for name in os.listdir(built.home):
        if name.startswith("state.db"):
            os.rename(built.home / name, away / name)
    for _ in range(2):  # every tick while it is gone
        with pytest.raises(BadSetting) as raised:
            sensor.tick()
        assert str(raised.value) == (
            f"HERMES_STATE_DB names {built.db}, which does not exist: check the path "
            "(unset HERMES_STATE_DB to use the Hermes home's own store)."
        )
        assert sensor.cursor == remembered
    for name in os.listdir(away):
        os.rename(away / name, built.home / name)
    with built.open() as w:
        w.at(START_S + DAY_S + 600)
        w.msg(built.b1, "user", "written while it was away")
    back = sensor.tick()
    assert back.days == [B]


def test_a_tick_reads_no_settings(world, monkeypatch):
    """The sensor is built from the settings the definitions loaded with: a tick reads none,
    so a variable changed since counts from the next load (``defs/settings.py``)."""
    loaded = harness.definitions()
    monkeypatch.setattr(harness, "definitions", lambda: loaded)

    def read(*args, **kwargs):
        raise AssertionError("a sensor tick read the settings")

    for name in ("load", "check"):
        monkeypatch.setattr(settings, name, read)
    monkeypatch.setenv("HERMES_ASSETS_SENSOR_MAX_RUNS", "1")  # read by a tick, it would request one day
    world.build()  # its first tick requests all three days
    world.close()
    assert world.sensor.tick().run_requests == []


def test_unchanged_files_mean_no_sql_at_all(built):
    """Same inode, size and mtime of db and -wal: the tick must not even open the file.

    Proven by overwriting the db with garbage while keeping its identity: any
    SQL would fail with store_corrupt.
    """
    built.close()  # Hermes exits: checkpoint, files settle
    assert built.sensor.tick().run_requests == []
    built.settle()
    db = built.db
    st = os.stat(db)
    original = db.read_bytes()
    with open(db, "r+b") as f:
        f.write(b"\x00not a database\x00" * (st.st_size // 16))
        f.truncate(st.st_size)
    os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns))
    remembered = built.sensor.cursor
    try:
        tick = built.sensor.tick()
        assert tick.run_requests == []
        assert tick.skip == "no change: nothing new in the Hermes store since the last check"
        assert built.sensor.cursor == remembered
    finally:
        db.write_bytes(original)
        os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_unreadable_store_is_reported_and_keeps_its_cursor_entry(built):
    """SPEC D18: the tick does not fail; it names the store and its error kind (skip reason,
    structlog), leaves the store's cursor entry as it was, and reads it again next tick."""
    built.close()
    built.sensor.tick()
    before = built.sensor.store_state(built.db)
    original = built.db.read_bytes()
    for name in ("state.db-wal", "state.db-shm"):
        (built.home / name).unlink(missing_ok=True)
    built.db.write_bytes(b"this is not a SQLite database, " * (len(original) // 31))
    for _ in range(2):  # every tick tries again, and says so again
        with structlog.testing.capture_logs() as logs:
            tick = built.sensor.tick()
        assert tick.run_requests == []
        assert f"{built.db} could not be read (store_corrupt)" in tick.skip
        assert "cursor entries are kept" in tick.skip
        assert built.sensor.store_state(built.db) == before
        (failed,) = [e for e in logs if e["event"] == "hermes.sensor.store_failed"]
        assert (failed["error_kind"], failed["path"], failed["log_level"]) == ("store_corrupt", str(built.db), "error")
        (summary,) = [e for e in logs if e["event"] == "hermes.sensor.tick"]
        assert summary["stores_failed"] == 1 and summary["failed"][0]["error_kind"] == "store_corrupt"
    built.db.write_bytes(original)  # repaired: read again, nothing changed since the cursor
    tick = built.sensor.tick()
    assert tick.run_requests == [] and tick.skip.startswith("no change")


def test_checkpoint_moves_files_but_requests_nothing(built):
    built.close()
    built.sensor.tick()
    built.open()  # a new Hermes process: opens, writes nothing
    checkpoint(built.db)
    tick = built.sensor.tick()
    assert tick.run_requests == []
    assert tick.skip.startswith("no change")
    assert built.sensor.tick().skip.startswith("no change: nothing new in the Hermes store since the last check")


# --------------------------------------------------------------------------
# each kind of change
# --------------------------------------------------------------------------


def test_new_message_in_open_session(built):
    mid = built.w.msg(built.a1, "user", "one more thing")
    tick = built.sensor.tick()
    assert tick.days == [A]
    assert tick.run_keys[A] != built.baseline_keys[A]
    state = built.sensor.store_state(built.db)
    assert state["max_mid"] == mid
    assert state["seq"] == mid


def test_session_end_without_new_messages(built):
    max_mid = built.sensor.store_state(built.db)["max_mid"]
    built.w.end(built.b1, "tui_close")
    tick = built.sensor.tick()
    assert tick.days == [B]
    assert built.sensor.store_state(built.db)["max_mid"] == max_mid


def test_reopen(built):
    built.w.reopen_session(built.a2)
    assert built.sensor.tick().days == [A]


def test_update_token_counts_after_end(built):
    built.w.end(built.c1)
    assert built.sensor.tick().days == [C]
    built.w.tick()
    built.w.update_token_counts(built.c1, input_tokens=120, output_tokens=30, model="anthropic/claude-sonnet-4.6")
    assert built.sensor.tick().days == [C]


def test_rewind_to_message(built):
    max_mid = built.sensor.store_state(built.db)["max_mid"]
    result = built.w.rewind_to_message(built.a1, built.a1_users[1])
    assert result["rewound_count"] == 2
    tick = built.sensor.tick()
    assert tick.days == [A]
    assert built.sensor.store_state(built.db)["max_mid"] == max_mid


def test_restore_rewound_is_seen_through_the_inactive_count(built):
    """``restore_rewound`` flips rows back to active and touches no sessions column."""
    built.w.rewind_to_message(built.a1, built.a1_users[1])
    assert built.sensor.tick().days == [A]
    sessions_before = built.w.query("SELECT * FROM sessions WHERE id = ?", (built.a1,))
    assert built.w.restore_rewound(built.a1, built.a1_users[1]) == 2
    assert built.w.query("SELECT * FROM sessions WHERE id = ?", (built.a1,)) == sessions_before
    assert built.sensor.tick().days == [A]


def test_archive_and_compact(built):
    tail = built.w.get_messages_as_conversation(built.c1)[-2:]
    built.w.tick()
    built.w.archive_and_compact(built.c1, [{"role": "user", "content": "[CONTEXT COMPACTION] summary"}, *tail])
    tick = built.sensor.tick()
    assert tick.days == [C]
    assert built.sensor.store_state(built.db)["max_mid"] == max(built.w.mids(built.c1))


def test_replace_messages(built):
    history = built.w.get_messages_as_conversation(built.b1)
    built.w.tick()
    built.w.replace_messages(built.b1, history[:1])  # /retry: delete all, re-insert the first
    assert built.sensor.tick().days == [B]


def test_delete_session(built):
    built.w.delete_session(built.a2)
    assert built.sensor.tick().days == [A]
    built.w.delete_session(built.c1)  # the only session of day C
    tick = built.sensor.tick()
    assert tick.days == [C]
    assert C not in built.sensor.store_state(built.db)["days"]
    assert built.sensor.tick().run_requests == []


def test_a_fingerprint_that_comes_back_gets_a_fresh_run_key(built):
    """archived on, then off: day A's rows are as at the start, but the run key must not be reused."""
    built.w.set_session_archived(built.a2, True)
    on = built.sensor.tick()
    built.w.set_session_archived(built.a2, False)
    off = built.sensor.tick()
    assert on.days == off.days == [A]
    assert len({built.baseline_keys[A], on.run_keys[A], off.run_keys[A]}) == 3  # (the driver also checks)


def test_changes_on_several_days_in_one_tick(built):
    built.w.msg(built.b1, "user", "again")
    built.w.set_session_title(built.c1, "a title")
    built.w.end(built.a1)
    tick = built.sensor.tick()
    assert tick.days == [A, B, C]
    assert [r.partition_key for r in tick.run_requests] == [C, B, A]  # freshest first


# --------------------------------------------------------------------------
# stores that come, go, or are replaced
# --------------------------------------------------------------------------


def test_new_profile_store(built):
    built.close()
    profile_db = built.home / "profiles" / "work" / "state.db"
    with HermesWriter(profile_db, home=built.home, start_s=START_S + 4 * DAY_S) as pw:
        sid = pw.session("p1", "cli")
        pw.msg(sid, "user", "from the work profile")
    tick = built.sensor.tick()
    assert tick.days == ["2026-06-05"]
    state = built.sensor.state["stores"]
    assert set(state) == {str(built.db), str(profile_db)}
    assert state[str(profile_db)]["label"] == "work"
    assert built.sensor.tick().run_requests == []
    # the same day changing in both stores: one request for it
    with HermesWriter(profile_db, home=built.home, start_s=START_S + 5) as pw:
        pw.msg(pw.session("p2", "cli"), "user", "day A from the profile")
    w = built.open()
    w.msg(built.a1, "user", "day A from the default store")
    assert built.sensor.tick().days == [A]


def test_store_deleted(built):
    built.close()
    built.sensor.tick()
    before = built.sensor.cursor
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (built.home / name).unlink(missing_ok=True)
    tick = built.sensor.tick()
    assert tick.run_requests == []
    assert tick.skip == f"no Hermes installation at {built.db}"
    assert built.sensor.cursor == before  # what was captured stays the reference


@pytest.mark.parametrize("how", ["new inode", "same inode"])
def test_store_replaced_by_a_copy_with_fewer_messages(built, tmp_path, how):
    backup = snapshot(built.db, tmp_path / "backup" / "state.db")
    w = built.w
    w.at(START_S + 3 * DAY_S)
    later = w.session("d1", "cli")
    for i in range(3):
        w.msg(later, "user", f"later {i}")
    assert built.sensor.tick().days == ["2026-06-04"]
    built.close()
    built.sensor.tick()
    for name in ("state.db-wal", "state.db-shm"):
        (built.home / name).unlink(missing_ok=True)
    if how == "new inode":
        os.replace(backup, built.db)
    else:
        shutil.copyfile(backup, built.db)  # rewritten in place: only sqlite_sequence tells
    with structlog.testing.capture_logs() as logs:
        tick = built.sensor.tick()
    # every day present is re-requested, and the day that vanished with the old file too
    assert tick.days == [A, B, C, "2026-06-04"]
    warnings = [e for e in logs if e["event"] == "hermes.sensor.store_replaced"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["error_kind"] == "store_replaced"
    assert ("inode" in warnings[0]["reason"]) == (how == "new inode")
    assert built.sensor.tick().run_requests == []


# --------------------------------------------------------------------------
# days the partitions definition does not have
# --------------------------------------------------------------------------


def test_days_outside_the_partitions_are_kept_pending(world):
    now = time.time()
    tomorrow = dt.datetime.fromtimestamp(now, dt.UTC).date() + dt.timedelta(days=1)
    tomorrow_start = dt.datetime.combine(tomorrow, dt.time(), dt.UTC).timestamp()
    w = world.open()
    w.at(tomorrow_start)  # a writer whose clock runs ahead: still a sane time, but no partition yet
    ahead = w.session("ahead", "cli")
    w.msg(ahead, "user", "from the future")
    w.at(dt.datetime(2024, 6, 1, 12, tzinfo=dt.UTC).timestamp())  # before HERMES_ASSETS_START_DATE
    old = w.session("old", "cli")
    w.msg(old, "user", "from the past")
    w.at(START_S)
    w.msg(w.session("today-ish", "cli"), "user", "in range")
    tick = world.sensor.tick()
    assert tick.days == [A]
    pending = world.sensor.state["pending"]
    assert set(pending) == {tomorrow.isoformat(), "2024-06-01"}
    w.msg(old, "assistant", "still the past")
    tick = world.sensor.tick()
    assert tick.run_requests == []
    assert "kept pending" in tick.skip
    assert set(world.sensor.state["pending"]) == {tomorrow.isoformat(), "2024-06-01"}


def test_a_host_whose_label_another_installation_owns_fails_the_tick_and_keeps_its_cursor(built, tmp_path):
    """Another installation (another identity) owns this host's label in the warehouse: every
    run would be refused, so the tick fails (red in the UI, ``BadSetting``) with the one line,
    requests nothing and leaves its cursor; a tick with nothing to request says nothing."""
    from hermes_assets.defs.console import BadSetting
    from hermes_assets.defs.resources import HermesWarehouse
    from hermes_assets.lib.hosts import host_claims
    from hermes_assets.lib.storage.local_files import PRIVATE

    built.close()
    # this host has an identity file (not made yet: it has never captured), and another owns its label
    built.sensor.warehouse = HermesWarehouse(root=str(tmp_path / "wh"), identity_file=str(tmp_path / "mine.json"))
    wh = built.sensor.warehouse.open()
    host_claims.settle_host(wh.storage, wh.root, str(tmp_path / "other.json"), wh.host, {}, named=False, modes=PRIVATE)
    built.settle()  # nothing changed: nothing to refuse
    remembered = built.sensor.cursor
    with built.open() as w:
        w.at(START_S + DAY_S + 600)
        w.msg(built.b1, "user", "written while another host holds the label")
    built.close()
    for _ in range(2):
        with pytest.raises(BadSetting) as raised:
            built.sensor.tick()
        line = str(raised.value)
        assert "\n" not in line and f"host label {wh.host!r} is taken" in line and "HERMES_ASSETS_HOST" in line
        assert built.sensor.cursor == remembered
