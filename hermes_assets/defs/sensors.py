"""The watermark sensor: request the days whose Hermes data changed (SPEC §8, spec R6).

Change detection lives in :mod:`hermes_assets.lib.changes`; this module turns
its plan into one ``RunRequest`` per changed day for the three assets. A store
that cannot be read is named in the tick's logs (and in the skip reason when
nothing is requested) while the other stores' days are requested (SPEC D18). When a
tick finds more changed days than ``HERMES_ASSETS_SENSOR_MAX_RUNS`` (default 14:
a first start on a long history, a restored store), it requests one ranged run
over them instead, the way a single-run backfill does: a year of history then
costs one run of seconds, not hundreds of runs.
"""

import hashlib

import dagster as dg

from hermes_assets.defs import settings
from hermes_assets.defs.partitions import daily_partitions
from hermes_assets.defs.resources import HermesStores
from hermes_assets.lib import changes
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.warehouse import GATEWAY, MESSAGES, SESSIONS

log = get_logger()

HERMES_ASSETS = dg.AssetSelection.assets(SESSIONS, MESSAGES, GATEWAY)
TRIGGER_TAG = {"hermes/trigger": "sensor"}


@dg.sensor(
    name="hermes_state_sensor",
    target=HERMES_ASSETS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=settings.load().poll_seconds,
    description="Watches the Hermes store(s): a tick whose store files did not change runs no SQL; "
    "otherwise one run per UTC day whose sessions or messages changed (SPEC §8).",
)
def hermes_state_sensor(context: dg.SensorEvaluationContext, hermes: HermesStores):
    stores = hermes.stores()
    plan = changes.plan_tick(
        stores,
        context.cursor,
        is_partition=daily_partitions.has_partition_key,
        busy_timeout_ms=hermes.busy_timeout_ms,
    )
    requests = run_requests(plan.requests)
    # runs, not days: more than HERMES_ASSETS_SENSOR_MAX_RUNS days make one ranged run
    counts = {**plan.counts(), "runs_requested": len(requests)}
    failed = [{"store": s.store.label, "path": s.store.path, "error_kind": s.failure.error_kind} for s in plan.failures]
    log.info("hermes.sensor.tick", ms=round(plan.ms, 2), **counts, **({"failed": failed} if failed else {}))
    context.log.info(f"hermes.sensor.tick {counts}")
    for scan in plan.failures:  # D18: named in the tick's log, whatever else the tick requests
        context.log.error(f"hermes.sensor.store_failed {scan.store.path} ({scan.failure.error_kind}): {scan.failure.message} "
                          "Its cursor entry is kept; the next tick reads it again.")
    cursor = plan.cursor_json
    reason = plan.skip_reason if stores else _no_store_reason(hermes)
    if requests:
        return dg.SensorResult(run_requests=requests, cursor=cursor)
    if cursor != (context.cursor or ""):
        return dg.SensorResult(skip_reason=reason, cursor=cursor)
    return dg.SkipReason(reason)


def run_requests(requests: list[tuple[str, str]], max_runs: int | None = None) -> list[dg.RunRequest]:
    """One run per changed day, or one ranged run when there are too many days."""
    max_runs = max_runs if max_runs is not None else settings.load().sensor_max_runs
    if len(requests) <= max_runs:
        return [dg.RunRequest(partition_key=day, run_key=f"{day}@{h}", tags=TRIGGER_TAG) for day, h in requests]
    days = sorted(day for day, _ in requests)
    h = hashlib.sha256("|".join(f"{d}@{x}" for d, x in sorted(requests)).encode()).hexdigest()[:12]
    tags = {
        **TRIGGER_TAG,
        "dagster/asset_partition_range_start": days[0],
        "dagster/asset_partition_range_end": days[-1],
    }
    return [dg.RunRequest(run_key=f"{days[0]}...{days[-1]}@{h}", tags=tags)]


def _no_store_reason(hermes: HermesStores) -> str:
    """Skip reason when discovery found no store at all (e.g. an empty HERMES_STATE_DB folder)."""
    where = hermes.state_db
    if where:
        return f"no Hermes store found: HERMES_STATE_DB={where} holds no state.db (folders are searched for **/state.db)"
    return "no Hermes store found"

