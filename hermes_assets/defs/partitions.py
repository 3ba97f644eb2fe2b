"""The one partitioning of all three datasets: UTC days, today included (SPEC §2)."""

import os

import dagster as dg

START_DATE = os.environ.get("HERMES_ASSETS_START_DATE", "2025-01-01")

daily_partitions = dg.DailyPartitionsDefinition(start_date=START_DATE, timezone="UTC", end_offset=1)
