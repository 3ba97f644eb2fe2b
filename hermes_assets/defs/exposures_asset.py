"""``hermes_secret_exposures``: what to rotate, one row per secret seen (docs/redaction.md).

Computed whole from the sightings each capture writes beside the three
datasets (every day, every host: :mod:`hermes_assets.lib.redaction.exposures`),
in the ``hermes_analytics`` group: like the daily analytics it is derived from
what the capture wrote, and keeps itself current through the
``hermes_automation`` sensor, after every capture of any day (a day never
captured does not hold it back: it is not partitioned). Each materialization
carries the secrets per kind as numeric metadata (``secrets.<kind>``), which the
asset's *Plots* draw over time, and a table of the secrets still in Hermes's
store: markers, kinds, prefixes and last four characters, never a secret.
"""

import dagster as dg

from hermes_assets.defs.analytics_assets import GROUP, automation_condition
from hermes_assets.defs.capture_assets import OWNERS, column_schema
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, EXPOSURES
from hermes_assets.lib.redaction import exposures
from hermes_assets.lib.redaction.exposures import Exposures
from hermes_assets.lib.warehouse.datasets import WriteResult

#: the secrets still in Hermes's store listed in a materialization's metadata (the file has them all)
LISTED = 50

DESCRIPTION = (
    "What to rotate: one row per distinct secret the capture redacted (its marker), over every host and day: "
    "its kind, the provider's prefix and last four characters (never the value), first and last seen, sessions, "
    "messages, channels, stores, hosts, the fields it was in, and `still_in_store`: whether some cell that holds it "
    "is still in Hermes's store (not only in rows Hermes has deleted since, `source_deleted`). Markers of several "
    "hosts join only when the hosts share HERMES_ASSETS_REDACTION_KEY. "
    "`python -m hermes_assets.secrets check` says whether a key you paste passed through Hermes, and where."
)


def metadata(result: WriteResult, found: Exposures) -> dict:
    """A materialization's metadata: the file, the totals, the secrets per kind (plotted) and
    the secrets still in the store."""
    still = [r for r in found.table.to_pylist() if r["still_in_store"]]
    still.sort(key=lambda r: (r["last_seen"] is None, r["last_seen"]), reverse=True)
    return {
        "dagster/row_count": result.rows,
        "path": dg.MetadataValue.path(result.path),
        **found.totals,
        **{f"secrets.{kind}": n for kind, n in found.by_kind.items()},
        "rotate_first": dg.MetadataValue.md(_rotate_first(still[:LISTED], len(still))),
    }


def _rotate_first(rows: list[dict], total: int) -> str:
    if not rows:
        return "No secret seen is still in Hermes's store."
    lines = ["| marker | kind | key | last seen | sessions |", "|---|---|---|---|---|"]
    for r in rows:
        key = f"{r['prefix'] or ''}…{r['last4']}" if r["last4"] else (r["prefix"] or "")
        seen = r["last_seen"].isoformat(timespec="seconds") if r["last_seen"] else r["last_day"]
        lines.append(f"| `{r['marker']}` | {r['kind']} | `{key}` | {seen} | {r['sessions']} |")
    if total > len(rows):
        lines.append(f"\n{total - len(rows)} more in the file.")
    return "\n".join(lines)


def exposures_asset() -> dg.AssetsDefinition:
    """``hermes_secret_exposures``: not partitioned, after every capture of any day."""

    @dg.asset(
        name=EXPOSURES,
        description=DESCRIPTION,
        group_name=GROUP,
        deps=[dg.AssetKey(dataset) for dataset in CAPTURE_DATASETS],
        automation_condition=automation_condition(every_day=True),
        backfill_policy=dg.BackfillPolicy.single_run(),  # as every asset: one run in a backfill with them
        kinds={"parquet", "python"},
        owners=OWNERS,
        metadata={"dagster/column_schema": column_schema(EXPOSURES)},
    )
    def hermes_secret_exposures(warehouse: HermesWarehouse) -> dg.MaterializeResult:
        result, found = exposures.write_current(warehouse.open())
        return dg.MaterializeResult(metadata=metadata(result, found))

    return hermes_secret_exposures
