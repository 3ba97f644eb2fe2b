"""The capture's four library steps, called as the Dagster shell calls them, for unit tests.

No Dagster here: :func:`stage` is ``plan -> apply_usage_policy -> project_rows``,
:func:`capture` adds ``write_partitions``. Stores are real ones (fixture copies
or written by the real Hermes writer); the warehouse is a real folder or URI.
"""

from __future__ import annotations

import os
from pathlib import Path

from hermes_assets.lib.capture import steps
from hermes_assets.lib.capture.staged_run import ProjectedRun
from hermes_assets.lib.capture.steps import WrittenRun
from hermes_assets.lib.plan import capture_plan, policy
from hermes_assets.lib.plan.capture_plan import CapturePlan
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.redaction.redactor import RedactionConfig
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.support.project import TEST_REDACTION

USER_HOME = "/home/tests"


def plan_for(
    stores: list[Store | Path | str],
    days: list[str] | None = None,
    *,
    policy_list: str | None = None,
    now_s: float | None = None,
) -> CapturePlan:
    """The classified plan of ``days`` (default: every day the stores hold a session on)."""
    stores = [s if isinstance(s, Store) else Store(str(s)) for s in stores]
    if days is None:
        found = capture_plan.plan_capture(stores, [], user_home=USER_HOME, now_s=now_s)
        days = sorted({d for sp in found.stores for d in sp.days.values() if d})
    plan = capture_plan.plan_capture(stores, days, user_home=USER_HOME, now_s=now_s)
    return capture_plan.apply_usage_policy(plan, policy.PolicyResolver(policy_list or "/nonexistent/policy.json"))


def stage(
    stores: list[Store | Path | str],
    warehouse: Warehouse,
    run_id: str = "run",
    days: list[str] | None = None,
    *,
    workers: int = 1,
    now_s: float | None = None,
    policy_list: str | None = None,
    redaction: RedactionConfig | None = TEST_REDACTION,
) -> ProjectedRun:
    """Plan, classify and stage ``days`` under the warehouse's staging root, in folder ``run_id``
    (``redaction``: the key and ``.env`` files; default the tests' one key)."""
    plan = plan_for(stores, days, policy_list=policy_list, now_s=now_s)
    ctx = ProjectionContext(user_home=USER_HOME, now_s=plan.read_at, git=NoGit())
    return steps.project_rows(
        plan,
        ctx,
        warehouse,
        staging=os.path.join(warehouse.staging_root, run_id),
        redaction=redaction,
        workers=workers,
        parallel_min_sessions=0,
    )


def capture_days(
    stores: list[Store | Path | str], warehouse: Warehouse, days: list[str] | None = None, **kwargs
) -> tuple[ProjectedRun, WrittenRun]:
    run = stage(stores, warehouse, days=days, **kwargs)
    return run, steps.write_partitions(run, warehouse)


def files(root: Path) -> dict[str, bytes]:
    """Every partition file under a local warehouse root (each host's, and the derived datasets'), by relative path."""
    found = [*root.glob("*/day=*/part-0.parquet"), *root.glob("*/day=*/host=*/part-0.parquet")]
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(found)}
