"""The purge job: remove a scope's or a session's rows from every partition."""

import dagster as dg

from hermes_assets.defs.resources import HermesWarehouse
from hermes_assets.lib.purge import purge


class PurgeConfig(dg.Config):
    scope: str | None = None
    """An absolute directory (or channel scope path such as ~/.hermes/channels/telegram)."""
    session_id: str | None = None
    """A Hermes session id (raw, `label:sid`, or `hermes-...`)."""


@dg.op(description="Remove matching rows from every partition of the three datasets, atomically per file.")
def purge_scope(context: dg.OpExecutionContext, config: PurgeConfig, warehouse: HermesWarehouse) -> dg.Output[dict]:
    if not config.scope and not config.session_id:
        raise dg.Failure("purge_scope needs `scope` or `session_id` in its config")
    result = purge(warehouse.open(), scope=config.scope, session_id=config.session_id)
    summary = {
        "rows_removed": result.removed,
        "days_rewritten": {k: len(v) for k, v in result.days.items()},
        "sessions_matched": result.sessions,
    }
    return dg.Output(summary, metadata={**summary, "days": result.days})


@dg.job(description="Purge captured rows of a scope path or a session (SPEC §7).", tags={"hermes/kind": "purge"})
def purge_job():
    purge_scope()
