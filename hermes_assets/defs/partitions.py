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
requests it as a run of that one day (:func:`before_first`). The loaded
definitions, the UI's partitions page among them, show the day from their next
load; from then on the start stays there, since the captured day counts (a
local warehouse). With ``HERMES_ASSETS_START_DATE`` set, a day before it stays
pending: the user chose where the partitions start.
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


_LOADED = settings.in_use()
daily_partitions = dg.DailyPartitionsDefinition(start_date=first_day(_LOADED), timezone="UTC", end_offset=1)


def before_first(day: str) -> bool:
    """Whether ``day`` (a changed day the loaded partitions lack) is Hermes history older than the
    first partition that a run captures all the same: the first day follows the history
    (``HERMES_ASSETS_START_DATE`` unset), and the run's own load of the definitions starts at
    the earliest session then, which is on ``day`` or before it."""
    first = daily_partitions.get_first_partition_key()
    return _LOADED.start_day is None and first is not None and day < first
