"""The one partitioning of all three datasets: UTC days, today included (SPEC §2).

The first day is ``HERMES_ASSETS_START_DATE`` when it is set. Otherwise it is
where the user's history starts, found when the definitions load
(:mod:`hermes_assets.lib.warehouse.history`: one cheap statement per store): the day of
the earliest session in the discovered stores, or of the earliest day already
captured in a local warehouse if that is earlier; with neither, today. So a
user with five days of Hermes history sees five partitions.

Older history that appears while Dagster runs (a store restored from a backup,
a store with older sessions added to a folder of stores, a session begun just
before midnight when Dagster started on an empty store) is captured at once,
with no reload: every run loads the definitions afresh, so in a run the first
day is already that older day (its sessions are in a store), and the sensor
requests the tick's older days in one run of their own (:meth:`Days.before_first`). The loaded
definitions, the UI's partitions page among them, show the day from their next
load; from then on the start stays there, since the captured day counts (a
local warehouse). With ``HERMES_ASSETS_START_DATE`` set, a day before it stays
pending: the user chose where the partitions start.
"""

import datetime as dt
from typing import NamedTuple

import dagster as dg

from hermes_assets.defs import settings
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.stores import discover_stores
from hermes_assets.lib.warehouse import history


class Start(NamedTuple):
    """The first partition, and why it is that day (as ``defs/console.py`` says it)."""

    day: str
    why: str
    #: True when no Hermes session was found at all: the start is today for want of a store,
    #: and moving HERMES_ASSETS_START_DATE would capture nothing
    no_history: bool = False


def start(s: settings.Settings) -> Start:
    """The first partition: the setting, else where the history starts, else today (UTC); and why."""
    if s.start_day:
        return Start(s.start_day, f"HERMES_ASSETS_START_DATE={s.start_day}")
    stores = discover_stores(s.state_db, s.hermes_home)
    found = history.first_day(
        stores,
        HermesWarehouse.from_settings(s).open(),
        readers=ReaderFactory(busy_timeout_ms=s.busy_timeout_ms),
    )
    today = dt.datetime.now(dt.UTC).date().isoformat()
    if found:  # a session a writer's fast clock put in tomorrow starts nothing later
        why = "HERMES_ASSETS_START_DATE is unset, so they start on the day of the earliest Hermes session"
        return Start(min(found, today), why)
    present = [store.path for store in stores if store.exists()]
    if present:
        return Start(today, f"no session in the Hermes store {', '.join(present)} yet, so they start today", True)
    where = ", ".join(store.path for store in stores) or f"{s.state_db} (no state.db in it)"
    return Start(today, f"no Hermes store at {where}, so they start today", True)


class Days(NamedTuple):
    """The daily partitions of one load of the definitions, and where they start and why.

    Built by :func:`build` in the definitions function (``hermes_assets/definitions.py``),
    once per load, with the settings of that load: *Reload definitions* reads the history
    start, the settings and the stores again, together."""

    partitions: dg.DailyPartitionsDefinition
    start: Start
    #: True when HERMES_ASSETS_START_DATE is unset: the first day follows the history
    follows_history: bool

    def first(self) -> str:
        return self.start.day

    def before_first(self, day: str) -> bool:
        """Whether ``day`` (a changed day these partitions lack) is Hermes history older than the
        first partition that a run captures all the same: the first day follows the history
        (``HERMES_ASSETS_START_DATE`` unset), and the run's own load of the definitions starts at
        the earliest session then, which is on ``day`` or before it."""
        return self.follows_history and day < self.start.day


def build(s: settings.Settings) -> Days:
    """The daily partitions of the definitions being loaded with the settings ``s`` (:func:`start`)."""
    first = start(s)
    daily = dg.DailyPartitionsDefinition(start_date=first.day, timezone="UTC", end_offset=1)
    return Days(daily, first, s.start_day is None)
