"""The sightings kept per day and host: each old sighting judged as retention judges a row, the
exposures computed from them, and a key looked up by its markers; never a secret."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from hermes_assets.lib.basics.schemas import MESSAGES, SIGHTINGS
from hermes_assets.lib.capture import steps
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.redaction import exposures, key_check, sighting_files, stored_markers
from hermes_assets.lib.redaction.redactor import Redactor
from hermes_assets.lib.redaction.sightings import Sighting
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.support import fake_keys
from tests.support.capture_run import capture_days, files, stage
from tests.support.project import TEST_REDACTION

DAY = "2026-06-01"
HOME, WORK = "/h/.hermes/state.db", "/h/.hermes/profiles/work/state.db"
STORES = {"": HOME, "work": WORK}
LABELS = {path: label for label, path in STORES.items()}
T0 = dt.datetime(2026, 6, 1, 9, tzinfo=dt.UTC)


def sighting(marker: str, session: str, message: str | None, *, store: str = "", field: str = "messages.content"):
    kind = marker.split(":")[1]
    return Sighting(marker, kind, field, "", session, message, store, "", "")


def day_tables(deleted_p1: bool = False):
    sessions = pa.table(
        {
            "store_label": ["", "", "work"],
            "id": ["s1", "s2", "p1"],
            "source": ["cli", "telegram", "cli"],
            "started_at": pa.array([T0, T0 + dt.timedelta(hours=1), T0], pa.timestamp("ms", tz="UTC")),
            "source_deleted": [False, False, False],
        }
    )
    messages = pa.table(
        {
            "store_label": ["", "", "work"],
            "session_id": ["s1", "s2", "p1"],
            "id": pa.array([7, 9, 7], pa.int64()),
            "timestamp": pa.array(
                [T0 + dt.timedelta(minutes=5), T0 + dt.timedelta(hours=2), T0 + dt.timedelta(minutes=1)],
                pa.timestamp("ms", tz="UTC"),
            ),
            "source_deleted": [False, False, deleted_p1],
        }
    )
    return sessions, messages


def flag_deleted(table: pa.Table, flags: list[bool]) -> pa.Table:
    i = table.schema.get_field_index("source_deleted")
    return table.set_column(i, table.schema.field(i), pa.array(flags))


def facts(path: str, sessions: dict, messages: set, ignored: frozenset = frozenset()) -> StoreFacts:
    return StoreFacts(
        path,
        f"hash-{path}",
        {sid: DAY for sid in sessions},
        sessions_now=dict.fromkeys(sessions, 1),
        messages_now=dict.fromkeys(messages, 1),
        ignored=set(ignored),
    )


def test_rows_give_each_sighting_its_channel_time_and_store_and_leave_the_canonical_rows_out():
    seen = [
        sighting("[REDACTED:github_token:00000001]", "s1", "7"),
        sighting("[REDACTED:github_token:00000001]", "s2", None, field="sessions.title"),
        sighting("[REDACTED:github_token:00000001]", "p1", "7", store="work"),
        sighting(
            "[REDACTED:github_token:00000001]", "hermes-s1", "hermes-s1-7-0", field="ai_gateway_messages_hermes.x"
        ),
    ]
    table = sighting_files.rows(DAY, "laptop", seen, *day_tables(deleted_p1=True), STORES)
    got = {
        (r["store"], r["session_id"], r["message_id"]): (r["channel"], r["seen_at"], r["source_deleted"])
        for r in table.to_pylist()
    }
    assert got == {
        (HOME, "s1", "7"): ("cli", T0 + dt.timedelta(minutes=5), False),
        (HOME, "s2", None): ("telegram", T0 + dt.timedelta(hours=1), False),  # a session's cell: when it started
        # same ids, the other store's message: its row is kept after Hermes deleted it
        (WORK, "p1", "7"): ("cli", T0 + dt.timedelta(minutes=1), True),
    }
    assert set(table.column("host").to_pylist()) == {"laptop"} and set(table.column("day").to_pylist()) == {DAY}


def test_an_old_sighting_is_kept_flagged_or_dropped_by_what_its_store_holds_now():
    m = "[REDACTED:stripe_key:0000000{}]".format
    old = sighting_files.rows(
        DAY,
        "laptop",
        [
            sighting(m(1), "gone", "1"),  # the session was deleted: kept, flagged
            sighting(m(2), "s1", "5"),  # the message was deleted: kept, flagged
            sighting(m(3), "s1", "7"),  # the message is still there, the new read has no marker: dropped
            sighting(m(4), "s1", None, field="sessions.title"),  # a session's cell, the session is there: dropped
            sighting(m(5), "ignored", "1"),  # the usage policy ignores the session now: dropped
            sighting(m(6), "p1", "7", store="work"),  # a store this run did not read: kept as it is
        ],
        *day_tables(),
        STORES,
    )
    new = sighting_files.rows(DAY, "laptop", [sighting(m(7), "s1", "7")], *day_tables(), STORES)
    fresh = [facts(HOME, {"s1": 1, "ignored": 1}, {("s1", 7)}, frozenset({"ignored"}))]
    merged = sighting_files.merge(new, (None, old), fresh, LABELS)
    got = {r["marker"]: r["source_deleted"] for r in merged.to_pylist()}
    assert got == {m(1): True, m(2): True, m(6): False, m(7): False}
    # again, with the same inputs: the same rows (a flag once set stays)
    assert sighting_files.merge(new, (None, merged), fresh, LABELS).equals(merged)


def test_the_new_rows_of_a_store_read_later_by_another_run_are_left_out():
    new = sighting_files.rows(
        DAY, "laptop", [sighting("[REDACTED:github_token:00000009]", "s1", "7")], *day_tables(), STORES
    )
    assert sighting_files.merge(new, (None,), [], LABELS).num_rows == 0


def test_a_day_file_is_private_sorted_and_rewritten_only_when_it_changes(tmp_path):
    wh = Warehouse(str(tmp_path / "wh"), host="laptop", redaction_version="v-test")
    new = sighting_files.rows(
        DAY,
        "laptop",
        [sighting(f"[REDACTED:github_token:0000000{i}]", "s1", "7") for i in (3, 1, 2)],
        *day_tables(),
        STORES,
    )
    fresh = [facts(HOME, {"s1": 1}, {("s1", 7)})]
    first = sighting_files.write_day(wh, DAY, new, [], fresh, 1.0, STORES)
    path = tmp_path / "wh" / SIGHTINGS / f"day={DAY}" / "host=laptop" / "part-0.parquet"
    assert first.changed and first.rows == 3 and oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert sighting_files.read_all(wh).column("marker").to_pylist() == sorted(new.column("marker").to_pylist())
    before = path.read_bytes()
    again = sighting_files.write_day(wh, DAY, new, [], fresh, 2.0, STORES)
    assert not again.changed and path.read_bytes() == before
    # a run that read the store earlier than the file's mark leaves its rows alone
    late = sighting_files.write_day(wh, DAY, new.slice(0, 1), [], fresh, 1.5, STORES)
    assert late.rows == 3 and path.read_bytes() == before


def test_exposures_are_one_row_per_marker_over_every_host_and_day():
    g, s = "[REDACTED:github_token:0000000a]", "[REDACTED:stripe_key:0000000b]"
    day1 = sighting_files.rows(
        DAY,
        "laptop",
        [
            sighting(g, "s1", "7"),
            sighting(g, "s1", "7", field="messages.tool_calls"),
            sighting(s, "p1", "7", store="work"),
        ],
        *day_tables(),
        STORES,
    )
    day2 = sighting_files.rows(
        "2026-06-02", "desk", [sighting(g, "s2", None, field="sessions.title")], *day_tables(), STORES
    )
    flagged = flag_deleted(day1, [m == s for m in day1.column("marker").to_pylist()])
    found = exposures.exposures(pa.concat_tables([flagged, day2]))
    rows = {r["marker"]: r for r in found.table.to_pylist()}
    assert list(rows) == [g, s]
    assert rows[g]["kind"] == "github_token" and rows[g]["still_in_store"]
    assert (rows[g]["sessions"], rows[g]["messages"], rows[g]["sightings"]) == (2, 1, 3)
    assert rows[g]["hosts"] == ["desk", "laptop"] and rows[g]["channels"] == ["cli", "telegram"]
    assert rows[g]["fields"] == ["messages.content", "messages.tool_calls", "sessions.title"]
    assert (rows[g]["first_day"], rows[g]["last_day"]) == (DAY, "2026-06-02")
    assert rows[g]["first_seen"] == T0 + dt.timedelta(minutes=5) and rows[g]["last_seen"] == T0 + dt.timedelta(hours=1)
    assert not rows[s]["still_in_store"] and rows[s]["stores"] == [WORK]
    assert found.by_kind == {"github_token": 1, "stripe_key": 1}
    assert found.totals == {"secrets": 2, "still_in_store": 1, "sightings": 4}


@pytest.fixture
def key() -> bytes:
    return os.urandom(32)


def marker_of(key: bytes, text: str) -> set[str]:
    """What a capture writes for ``text`` in a cell: the redactor's own sightings of it."""
    r = Redactor(key)
    r.text(text)
    return {s.marker for s in r.take_sightings()}


