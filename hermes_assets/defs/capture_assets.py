"""The three datasets from one read per day: one graph of four ops (SPEC §1-§9).

::

    plan -> apply_usage_policy -> project_rows -> write_partitions
                                                   |-> hermes_sessions
                                                   |-> hermes_messages
                                                   '-> ai_gateway_messages_hermes

Each op is a thin call into :mod:`hermes_assets.lib.capture.steps` and shows its own
metadata in the UI: the plan (days, stores, sessions, SQL statements), the
policy (sessions kept, local-only, ignored; errors by kind), the projection
(per dataset: rows and errors by ``error_kind``) and the write (per dataset:
rows written, retained, files changed; each partition its own figures).
Ops hand each other small typed values (a plan, paths of staged days), kept
by the run's IO manager, so "re-execute from failure" of the write works.

The capture reads ``hermes_state`` (the Hermes stores, an external asset:
:mod:`hermes_assets.defs.store_checks`): its ``plan`` reports that asset's
checks, once per run; its ``write_partitions`` evaluates each dataset's
``day_valid`` on every day of the run (:mod:`hermes_assets.defs.checks`),
handed to the event log in one batch (:mod:`hermes_assets.defs.check_events`).
"""

import os
from collections.abc import Callable, Iterator

import dagster as dg

from hermes_assets.defs import check_events, checks, precomputed, ranged_metadata, run_progress, store_checks
from hermes_assets.defs.io_manager import DATASETS_IO_MANAGER
from hermes_assets.defs.partitions import Days
from hermes_assets.defs.resources import CaptureRuntime, HermesStores, HermesWarehouse, UsagePolicy
from hermes_assets.defs.store_checks import HERMES_STATE, failed_stores
from hermes_assets.defs.tags import AUTO_RETRY_RUN_ID_TAG, NO_SESSIONS_TAG, WILL_RETRY_TAG
from hermes_assets.lib.basics import errors, logs, schemas
from hermes_assets.lib.basics.logs import get_logger
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.capture import steps
from hermes_assets.lib.capture.staged_run import DatasetDay, ProjectedRun
from hermes_assets.lib.plan import capture_plan
from hermes_assets.lib.plan.capture_plan import CapturePlan
from hermes_assets.lib.warehouse import staging
from hermes_assets.lib.warehouse.datasets import Warehouse, WriteResult

log = get_logger()

DESCRIPTIONS = {
    SESSIONS: "One row per Hermes session (every schema-31 `sessions` column; `system_prompt` resolved from "
    "`system_prompts`), with store, policy class and per-model usage. Partitioned by the UTC day the session "
    "started.",
    MESSAGES: "One row per stored Hermes message, inactive (rewound, compacted) rows included; "
    "`content_text` holds the decoded text, `copy_of` names the first row of the logical message a copy "
    "repeats. Partitioned by the day its session started.",
    GATEWAY: "Hermes activity as canonical `ai_gateway_messages` rows (HypAware schema v7, "
    "client_name='hermes'), one row per message part plus a session-end row.",
}


def column_schema(dataset: str) -> dg.TableSchema:
    """A dataset's columns as Dagster shows them on the asset page."""
    schema = schemas.schema_of(dataset)
    return dg.TableSchema(
        columns=[
            dg.TableColumn(f.name, str(f.type), constraints=dg.TableColumnConstraints(nullable=f.nullable))
            for f in schema
        ]
    )


# --------------------------------------------------------------------------
# the ops
# --------------------------------------------------------------------------


def plan_op(days: Days) -> dg.OpDefinition:
    """The ``plan`` op of the capture over the partitions ``days``: sessions outside them are
    reported by ``hermes_state``'s range check, never written."""

    @dg.op(
        name="plan",
        description="Place every Hermes session on its UTC day (one pass over each store's sessions table) "
        "and keep those of the run's days; report the checks of hermes_state (stores readable, sessions "
        "within the partitions, days captured).",
        ins={HERMES_STATE: dg.In(dg.Nothing)},
        out={"plan": dg.Out(CapturePlan)},
    )
    def plan(context: dg.AssetExecutionContext, hermes: HermesStores, usage_policy: UsagePolicy) -> Iterator[object]:
        result = capture_plan.plan_capture(
            hermes.stores(),
            list(context.partition_keys),
            user_home=usage_policy.user_home,
            first_day=days.partitions.get_first_partition_key(),
            last_day=days.partitions.get_last_partition_key(),
            readers=hermes.readers(),
            expect_none=NO_SESSIONS_TAG.items() <= context.run.tags.items(),
        )
        yield dg.Output(result, "plan", metadata=plan_metadata(result))
        # about the stores and the run, once per run (not planned: see store_checks)
        yield from check_events.in_batches(context, store_checks.run_evaluations(result, context.instance))

    return plan


