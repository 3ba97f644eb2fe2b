"""Tests of the read-only store reader (SPEC §1, §2): opening, schema probing,
session days, per-cell text decoding, busy stores (discovery: test_stores.py)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_assets.lib.basics import errors, hermes_tables
from hermes_assets.lib.basics.errors import NotAHermesStore, StoreBusy, StoreCorrupt
from hermes_assets.lib.basics.timestamps import epoch_ms, ms_day
from hermes_assets.lib.source.state_db import StoreReader, row_dict
from hermes_assets.lib.source.stores import Store
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter
from tests.support.project import NOW_S

#: the keys of a bundle of a store before schema 23: the v22 columns (schema 23+'s are not selected)
SESSION_NAMES = [c[0] for c in hermes_tables.SESSION_COLUMNS if c[0] not in hermes_tables.V23_SESSION_COLUMNS]
MESSAGE_NAMES = [c[0] for c in hermes_tables.MESSAGE_COLUMNS if c[0] not in hermes_tables.V23_MESSAGE_COLUMNS]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def by_day(reader: StoreReader) -> dict:
    """``day -> sorted sids`` from the reader's session index (no sane time: under ``None``)."""
    out: dict = {}
    for sid, entry in reader.session_index().items():
        out.setdefault(entry.day, []).append(sid)
    return {day: sorted(sids) for day, sids in out.items()}


def read_days(reader: StoreReader) -> list:
    """Every session of every day (sane or not), whole: one :meth:`StoreReader.read_day` per day."""
    index = reader.session_index()
    days = by_day(reader)
    return [
        b
        for day in sorted(days, key=lambda d: (d is None, d or ""))
        for b in reader.read_day(day, [(sid, index[sid].raw_id) for sid in days[day]])
    ]


def read_everything(store: Store, **kwargs) -> dict:
    """sid -> bundle for every session of every day (sane or not)."""
    with StoreReader(store, now_s=NOW_S, **kwargs) as reader:
        return {b.sid: b for b in read_days(reader)}


def bad_cells(bundles) -> list[tuple]:
    return [(b.store.scoped(b.sid), *cell) for b in bundles for cell in b.bad_cells]


# --------------------------------------------------------------------------
# read-only, always (SPEC §1, R5)
# --------------------------------------------------------------------------


def test_read_only_open_leaves_db_bytes_unchanged_and_creates_only_wal_and_shm(fixture_copy):
    db = fixture_copy("small")
    before_hash, before_files = sha256(db), set(os.listdir(db.parent))
    bundles = read_everything(Store(str(db)))
    assert len(bundles) == 59
    assert sha256(db) == before_hash
    created = set(os.listdir(db.parent)) - before_files
    assert created <= {"state.db-wal", "state.db-shm"}
    wal = db.parent / "state.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0, "the reader wrote WAL frames"


def test_reader_sees_uncheckpointed_wal_rows_and_never_checkpoints(tmp_path):
    """A live WAL store (writer still open): the reader sees committed rows that
    are only in the -wal, and leaves db and -wal bytes as they were."""
    with HermesWriter(tmp_path / "h" / "state.db", home=tmp_path / "h") as w:
        w.session("live", "cli")
        for i in range(5):
            w.msg("live", "user", f"hello {i}")
        db, wal = w.path, Path(str(w.path) + "-wal")
        assert wal.stat().st_size > 0, "scenario needs frames still in the WAL"
        before = (sha256(db), sha256(wal), set(os.listdir(db.parent)))
        bundles = read_everything(Store(str(db)))
        assert [m["content"] for m in bundles["live"].messages] == [f"hello {i}" for i in range(5)]
        assert (sha256(db), sha256(wal), set(os.listdir(db.parent))) == before


def test_missing_store_raises_file_not_found_and_creates_nothing(tmp_path):
    store = Store(str(tmp_path / "nowhere" / "state.db"))
    assert not store.exists()
    with pytest.raises(FileNotFoundError):
        StoreReader(store).open()
    assert not (tmp_path / "nowhere").exists()