def test_a_key_is_found_by_the_markers_a_capture_writes_for_it(key):
    token, password = fake_keys.github(), fake_keys.password()
    written = marker_of(key, "use " + token) | marker_of(key, f"export DEPLOY_TOKEN={password}")
    kinds = {m.split(":")[1] for m in written}
    assert len(written) == 2
    # the key alone, quoted, with a newline, or the line it was in: the same markers
    for pasted in (token, f'"{token}"\n', f"{password}\n", f"export DEPLOY_TOKEN={password}"):
        assert key_check.markers(key, pasted, kinds) & written, pasted
    assert not key_check.markers(key, fake_keys.github(), kinds) & written
    assert not key_check.markers(os.urandom(32), token, kinds) & written  # another warehouse's key
    assert key_check.markers(key, "  \n", kinds) == set()


def test_places_say_where_a_key_was_seen_still_stored_first(key):
    g = "[REDACTED:github_token:0000000a]"
    table = sighting_files.rows(
        DAY, "laptop", [sighting(g, "s1", "7"), sighting(g, "p1", "7", store="work")], *day_tables(), STORES
    )
    deleted = flag_deleted(table, [r["session_id"] == "s1" for r in table.to_pylist()])
    seen = key_check.places(deleted, {g, "[REDACTED:github_token:ffffffff]"})
    assert seen.markers == (g,) and seen.still_in_store
    assert [(p.store, p.session_id, p.still_in_store, p.fields) for p in seen.places] == [
        (WORK, "p1", True, ("messages.content",)),
        (HOME, "s1", False, ("messages.content",)),
    ]
    assert not key_check.places(deleted, {"[REDACTED:github_token:ffffffff]"}).places