def plan_metadata(p: CapturePlan) -> dict:
    return {
        "days": len(p.days),
        "stores": len(p.stores),
        "stores_missing": [sp.store.path for sp in p.stores if sp.status == capture_plan.MISSING],
        "stores_failed": failed_stores(p.failures()),
        "sessions_in_range": p.sessions_in_range(),
        "sessions_out_of_range": len(p.out_of_range),
        # why nothing will be written, when a user would expect rows (also one WARNING line)
        "nothing_to_capture": p.nothing_to_capture() or "",
        "sql_statements": dict(sorted(p.statements.items())),
        # D22: a Hermes newer than the contract (warning; the cells are kept in extra_columns)
        "warnings_by_kind": {errors.UNKNOWN_COLUMNS: len(p.unknown_columns)} if p.unknown_columns else {},
        "unknown_columns": [{"path": path, **tables} for path, tables in sorted(p.unknown_columns.items())],
    }


@dg.op(description="Classify the run's sessions by usage policy (SPEC §7) before any row is built.")
def apply_usage_policy(usage_policy: UsagePolicy, plan: CapturePlan) -> dg.Output[CapturePlan]:
    try:
        resolver = usage_policy.resolver()
    except errors.PolicyListUnreadable as exc:
        raise dg.Failure(
            description=str(exc),
            metadata={"errors": 1, "errors_by_kind": {exc.error_kind: 1}, "path": exc.path},
        ) from exc
    classified = capture_plan.apply_usage_policy(plan, resolver)
    counts = classified.policy
    assert counts is not None  # apply_usage_policy counts every plan it classifies
    return dg.Output(
        classified,
        metadata={
            "sessions": counts.sessions,
            "kept": counts.kept,
            "full": counts.full,
            "local_only": counts.local_only,
            "ignored": counts.ignored,
            "errors": counts.errors,
            "errors_by_kind": counts.errors_by_kind,
            "warnings_by_kind": counts.warnings_by_kind,
            "samples": list(counts.samples),
        },
    )


@dg.op(
    description="Read each day of each store once (one short read transaction) and build all three "
    "datasets from that read; stage each day as Arrow IPC (days in parallel). Nothing is in place "
    "until write_partitions."
)
def project_rows(
    context: dg.AssetExecutionContext,
    warehouse: HermesWarehouse,
    usage_policy: UsagePolicy,
    capture_runtime: CaptureRuntime,
    plan: CapturePlan,
) -> dg.Output[ProjectedRun]:
    wh = warehouse.open()
    # this host's label and stores are its own in the warehouse, or nothing is written
    refuse_host_conflicts(lambda: warehouse.settle_host(wh, plan.identities()))
    # a warehouse from before hosts had their own files moves to this host's folders, once;
    # the warehouse says whether this host's ids are scoped by its label (unique across hosts)
    moved = wh.adopt_legacy()
    plan = plan.scoped_by_host() if moved.ids_scoped else plan
    with run_progress.progress(context, "project_rows", len(plan.days)) as progress:
        run = steps.project_rows(
            plan,
            usage_policy.projection_context(plan.read_at),
            wh,
            staging=staging_dir(wh, context.run.run_id, context.instance),
            redaction=usage_policy.redaction((sp.store.path for sp in plan.stores), context.instance.root_directory),
            workers=capture_runtime.workers,
            parallel_min_sessions=capture_runtime.parallel_min_sessions,
            start_method=capture_runtime.start_method,
            log_format=logs.configured_format(),
            progress=progress,
            day_figures=precomputed.day_figures(context),
        )
    metadata: dict = {"days": len(run.days), "host": wh.host, **moved.metadata()}
    for dataset in CAPTURE_DATASETS:
        rows, by_kind, samples = run.totals(dataset)
        metadata[f"{dataset}.rows"] = rows
        metadata[f"{dataset}.errors"] = errors.error_count(by_kind)
        metadata[f"{dataset}.errors_by_kind"] = dict(sorted(by_kind.items()))
        metadata[f"{dataset}.error_samples"] = samples
        # secrets replaced by markers in the cells this dataset's rows were built from, by kind
        metadata[f"{dataset}.secrets_redacted"] = dict(sorted(run.secrets_redacted(dataset).items()))
    if run.files_redacted is not None:  # files written before redaction, redacted in place by this run
        metadata.update(run.files_redacted.metadata())
    metadata["ids_reused"] = run.reborn()  # D15: new generations of ids captured before (a restored store)
    metadata["stores_failed"] = failed_stores(run.failures())
    metadata["sql_statements"] = dict(sorted(run.statements().items()))
    return dg.Output(precomputed.hold(context.run.run_id, run), metadata=metadata)