def test_existing_store_exists(fixture_copy):
    assert Store(str(fixture_copy("small"))).exists()


# --------------------------------------------------------------------------
# schema versions and by-name selection (SPEC §1)
# --------------------------------------------------------------------------


def test_oldest_schema_reads_missing_columns_as_null_or_v22_default(fixture_copy):
    db = fixture_copy("oldest")
    with StoreReader(Store(str(db)), now_s=NOW_S) as reader:
        assert "active" not in reader.columns["messages"]
        assert "cwd" not in reader.columns["sessions"]
        assert "session_model_usage" not in reader.columns
    bundles = read_everything(Store(str(db)))
    assert len(bundles) == 12
    n_messages = 0
    for b in bundles.values():
        assert list(b.session) == SESSION_NAMES
        assert b.usage == []
        s = b.session
        assert (s["cwd"], s["git_branch"], s["git_repo_root"], s["profile_name"]) == (None, None, None, None)
        assert (s["rewind_count"], s["archived"], s["expiry_finalized"], s["compression_fallback_streak"]) == (
            0,
            0,
            0,
            0,
        )
        for m in b.messages:
            n_messages += 1
            assert list(m) == MESSAGE_NAMES
            assert (m["active"], m["compacted"], m["observed"]) == (1, 0, 0)
            assert m["effect_disposition"] is None and m["api_content"] is None and m["platform_message_id"] is None
    assert n_messages == 92


def test_oldest_upgraded_reads_the_same_values_by_name_despite_column_order(fixture_copy):
    old, upgraded = fixture_copy("oldest"), fixture_copy("oldest_upgraded")
    conn = sqlite3.connect(f"file:{upgraded}?mode=ro", uri=True)
    physical = [r[1] for r in conn.execute("PRAGMA table_info(messages)")]
    conn.close()
    v22 = [n for n in MESSAGE_NAMES if n in physical]
    assert physical != v22, "the upgraded store must have a different physical column order"

    a, b = read_everything(Store(str(old))), read_everything(Store(str(upgraded)))
    assert a.keys() == b.keys()
    with StoreReader(Store(str(old)), now_s=NOW_S) as reader:
        shared_s, shared_m = reader.columns["sessions"], reader.columns["messages"]
    for sid in a:
        assert a[sid].day == b[sid].day
        for name in shared_s - {"model_config"}:  # 0.19's migration rewrote model_config
            assert a[sid].session[name] == b[sid].session[name], (sid, name)
        assert [m["id"] for m in a[sid].messages] == [m["id"] for m in b[sid].messages]
        for ma, mb in zip(a[sid].messages, b[sid].messages):
            for name in shared_m:
                assert ma[name] == mb[name], (sid, ma["id"], name)
            # and the defaults of the missing columns equal what 0.19 added
            assert (ma["active"], ma["compacted"], ma["observed"]) == (mb["active"], mb["compacted"], mb["observed"])
    assert sum(len(x.usage) for x in b.values()) == 12


def test_extra_columns_and_tables_of_newer_hermes_are_tolerated(hermes_db):
    hermes_db.session("s", "cli")
    hermes_db.msg("s", "user", "hi")
    hermes_db.raw_sql("ALTER TABLE messages ADD COLUMN future_col TEXT DEFAULT 'x'")
    hermes_db.raw_sql("ALTER TABLE sessions ADD COLUMN future_col INTEGER")
    hermes_db.raw_sql("CREATE TABLE system_prompts (id INTEGER PRIMARY KEY, body TEXT)")
    b = read_everything(Store(str(hermes_db.path)))["s"]
    assert [m["content"] for m in b.messages] == ["hi"]
    assert "future_col" not in b.messages[0] and "future_col" not in b.session


# --------------------------------------------------------------------------
# not a store, corrupt store
# --------------------------------------------------------------------------


