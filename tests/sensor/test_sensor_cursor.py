"""The cursor Dagster keeps is a one-line summary; the sensor's state lives in the instance beside it.

On a real (ephemeral) Dagster instance and the state of a real tick over the small fixture:
the summary stays short whatever the history's length, names the state it stands for, and a
state read back is the text that was written; the state the tick before kept is still found
(a tick whose cursor Dagster did not store); an old cursor, the state itself, is read as it is;
a state that is gone starts the sensor over, with one warning.
"""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import pytest
import structlog

from hermes_assets.defs import sensor_cursor
from hermes_assets.lib.changes import watch
from hermes_assets.lib.changes.cursor import CURSOR_VERSION
from hermes_assets.lib.source.stores import Store


@pytest.fixture
def instance():
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


@pytest.fixture
def state(fixture_copy) -> str:
    """The state of a first tick over the small fixture (14 days), and a long history's worth of
    days covered."""
    db = fixture_copy("small")
    plan = watch.plan_tick(
        [Store(str(db))],
        None,
        is_partition=lambda d: True,
        partition_days=[(dt.date(2026, 1, 1) + dt.timedelta(days=i)).isoformat() for i in range(362)],
    )
    return plan.cursor_json


def test_the_cursor_is_one_short_line_naming_its_state(instance, state):
    cursor = sensor_cursor.summarize(instance, None, state)
    assert len(state) > 4000 and len(cursor) < 200 and "\n" not in cursor
    summary = json.loads(cursor)
    assert summary["version"] == CURSOR_VERSION and summary["stores"] == 1 and summary["days"] == 14
    assert summary["covered"] == "2026-01-01..2026-12-28" and summary["open"] == 362
    assert sensor_cursor.state_of(instance, cursor) == state


def test_an_unchanged_state_keeps_its_cursor_and_a_new_one_keeps_the_one_before(instance, state):
    first = sensor_cursor.summarize(instance, None, state)
    assert sensor_cursor.summarize(instance, first, state) == first
    changed = state.replace('"failing":[]', '"failing":["2026-06-01"]')
    second = sensor_cursor.summarize(instance, first, changed)
    assert second != first and json.loads(second)["failing"] == 1
    assert json.loads(second)["state"].split(".")[0] == json.loads(first)["state"].split(".")[0]
    # Dagster kept the first cursor (a daemon stopped before it stored the second): still found
    assert sensor_cursor.state_of(instance, first) == state
    assert sensor_cursor.state_of(instance, second) == changed
    third = sensor_cursor.summarize(instance, second, state.replace('"failing":[]', '"failing":["2026-06-02"]'))
    assert sensor_cursor.state_of(instance, first) is None  # two states kept, not more
    assert sensor_cursor.state_of(instance, third) is not None


def test_an_old_cursor_is_the_state_itself(instance, state):
    assert sensor_cursor.state_of(instance, state) == state
    assert sensor_cursor.state_of(instance, None) is None and sensor_cursor.state_of(instance, "") is None
    # a sensor started from nothing gets a lineage of its own: another sensor's state is never read
    a = sensor_cursor.summarize(instance, None, state)
    b = sensor_cursor.summarize(instance, state, state)
    assert json.loads(a)["state"].split(".")[0] != json.loads(b)["state"].split(".")[0]


def test_a_state_that_is_gone_starts_over_with_one_warning(instance, state):
    cursor = sensor_cursor.summarize(instance, None, state)
    lineage = json.loads(cursor)["state"].split(".")[0]
    instance.run_storage.set_cursor_values({sensor_cursor.KEY_PREFIX + lineage: "{}"})
    with structlog.testing.capture_logs() as events:
        assert sensor_cursor.state_of(instance, cursor) is None
    assert [e["event"] for e in events] == ["hermes.sensor.cursor_state_missing"]