@dg.op(
    description="Merge each staged day into its partition files and replace them atomically, under "
    "each day's lock; rows whose source vanished are kept, flagged source_deleted. Then evaluate each "
    "dataset's day_valid on every day of the run (keys unique, required columns, dates).",
    out={
        **{dataset: dg.Out(io_manager_key=DATASETS_IO_MANAGER) for dataset in CAPTURE_DATASETS},
        **{checks.check_output(dataset): dg.Out(is_required=False) for dataset in CAPTURE_DATASETS},
    },
)
def write_partitions(
    context: dg.AssetExecutionContext, warehouse: HermesWarehouse, capture_runtime: CaptureRuntime, run: ProjectedRun
) -> Iterator[object]:
    wh = warehouse.open()
    if (
        run.days
        and any(d.staged for staged in run.days for d in staged.datasets.values())
        and not os.path.isdir(run.staging)
    ):
        raise dg.Failure(
            description=f"the staged days of this run ({run.staging}) were removed: a later run "
            "captured these days, or they were left too long. Re-execute all steps, not from failure."
        )
    with run_progress.progress(context, "write_partitions", len(run.days)) as progress:
        written = steps.write_partitions(run, wh, workers=max(2, capture_runtime.workers), progress=progress)
    precomputed.keep(wh, context.run.run_id, run, written)  # for the analytics of this run (precomputed.py)
    # the write succeeded: staging that failed or killed runs left is not needed any more
    staging.sweep(wh.staging_root, lambda run_id: needs_staging(context.instance, run_id), keep=context.run.run_id)
    projected = {staged.day: staged.datasets for staged in run.days}
    for dataset in CAPTURE_DATASETS:
        ranged_metadata.add_days_metadata(
            context,
            dataset,
            [(r.day, day_metadata(r, projected[r.day][dataset])) for r in written.results[dataset]],
        )
        # the run's totals are in its log (hermes.capture.write), not repeated on each of its days
        yield dg.MaterializeResult(asset_key=dataset)
    yield from day_checks(context, wh, written.results, workers=max(2, capture_runtime.workers))
    try:
        written.raise_for_failures()
    except errors.HermesAssetsError as exc:  # one line naming the store(s); the typed error is its cause
        raise dg.Failure(
            description=str(exc),
            metadata={
                "error_kind": exc.error_kind,
                "stores_failed": failed_stores(written.failures),
            },
        ) from exc


def refuse_host_conflicts(settle: Callable[[], None]) -> None:
    """Run ``settle`` (a host's claims on the warehouse); a conflict fails the step with its
    one line (:class:`~hermes_assets.lib.basics.errors.HostConflict`), nothing written."""
    try:
        settle()
    except errors.HostConflict as exc:
        raise dg.Failure(description=str(exc), metadata={"error_kind": exc.error_kind}) from exc


def day_checks(
    context: dg.AssetExecutionContext, warehouse: Warehouse, results: dict[str, list[WriteResult]], *, workers: int
) -> Iterator[object]:
    """``day_valid`` of the files of the run's days, written now or left as they were: one
    evaluation per dataset and day, on that day's partition (:mod:`hermes_assets.defs.checks`),
    after the output of each check that is selected (as Dagster does for a check's result), all
    in one batch of events (:mod:`hermes_assets.defs.check_events`)."""
    selected = context.selected_asset_check_keys
    days = {dataset: {r.day: r.rows for r in per_day} for dataset, per_day in results.items()}
    figures = checks.written_figures(warehouse, days, workers=workers)
    targets = checks.materializations(context.instance, days, context.run.run_id)
    for dataset in CAPTURE_DATASETS:
        if checks.check_key(dataset) in selected:
            yield dg.Output(None, output_name=checks.check_output(dataset))
    yield from check_events.in_batches(context, checks.day_evaluations(figures, targets=targets, selected=selected))


