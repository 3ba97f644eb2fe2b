"""The jobs: the purge (a scope's or a session's rows out of every partition) and the relabel
(a host label's files moved to this host)."""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from hermes_assets.defs.analytics_assets import day_metadata
from hermes_assets.defs.capture_assets import refuse_host_conflicts
from hermes_assets.defs.exposures_asset import metadata as exposures_metadata
from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib.analytics import daily
from hermes_assets.lib.basics.errors import HostConflict
from hermes_assets.lib.basics.schemas import EXPOSURES
from hermes_assets.lib.hosts.host_claims import RELABEL_JOB
from hermes_assets.lib.redaction import exposures
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.purge import purge
from hermes_assets.lib.warehouse.relabel import relabel as relabel_host


def rebuilt_analytics(wh: Warehouse, days: list[str], *, by: str) -> Iterator[dg.AssetMaterialization]:
    """The analytics of ``days`` computed again (their inputs changed under a job), one
    materialization per day and dataset, saying which job rebuilt it."""
    for dataset, written in daily.rebuild_days(wh, days).items():
        for write, figures in written:
            yield dg.AssetMaterialization(
                asset_key=dataset, partition=write.day, metadata={**day_metadata(write, figures), "rebuilt_by": by}
            )


def rebuilt_exposures(wh: Warehouse, *, by: str) -> Iterator[dg.AssetMaterialization]:
    """What to rotate computed again (the sightings changed under a job), its materialization
    saying which job rebuilt it."""
    write, found = exposures.write_current(wh)
    yield dg.AssetMaterialization(asset_key=EXPOSURES, metadata={**exposures_metadata(write, found), "rebuilt_by": by})


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
    refuse_host_conflicts(lambda: warehouse.check_host(wh))
    result = purge(wh, scope=config.scope, session_id=config.session_id)
    summary: dict[str, Any] = {
        "rows_removed": result.removed,
        "days_rewritten": {k: len(v) for k, v in result.days.items()},
        "sessions_matched": result.sessions,
    }
    # the analytics of a purged day were computed from the purged rows: they go too
    days = sorted({day for per_dataset in result.days.values() for day in per_dataset})
    yield from rebuilt_analytics(wh, days, by="purge_job")
    if result.sightings:  # the secrets seen in the purged sessions: what to rotate is computed again
        yield from rebuilt_exposures(wh, by="purge_job")
    summary["sightings_removed"] = result.sightings
    yield dg.Output(summary, metadata={**summary, "days": result.days, "analytics_days_rebuilt": len(days)})


@dg.job(description="Purge captured rows of a scope path or a session (SPEC §7).", tags={"hermes/kind": "purge"})
def purge_job() -> None:
    purge_scope()


class RelabelConfig(dg.Config):
    from_label: str
    """The label whose files move to this host (a hostname this host had, a container's name)."""
    to_label: str | None = None
    """The new label (default: this host's). Another only when ``from_label`` is this host's own: it is renamed."""


@dg.op(
    description="Move every file of a host label to this host's folders, ids rewritten as this host writes them "
    "(nothing lost; idempotent), then recompute the analytics of the days moved and, when sightings of secrets "
    "moved, what to rotate."
)
def relabel(
    context: dg.OpExecutionContext, config: RelabelConfig, warehouse: HermesWarehouse
) -> Iterator[dg.AssetMaterialization | dg.Output]:
    wh = warehouse.open()
    try:
        moved = relabel_host(wh, config.from_label, warehouse.identity_file, to_label=config.to_label)
    except (ValueError, HostConflict) as exc:
        raise dg.Failure(description=str(exc)) from exc
    wh.host = moved.to_label
    yield from rebuilt_analytics(wh, sorted(moved.days), by=RELABEL_JOB)
    if moved.sightings:  # the secrets' hosts and stores are named by the new label: what to rotate too
        yield from rebuilt_exposures(wh, by=RELABEL_JOB)
    yield dg.Output(moved.metadata(), metadata=moved.metadata())


@dg.job(
    name=RELABEL_JOB,
    description="Move a host label's files to this host (deploy/README.md, 'Relabel a host').",
    tags={"hermes/kind": "relabel"},
)
def relabel_job() -> None:
    relabel()
