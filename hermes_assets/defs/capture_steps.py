"""The capture steps as the Dagster shell runs them: resources in, metadata out.

Shared by the raw multi-asset and the ops of the gateway graph asset so both
report the same counts in the same words.
"""

from __future__ import annotations

import os
import shutil
import time

import dagster as dg

from hermes_assets.defs.partitions import daily_partitions
from hermes_assets.defs.resources import HermesStores, UsagePolicy
from hermes_assets.lib import capture, schemas
from hermes_assets.lib.capture import CapturePlan
from hermes_assets.lib.logs import get_logger
from hermes_assets.lib.warehouse import Warehouse, WriteResult

log = get_logger()


STALE_STAGING_S = 6 * 3600


def staging_dir(warehouse: Warehouse, run_id: str, name: str) -> str:
    """Where a run stages its days before putting them in place (removed after).

    A run killed mid-way (kill -9, power loss) leaves its staging folder: any
    older than ``STALE_STAGING_S`` is removed here. Staged files are never read
    as data: the datasets' globs only match ``day=*/part-0.parquet``.
    """
    base = warehouse.staging_root
    if os.path.isdir(base):
        cutoff = time.time() - STALE_STAGING_S
        for entry in os.scandir(base):
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)
    return os.path.join(base, f"{run_id}.{name}")


def partition_days(context) -> list[str]:
    """The run's days, range-safe (a single-run backfill has many)."""
    return list(context.partition_keys)


def plan(context, hermes: HermesStores, usage_policy: UsagePolicy) -> CapturePlan:
    return plan_for_days(partition_days(context), hermes, usage_policy.user_home)


def plan_for_days(days: list[str], hermes: HermesStores, user_home: str) -> CapturePlan:
    result = capture.plan_capture(
        hermes.stores(),
        days,
        user_home=user_home,
        first_day=daily_partitions.get_first_partition_key(),
        last_day=daily_partitions.get_last_partition_key(),
        busy_timeout_ms=hermes.busy_timeout_ms,
    )
    log.info("hermes.op.read_sessions", days=len(days), stores=len(result.stores),
             sessions=result.sessions_in_range(), out_of_range=len(result.out_of_range))
    return result


def plan_metadata(p: CapturePlan) -> dict:
    return {
        "days": len(p.days),
        "stores": len(p.stores),
        "stores_missing": [sp.store.path for sp in p.stores if sp.missing],
        "sessions_in_range": p.sessions_in_range(),
        "sessions_out_of_range": len(p.out_of_range),
    }


def apply_policy(p: CapturePlan, usage_policy: UsagePolicy) -> dict:
    counts = capture.apply_policy(p, usage_policy.resolver())
    log.info("hermes.op.apply_usage_policy", **counts)
    return counts


def projection_metadata(days: list[dict], dataset: str) -> dict:
    """Rows projected and row errors by ``error_kind`` (ids only in samples)."""
    rows = errors = 0
    by_kind: dict[str, int] = {}
    samples: list[dict] = []
    for d in days:
        rows += d["rows"][dataset]
        tally = d["tally"]
        errors += tally.errors
        for kind, n in tally.counts.items():
            by_kind[kind] = by_kind.get(kind, 0) + n
        samples.extend(tally.sample_dicts()[: max(0, 10 - len(samples))])
    log.info("hermes.op.project_rows", dataset=dataset, days=len(days), rows=rows, errors=errors)
    return {"rows_projected": rows, "errors": errors, "errors_by_kind": by_kind, "error_samples": samples}


def day_metadata(result: WriteResult) -> dict:
    md = result.metadata()
    md["dagster/row_count"] = result.rows
    md["path"] = dg.MetadataValue.path(result.path)
    return md


def totals(results: list[WriteResult], event: str | None = None) -> dict:
    """Whole-run figures (the per-day ones go on each partition), logged as ``event``."""
    figures = {
        "run_rows_written": sum(r.rows for r in results),
        "run_rows_retained_source_deleted": sum(r.retained for r in results),
        "run_rows_dropped": sum(r.dropped for r in results),
        "run_bytes": sum(r.bytes for r in results),
        "run_files_changed": sum(r.changed for r in results),
    }
    if event:
        log.info(event, days=len(results), rows=figures["run_rows_written"],
                 retained=figures["run_rows_retained_source_deleted"], files_changed=figures["run_files_changed"])
    return figures


def column_schema(dataset: str) -> dg.TableSchema:
    schema = schemas.DATASETS[dataset][0]
    return dg.TableSchema(
        columns=[
            dg.TableColumn(f.name, str(f.type), constraints=dg.TableColumnConstraints(nullable=f.nullable))
            for f in schema
        ]
    )