def test_a_warehouse_from_before_the_sightings_gets_its_stored_markers_once(secret_store, tmp_path):
    """Files redacted before sightings existed: the first run that redacts finds their markers (any
    day, captured by the run or not), once; a capture of the day replaces them by its own."""
    db, keys = secret_store
    root = tmp_path / "wh"
    wh = Warehouse(str(root))
    capture_days([db], wh)
    shutil.rmtree(root / SIGHTINGS)  # as a warehouse from before the sightings
    os.unlink(stored_markers.stamp_path(wh))
    key = Path(TEST_REDACTION.key_path).read_bytes()
    want = set().union(*(marker_of(key, value) for value in keys.values()))
    assert len(want) == 2

    capture_days([db], wh, days=["2026-06-09"])  # another day, with no session: nothing captured
    found = sighting_files.read_all(wh).to_pylist()
    assert {r["marker"] for r in found} == want and {r["session_id"] for r in found} == {"s1"}
    assert {r["field"].split(".")[0] for r in found} == {MESSAGES}  # named by the dataset's columns
    assert all(r["prefix"] is None and r["last4"] is None and r["channel"] == "cli" for r in found)
    assert stored_markers.stamped(wh)
    before = files(root)
    capture_days([db], wh, days=["2026-06-09"])
    assert files(root) == before  # stamped: not read again

    capture_days([db], wh)  # the day captured again: its own sightings, with what recognises each key
    again = sighting_files.read_all(wh).to_pylist()
    assert {r["marker"] for r in again} == want
    assert {r["field"] for r in again} == {"messages.content", "messages.tool_calls"}
    assert {r["last4"] for r in again} == {value[-4:] for value in keys.values()}


def test_a_first_captures_sightings_file_is_staged_encoded_and_put_in_place_only_while_it_holds(
    secret_store, tmp_path, monkeypatch
):
    """A first capture's sightings file is encoded on the worker and put in place as it is (no
    merge at the write); a day with a file by then (another run wrote it meanwhile), or a re-run,
    merges as before; the files are the same either way."""
    db, _ = secret_store
    merged: list[str] = []
    merge = sighting_files.merge
    monkeypatch.setattr(sighting_files, "merge", lambda new, *args: merged.append("merge") or merge(new, *args))

    write_day = sighting_files.write_day
    with monkeypatch.context() as before:  # as before: every day merged
        before.setattr(sighting_files, "write_day", lambda *args, encoded: write_day(*args))
        capture_days([db], Warehouse(str(tmp_path / "merged")))
    assert merged

    wh = Warehouse(str(tmp_path / "wh"))
    first = stage([db], wh, run_id="first")
    staged = [day.sightings_file for day in first.days if day.sightings_file is not None]
    assert staged and all(os.path.exists(path) for path in staged)
    other = stage([db], wh, run_id="other")  # staged before either wrote: a first capture too
    merged.clear()
    written = steps.write_partitions(first, wh)
    assert not merged, "a first capture's staged sightings file was merged again"
    assert written.sightings and all(r.changed for r in written.sightings)
    assert files(tmp_path / "wh") == files(tmp_path / "merged")
    assert all(os.stat(tmp_path / "wh" / p).st_mode & 0o777 == 0o600 for p in files(tmp_path / "wh"))

    steps.write_partitions(other, wh)  # the day has a file now: merged with it, not replaced
    assert len(merged) == len(staged)
    merged.clear()
    again = stage([db], wh, run_id="again")
    assert all(day.sightings_file is None for day in again.days)  # a re-run stages no file
    steps.write_partitions(again, wh)
    assert len(merged) == len(staged)
    assert files(tmp_path / "wh") == files(tmp_path / "merged")

    late = Warehouse(str(tmp_path / "late"))
    run = stage([db], late, run_id="late")
    for day in run.days:  # a later read of the store marked the days meanwhile: its rows are not ours to write
        os.makedirs(late.file_dir(SIGHTINGS, day.day))
        late._write_marks(SIGHTINGS, day.day, {"*": run.plan.read_at + 1})
    merged.clear()
    steps.write_partitions(run, late)
    assert len(merged) == len(staged)
    assert not [p for p in files(tmp_path / "late") if p.startswith(SIGHTINGS)]
