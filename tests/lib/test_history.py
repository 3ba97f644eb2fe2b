"""Where the history starts (SPEC §2): the first partition when no start date is set."""

from __future__ import annotations

import datetime as dt

from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.warehouse import history
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.support.hermes_writer import DAY_S, START_S

NOW_S = START_S + 30 * DAY_S


def day(epoch_s: float) -> str:
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).date().isoformat()


def test_the_earliest_sane_session_of_every_store(hermes_db, fixture_copy, tmp_path):
    w = hermes_db
    w.at(START_S + 3 * DAY_S)
    w.session("later", "cli")
    w.at(START_S + DAY_S)
    w.session("first", "cli")
    w.session("insane", "cli")
    # cells no Hermes API writes: before 2000 and far in the future (not sane), an ISO text cell
    w.raw_sql("UPDATE sessions SET started_at = 12.5 WHERE id = 'insane'")
    w.session("future", "cli")
    w.raw_sql("UPDATE sessions SET started_at = ? WHERE id = 'future'", (NOW_S + 10 * DAY_S,))
    assert history.earliest_session_ms(Store(str(w.path)), NOW_S) == int(
        (START_S + DAY_S + 1) * 1000
    )  # "first": one clock step after at()
    w.session("as-text", "cli")
    w.raw_sql("UPDATE sessions SET started_at = '2026-05-20T23:59:59.5Z' WHERE id = 'as-text'")
    assert day(history.earliest_session_ms(Store(str(w.path)), NOW_S) / 1000) == "2026-05-20"
    small = fixture_copy("small")
    assert history.first_day([Store(str(small))], now_s=NOW_S) == "2026-06-01"
    assert history.first_day([Store(str(small)), Store(str(w.path))], now_s=NOW_S) == "2026-05-20"


def test_no_store_no_history_and_a_bad_store_is_left_out(tmp_path, fixture_copy):
    assert history.first_day([Store(str(tmp_path / "none" / "state.db"))], now_s=NOW_S) is None
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database" * 1000)
    small = fixture_copy("small")
    assert history.first_day([Store(str(bad)), Store(str(small))], now_s=NOW_S) == "2026-06-01"


def test_days_already_captured_keep_their_partitions(tmp_path, fixture_copy):
    """Hermes may prune old sessions: the days captured from them stay partitions (local warehouse)."""
    warehouse = tmp_path / "warehouse"
    (warehouse / "hermes_sessions" / "day=2026-01-02").mkdir(parents=True)
    (warehouse / "hermes_sessions" / "day=2026-01-02" / "part-0.parquet").write_bytes(b"")
    (warehouse / "hermes_sessions" / "day=2025-01-01").mkdir(parents=True)  # a lock, no rows: not a day of history
    small = fixture_copy("small")
    assert history.first_day([Store(str(small))], Warehouse(str(warehouse)), now_s=NOW_S) == "2026-01-02"
    assert history.first_day([], Warehouse("s3://bucket/prefix"), now_s=NOW_S) is None  # never listed at load
