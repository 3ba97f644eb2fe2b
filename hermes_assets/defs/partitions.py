"""The one partitioning of all three datasets: UTC days, today included (SPEC §2)."""

import dagster as dg

from hermes_assets.defs import settings

daily_partitions = dg.DailyPartitionsDefinition(
    start_date=settings.load().start_day, timezone="UTC", end_offset=1
)