def day_metadata(result: WriteResult, projected: DatasetDay) -> dict[str, dg.MetadataValue]:
    """One partition's own figures: rows written and the errors of its day, as Dagster's metadata
    values (a ranged run builds thousands: Dagster takes them as they are)."""
    md = result.metadata()
    md["dagster/row_count"] = result.rows
    md["errors"] = projected.errors
    md["errors_by_kind"] = dict(sorted(projected.errors_by_kind.items()))
    md["secrets_redacted"] = dict(projected.secrets_redacted)
    values = {name: metadata_value(value) for name, value in md.items()}
    values["path"] = dg.MetadataValue.path(result.path)
    return values


def metadata_value(value: object) -> dg.MetadataValue:
    """A plain value as Dagster's own normalization makes it (a bool, an int, text, JSON)."""
    if isinstance(value, dg.MetadataValue):
        return value
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(value)
    if isinstance(value, str):
        return dg.MetadataValue.text(value)
    return dg.MetadataValue.json(value)  # type: ignore[arg-type]


def staging_dir(warehouse: Warehouse, run_id: str, instance: dg.DagsterInstance) -> str:
    """Where a run stages its days before putting them in place (removed after).

    Staging left by runs that are no longer in progress, with no retry of them
    coming (failed, canceled, killed mid-way), is removed first
    (:func:`hermes_assets.lib.warehouse.staging.sweep`). Staged files are never read as
    data: the datasets' globs only match ``day=*/host=*/part-0.parquet``.
    """
    base = warehouse.staging_root
    warehouse.make_spool_dirs(base)
    staging.sweep(base, lambda other: needs_staging(instance, other), keep=run_id)
    return os.path.join(base, run_id)


def needs_staging(instance: dg.DagsterInstance, run_id: str) -> bool | None:
    """Whether a run may still write its staged days: it runs, or it failed and a run of its group
    (Dagster's retries re-execute from failure: they write the first run's staged days) runs or is
    about to; None for a run this instance does not know."""
    run = instance.get_run_by_id(run_id)
    if run is None:
        return None
    group = instance.get_run_group(run_id)
    runs = list(group[1]) if group else [run]
    return any(
        not r.is_finished
        or (
            r.status == dg.DagsterRunStatus.FAILURE
            and r.tags.get(WILL_RETRY_TAG) == "true"
            and r.tags.get(AUTO_RETRY_RUN_ID_TAG) is None
        )
        for r in runs
    )


# --------------------------------------------------------------------------
# the graph multi-asset
# --------------------------------------------------------------------------

GROUP = "hermes"
KINDS = {"sqlite", "parquet", "python"}
OWNERS = ["team:hermes-assets"]


def capture_asset(days: Days) -> dg.AssetsDefinition:
    """``hermes_capture``: the three datasets on the partitions ``days``, with their checks."""
    plan = plan_op(days)

    @dg.graph_multi_asset(
        name="hermes_capture",
        group_name=GROUP,
        outs={
            dataset: dg.AssetOut(
                description=DESCRIPTIONS[dataset],
                metadata={"dagster/column_schema": column_schema(dataset)},
                kinds=KINDS,
                owners=OWNERS,
            )
            for dataset in CAPTURE_DATASETS
        },
        partitions_def=days.partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        ins={HERMES_STATE: dg.AssetIn(HERMES_STATE, dagster_type=dg.Nothing)},
        check_specs=checks.day_check_specs(days.partitions),
    )
    def hermes_capture(hermes_state):
        planned = plan(hermes_state)
        sessions, messages, gateway, *checked = write_partitions(project_rows(apply_usage_policy(planned)))
        return {
            SESSIONS: sessions,
            MESSAGES: messages,
            GATEWAY: gateway,
            **{checks.check_output(dataset): result for dataset, result in zip(CAPTURE_DATASETS, checked)},
        }

    return hermes_capture