def test_sqlite_file_without_sessions_and_messages_is_not_a_hermes_store(tmp_path):
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE sessions (id TEXT)")  # messages missing
    conn.commit()
    conn.close()
    with pytest.raises(NotAHermesStore) as info:
        StoreReader(Store(str(path))).open()
    assert info.value.error_kind == "not_a_hermes_store"
    assert str(path) in str(info.value)


def test_empty_file_is_a_store_not_created_yet(tmp_path):
    """Hermes's first start creates a 0-byte state.db before its schema commits:
    that is "nothing to capture yet" (a state, like a missing store), never a
    failure; a sensor tick in that window must not error."""
    path = tmp_path / "state.db"
    path.write_bytes(b"")
    with pytest.raises(errors.StoreAbsent) as info:
        StoreReader(Store(str(path))).open()
    assert not isinstance(info.value, errors.HermesAssetsError)  # a state, with no error_kind


def test_sqlite_file_with_other_tables_is_not_a_hermes_store(tmp_path):
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(NotAHermesStore):
        StoreReader(Store(str(path))).open()


def test_garbage_file_is_store_corrupt(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a database at all\n" * 200)
    with pytest.raises(StoreCorrupt) as info, StoreReader(Store(str(path))) as reader:
        reader.session_index()
    assert info.value.error_kind == "store_corrupt"


def test_truncated_store_is_store_corrupt(fixture_copy):
    db = fixture_copy("small")
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    with pytest.raises(StoreCorrupt):
        read_everything(Store(str(db)))


# --------------------------------------------------------------------------
# session days (SPEC §2, §5.1)
# --------------------------------------------------------------------------


def test_epoch_ms_rounds_half_up_not_half_even():
    assert epoch_ms(0.0025) == 3  # round() would give 2
    assert epoch_ms(1780300000.0125) == 1780300000013
    assert epoch_ms(1780300000.0625) == 1780300000063
    assert epoch_ms(5) == 5000
    for bad in (None, "yesterday", float("nan"), float("inf"), True):
        assert epoch_ms(bad) is None


def test_session_day_is_the_utc_day_of_the_rounded_started_at(hermes_db):
    midnight = START_S - 9 * 3600 + DAY_S  # 2026-06-02T00:00:00Z
    hermes_db.at(midnight - 0.0004)  # rounds up to 00:00:00.000 of the next day
    hermes_db.db.create_session("rounds_up", "cli")
    hermes_db.at(midnight - 0.001)
    hermes_db.db.create_session("last_ms", "cli")
    hermes_db.at(midnight + DAY_S + 5)
    hermes_db.db.create_session("third", "cli")
    with StoreReader(Store(str(hermes_db.path)), now_s=NOW_S) as reader:
        days = by_day(reader)
    assert days == {"2026-06-01": ["last_ms"], "2026-06-02": ["rounds_up"], "2026-06-03": ["third"]}


def test_session_day_stays_the_start_day_when_messages_pass_midnight(hermes_db):
    hermes_db.at(START_S + 14.9 * 3600)  # 23:54 UTC
    hermes_db.session("late", "cli")
    hermes_db.msg("late", "user", "before midnight")
    hermes_db.tick(3600)
    hermes_db.msg("late", "assistant", "after midnight")
    hermes_db.end("late")
    with StoreReader(Store(str(hermes_db.path)), now_s=NOW_S) as reader:
        assert by_day(reader) == {"2026-06-01": ["late"]}


@pytest.mark.parametrize("bad_started_at", [-5.0, 0, 946684799.0, 1e20, NOW_S + 2 * DAY_S, "not a time"])
def test_insane_started_at_falls_back_to_earliest_sane_message(hermes_db, bad_started_at):
    hermes_db.session("s", "cli")
    hermes_db.tick(2 * DAY_S)
    first = hermes_db.msg("s", "user", "one")
    hermes_db.msg("s", "assistant", "two")
    hermes_db.raw_sql("UPDATE messages SET timestamp = -1 WHERE id = ?", (first,))  # not sane either
    hermes_db.end("s")
    hermes_db.raw_sql("UPDATE sessions SET started_at = ? WHERE id = 's'", (bad_started_at,))
    with StoreReader(Store(str(hermes_db.path)), now_s=NOW_S) as reader:
        assert by_day(reader) == {ms_day(epoch_ms(START_S + 2 * DAY_S + 2)): ["s"]}


def test_null_started_at_falls_back_to_messages_then_ended_at_then_none(hermes_db):
    hermes_db.allow_nulls("sessions", "started_at")
    hermes_db.session("with_msgs", "cli")
    hermes_db.tick(DAY_S)
    hermes_db.msg("with_msgs", "user", "hi")
    hermes_db.session("only_end", "cli")
    hermes_db.tick(DAY_S)
    hermes_db.end("only_end")
    hermes_db.session("nothing", "cli")
    hermes_db.raw_sql("UPDATE sessions SET started_at = NULL")
    with StoreReader(Store(str(hermes_db.path)), now_s=NOW_S) as reader:
        assert by_day(reader) == {"2026-06-02": ["with_msgs"], "2026-06-03": ["only_end"], None: ["nothing"]}


def test_read_day_yields_whole_sessions_in_mid_order(fixture_copy):
    with StoreReader(Store(str(fixture_copy("small"))), now_s=NOW_S) as reader:
        days = by_day(reader)
        seen = []
        for b in read_days(reader):
            assert b.sid in days[b.day]
            mids = [m["id"] for m in b.messages]
            assert mids == sorted(mids)
            seen.append(b.sid)
    assert sorted(seen) == sorted(s for sids in days.values() for s in sids)
    assert len(seen) == len(set(seen)) == 59


# --------------------------------------------------------------------------
# text: per-cell UTF-8 decoding (SPEC §1 "Text", §9)
# --------------------------------------------------------------------------


def test_invalid_utf8_cell_is_read_with_replacement_and_counted(hermes_db):
    hermes_db.session("s", "cli")
    hermes_db.session("other", "cli")
    good = hermes_db.msg("s", "user", "fine")
    bad = hermes_db.msg("s", "assistant", "to be broken")
    hermes_db.msg("other", "user", "also fine")
    hermes_db.raw_sql("UPDATE messages SET content = CAST(x'41ff42' AS TEXT) WHERE id = ?", (bad,))
    store = Store(str(hermes_db.path), label="lab")
    with StoreReader(store, now_s=NOW_S) as reader:
        bundles = {b.sid: b for b in read_days(reader)}
    contents = {m["id"]: m["content"] for m in bundles["s"].messages}
    assert contents == {good: "fine", bad: "A\ufffdB"}
    assert [m["content"] for m in bundles["other"].messages] == ["also fine"]
    assert bad_cells(bundles.values()) == [("lab:s", "messages", "content", bad)]


def test_bad_cells_and_messages_are_in_id_order_whatever_order_the_index_reads(hermes_db):
    """The messages are fetched in the index's order (session, active, timestamp), not sorted
    by id in SQLite: a session whose times run against its ids still lists its messages, and
    its bad cells, by id."""
    hermes_db.session("s", "cli")
    mids = [hermes_db.msg("s", "user", f"m{i}") for i in range(4)]
    for k, mid in enumerate(mids):  # times backwards, the second inactive: the index reads 4, 3, 1, 2
        hermes_db.raw_sql(
            "UPDATE messages SET timestamp = timestamp - ?, active = ?, content = CAST(x'41ff42' AS TEXT) WHERE id = ?",
            (k * 10.0, 0 if k == 1 else 1, mid),
        )
    with StoreReader(Store(str(hermes_db.path)), now_s=NOW_S) as reader:
        (b,) = read_days(reader)
    assert [m["id"] for m in b.messages] == mids
    assert bad_cells([b]) == [("s", "messages", "content", mid) for mid in mids]


def test_utf8_encoded_lone_surrogate_bytes_are_replaced_and_counted(hermes_db):
    hermes_db.session("s", "cli")
    mid = hermes_db.msg("s", "user", "x")
    hermes_db.raw_sql("UPDATE messages SET content = CAST(x'61eda08062' AS TEXT) WHERE id = ?", (mid,))
    with StoreReader(Store(str(hermes_db.path)), now_s=NOW_S) as reader:
        (b,) = read_days(reader)
    content = b.messages[0]["content"]
    assert content.startswith("a") and content.endswith("b") and "\ufffd" in content
    assert not any(0xD800 <= ord(c) <= 0xDFFF for c in content)
    assert bad_cells([b]) == [("s", "messages", "content", mid)]


def test_invalid_utf8_in_a_session_cell_is_counted(hermes_db):
    hermes_db.session("s", "cli")
    hermes_db.raw_sql("UPDATE sessions SET title = CAST(x'c328' AS TEXT) WHERE id = 's'")
    with StoreReader(Store(str(hermes_db.path)), now_s=NOW_S) as reader:
        (b,) = read_days(reader)
    assert b.session["title"] == "\ufffd("
    assert bad_cells([b]) == [("s", "sessions", "title", None)]


# --------------------------------------------------------------------------
# busy and locked (SPEC §1)
# --------------------------------------------------------------------------


@pytest.fixture
def delete_journal_copy(fixture_copy):
    db = fixture_copy("oldest")
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    conn.close()
    return db


def test_exclusive_lock_on_open_is_store_busy_after_the_budget_then_success(delete_journal_copy):
    locker = sqlite3.connect(delete_journal_copy, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    reader = StoreReader(Store(str(delete_journal_copy)), busy_timeout_ms=200, now_s=NOW_S)
    t0 = time.monotonic()
    with pytest.raises(StoreBusy) as info:
        reader.open()
    elapsed = time.monotonic() - t0
    assert info.value.error_kind == "store_busy"
    assert 0.15 <= elapsed < 2.0, elapsed
    reader.close()
    locker.rollback()
    locker.close()
    with StoreReader(Store(str(delete_journal_copy)), busy_timeout_ms=200, now_s=NOW_S) as reader:
        assert len(reader.session_index()) == 12


def test_exclusive_lock_during_a_read_is_store_busy(delete_journal_copy):
    with StoreReader(Store(str(delete_journal_copy)), busy_timeout_ms=200, now_s=NOW_S) as reader:
        locker = sqlite3.connect(delete_journal_copy, isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(StoreBusy):
                reader.session_index()
        finally:
            locker.rollback()
            locker.close()
        assert len(reader.session_index()) == 12  # the next statement succeeds


def test_lock_released_within_the_budget_is_retried_not_failed(delete_journal_copy):
    locker = sqlite3.connect(delete_journal_copy, isolation_level=None, check_same_thread=False)
    locker.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.15, locker.rollback)
    release.start()
    try:
        with StoreReader(Store(str(delete_journal_copy)), busy_timeout_ms=3000, now_s=NOW_S) as reader:
            assert len(reader.session_index()) == 12
    finally:
        release.join()
        locker.close()


def test_one_day_is_one_read_transaction_and_none_is_held_between_days(tmp_path, monkeypatch):
    """SPEC §1 "Stream, briefly": a day's sessions, read in several
    statements (chunks of 2 here), all come from ONE snapshot: a message Hermes commits
    between two chunks is not seen half-way; and between two days no read transaction
    is held, so Hermes can checkpoint its whole WAL."""
    from hermes_assets.lib.source import state_db

    monkeypatch.setattr(state_db, "SESSION_CHUNK", 2)
    with HermesWriter(tmp_path / "h" / "state.db", home=tmp_path / "h") as w:
        for i in range(5):
            w.session(f"s{i}", "cli")
            w.msg(f"s{i}", "user", f"q{i}")
        w.at(w.now + DAY_S)
        w.session("next-day", "cli")
        w.msg("next-day", "user", "q")
        with StoreReader(Store(str(w.path)), now_s=NOW_S) as reader:
            index, (first_day, second_day) = reader.session_index(), sorted(by_day(reader))
            real_chunk = reader._read_chunk
            calls = []

            def chunk_then_write(day, sids, raw_ids):
                out = real_chunk(day, sids, raw_ids)
                if not calls:  # Hermes writes while the day is being read
                    w.msg("s4", "assistant", "written between two chunks of the day")
                calls.append(sids)
                return out

            monkeypatch.setattr(reader, "_read_chunk", chunk_then_write)
            first = reader.read_day(first_day, [(f"s{i}", index[f"s{i}"].raw_id) for i in range(5)])
            assert len(calls) == 3, "the day was not read in several statements (the test proves nothing)"
            assert [m["content"] for m in first[-1].messages] == ["q4"], "the day mixed two snapshots"
            conn = sqlite3.connect(w.path)  # between two days: nothing pins the WAL
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            conn.close()
            assert busy == 0, "the reader held a read transaction after the day"
            (again,) = reader.read_day(first_day, [("s4", index["s4"].raw_id)])
            assert [m["content"] for m in again.messages] == ["q4", "written between two chunks of the day"]
            assert [b.sid for b in reader.read_day(second_day, [("next-day", index["next-day"].raw_id)])] == [
                "next-day"
            ]


def test_store_mid_creation_is_not_ready_rather_than_foreign(tmp_path):
    """Hermes runs its schema script one statement at a time, ``schema_version``
    first: a reader that arrives between two statements sees some of Hermes's
    tables but not ``sessions``/``messages`` yet. That is "not created yet"
    (skip), not "not a Hermes store" (a failed tick)."""
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL)")
    conn.commit()
    conn.close()
    with pytest.raises(errors.StoreAbsent):
        StoreReader(Store(str(path))).open()


def test_messages_come_in_id_order_when_some_ids_of_a_chunk_are_not_integers(tmp_path):
    """A store whose message ids are not all rowids (hostile: a text id, a real): each session's
    messages in id order all the same, integers first by value, then the rest as text, in every
    session of the statement (one session's odd id does not change how another's are sorted)."""
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL)")
    conn.execute("CREATE TABLE messages (id, session_id TEXT, role TEXT, content TEXT, timestamp REAL)")
    t = START_S + 3600
    conn.executemany("INSERT INTO sessions VALUES (?, 'cli', ?)", [("plain", t), ("odd", t + 1)])
    rows = [(12, "plain"), (3, "plain"), (7, "plain"), ("b", "odd"), (9, "odd"), (2.5, "odd"), ("a", "odd"), (4, "odd")]
    conn.executemany("INSERT INTO messages VALUES (?, ?, 'user', 'x', ?)", [(mid, sid, t + 5) for mid, sid in rows])
    conn.commit()
    conn.close()
    with StoreReader(Store(str(path)), now_s=NOW_S) as reader:
        bundles = {b.sid: b for b in read_days(reader)}
    assert [m["id"] for m in bundles["plain"].messages] == [3, 7, 12]
    assert [m["id"] for m in bundles["odd"].messages] == [4, 9, 2.5, "a", "b"]


# --------------------------------------------------------------------------
# a row's dict (the reader makes one per message)
# --------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(st.text(max_size=12), unique=True, max_size=40),
    extra=st.integers(0, 3),
    cells=st.lists(st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(), st.binary())),
)
def test_row_dict_is_the_dict_of_names_and_cells_in_order(names, extra, cells):
    """:func:`row_dict` makes exactly ``dict(zip(names, row))``, keys in order, whatever the
    names (quotes, backslashes, any text) and with cells past the names left out; a row of
    another width is an error, never a dict of other cells."""
    row = tuple((cells * (len(names) + extra + 1))[: len(names) + extra]) if cells else (None,) * (len(names) + extra)
    make = row_dict(tuple(names), len(row))
    made = make(row)
    assert made == dict(zip(names, row))
    assert list(made) == names
    assert [made[k] is v for k, v in zip(names, row)] == [True] * len(names)
    with pytest.raises(ValueError):
        make((*row, None))


def test_row_dict_needs_a_cell_per_name():
    with pytest.raises(ValueError):
        row_dict(("id", "session_id"), 1)
