"""``make run`` starts on a Dagster whose event-log internals moved, with one warning.

The default instance's event log subclasses a private Dagster class
(``hermes_assets/event_log.py``). Here every Python process that ``make run``
starts (the settings check, ``dg dev``, the webserver, the daemon, the code
server, the runs) sees a Dagster whose ``_store_asset_event`` takes other
parameters, as an upgrade might bring: Dagster's own SQLite event log takes
over, the sensor's capture is stored and shown as before, and the console
says it once.
"""

from __future__ import annotations

import time

import pytest

from hermes_assets.event_log import FALLBACK_NOTE
from tests.e2e.test_backfill_graphql import _free_port
from tests.e2e.test_first_hour import (
    PARTITIONS_Q,
    _graphql,
    clean_env,
    group_gone,
    install,  # noqa: F401  (the fixture)
    write_five_days,
)
from tests.e2e.test_make_run import start_make_run, stop_for_good

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: loaded by every Python process started with this folder on PYTHONPATH; Dagster's own storage
#: keeps working (its store_event calls the method as before)
SITECUSTOMIZE = """
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

_before = SqliteEventLogStorage._store_asset_event

def _store_asset_event(self, conn, event, event_id, *, moved=True):
    return _before(self, conn, event, event_id)

SqliteEventLogStorage._store_asset_event = _store_asset_event
"""
WARNING = "changed what the batched event log relies on"


def test_make_run_starts_on_a_changed_dagster_with_one_warning(install, tmp_path):
    days = write_five_days(install)
    changed = tmp_path / "changed-dagster"
    changed.mkdir()
    (changed / "sitecustomize.py").write_text(SITECUSTOMIZE)
    port = _free_port()
    env = clean_env(**install.environ(), HERMES_ASSETS_POLL_SECONDS="5", PYTHONPATH=str(changed))
    env.pop("HERMES_ASSETS_START_DATE", None)
    env.pop("DAGSTER_EVENT_BATCH_SIZE", None)
    console = tmp_path / "console.txt"
    proc = start_make_run(env, port, console)
    try:
        deadline = time.monotonic() + 240
        stats = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, console.read_text()[-4000:]
            try:
                stats = [n["partitionStats"] for n in _graphql(port, PARTITIONS_Q)["assetNodes"]]
            except Exception:  # not up yet
                time.sleep(1)
                continue
            if all(s["numMaterialized"] == len(days) for s in stats):
                break
            time.sleep(2)
        assert stats and all(s["numMaterialized"] == len(days) for s in stats), (stats, console.read_text()[-3000:])
    finally:
        print(console.read_text())  # shown when the test fails
        stop = stop_for_good(proc, env)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert group_gone(proc.pid, 30)
    text = console.read_text()
    said = [line for line in text.splitlines() if WARNING in line]
    assert len(said) == 1, text[-4000:]
    assert "_store_asset_event(" in said[0] and "Dagster's own SQLite event log" in said[0]
    note = install.dagster_home / "history" / "runs" / FALLBACK_NOTE
    assert note.read_text().endswith("was (self, conn, event, event_id)")
