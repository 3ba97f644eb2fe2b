"""The purge job: remove a scope's or a session's rows from every partition."""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from hermes_assets.defs.analytics_assets import day_metadata
from hermes_assets.defs.exposures_asset import metadata as exposures_metadata
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib.analytics import daily
from hermes_assets.lib.redaction import exposures
from hermes_assets.lib.schemas import EXPOSURES
from hermes_assets.lib.warehouse.purge import purge


class PurgeConfig(dg.Config):
    scope: str | None = None
    """An absolute directory (or channel scope path such as ~/.hermes/channels/telegram)."""
    session_id: str | None = None
    """A Hermes session id (raw, `label:sid`, or `hermes-...`)."""


@dg.op(
    description="Remove matching rows from every partition of the three datasets, and the sightings of their "
    "secrets, atomically per file, and recompute the analytics days and the exposures they fed."
)
def purge_scope(
    context: dg.OpExecutionContext, config: PurgeConfig, warehouse: HermesWarehouse
) -> Iterator[dg.AssetMaterialization | dg.Output]:
    if not config.scope and not config.session_id:
        raise dg.Failure("purge_scope needs `scope` or `session_id` in its config")
    wh = warehouse.open()
    result = purge(wh, scope=config.scope, session_id=config.session_id)
    summary: dict[str, Any] = {
        "rows_removed": result.removed,
        "days_rewritten": {k: len(v) for k, v in result.days.items()},
        "sessions_matched": result.sessions,
    }
    # the analytics of a purged day were computed from the purged rows: they go too
    days = sorted({day for per_dataset in result.days.values() for day in per_dataset})
    for dataset, written in daily.rebuild_days(wh, days).items():
        for write, figures in written:
            yield dg.AssetMaterialization(
                asset_key=dataset,
                partition=write.day,
                metadata={**day_metadata(write, figures), "rebuilt_by": "purge_job"},
            )
    if result.sightings:  # the secrets seen in the purged sessions: what to rotate is computed again
        write, found = exposures.write_current(wh)
        yield dg.AssetMaterialization(
            asset_key=EXPOSURES, metadata={**exposures_metadata(write, found), "rebuilt_by": "purge_job"}
        )
    summary["sightings_removed"] = result.sightings
    yield dg.Output(summary, metadata={**summary, "days": result.days, "analytics_days_rebuilt": len(days)})


@dg.job(description="Purge captured rows of a scope path or a session (SPEC §7).", tags={"hermes/kind": "purge"})
def purge_job() -> None:
    purge_scope()
