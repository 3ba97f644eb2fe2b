"""The one partitioning of all three datasets: UTC days, today included (SPEC §2).

The first day is ``HERMES_ASSETS_START_DATE`` when it is set. Otherwise it is
where the user's history starts, found when the definitions load
(:mod:`hermes_assets.lib.warehouse.history`: one cheap statement per store): the day of
the earliest session in the discovered stores, or of the earliest day already
captured in a local warehouse if that is earlier; with neither, today. So a
user with five days of Hermes history sees five partitions. A store restored
with older sessions moves the start back at the next load (*Reload
definitions* in the UI, or a restart); until then the sensor keeps those days
pending and says so.
"""

import datetime as dt

import dagster as dg

from hermes_assets.defs import settings
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib.source.state_db import ReaderFactory
from hermes_assets.lib.source.stores import discover_stores
from hermes_assets.lib.warehouse import history


def first_day(s: settings.Settings) -> str:
    """The first partition: the setting, else where the history starts, else today (UTC)."""
    if s.start_day:
        return s.start_day
    found = history.first_day(
        discover_stores(s.state_db, s.hermes_home),
        HermesWarehouse.from_settings(s).open(),
        readers=ReaderFactory(busy_timeout_ms=s.busy_timeout_ms),
    )
    today = dt.datetime.now(dt.UTC).date().isoformat()
    return min(found or today, today)  # a session a writer's fast clock put in tomorrow starts nothing later


daily_partitions = dg.DailyPartitionsDefinition(start_date=first_day(settings.in_use()), timezone="UTC", end_offset=1)
