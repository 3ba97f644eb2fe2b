"""A step's check evaluations handed to the event log in batches, where the event log takes them.

Dagster stores each check evaluation a step yields on its own: one event per
check and per day of a ranged run, each with its own connections to the
event log (three on SQLite). Dagster hands its event log batches of the
events it marks as one batch (an output's materializations), and the
project's event logs (``hermes_assets/event_log``, named by ``dagster.yaml``
and ``deploy/postgres/dagster.yaml``) write a batch of check evaluations in
one transaction. So the capture marks its evaluations of the days as one
batch, the way Dagster marks an output's materializations, when the
instance's event log says it takes them (``batches_check_evaluations``);
on any other event log (Dagster's own, whose Postgres storage refuses such a
batch) they are yielded one by one, as Dagster's own checks are. Either way
the same events reach the run's log, in the same order, and the run's result
in process holds them.

Marking events as a batch uses Dagster's private event API (the one it uses
for materializations); where it moved (:func:`batching_api`), the
evaluations are yielded one by one.
"""

from collections.abc import Iterator, Sequence

import dagster as dg

#: what an event log that writes batches of check evaluations says it does (hermes_assets/event_log)
TAKES_BATCHES = "batches_check_evaluations"


def batching_api() -> tuple | None:
    """Dagster's private pieces that mark events as one batch, or None where they moved."""
    try:
        from dagster._core.events import (
            DagsterEvent,
            DagsterEventBatchMetadata,
            DagsterEventType,
            generate_event_batch_id,
        )
    except ImportError:
        return None
    if not hasattr(DagsterEvent, "from_step"):
        return None
    return DagsterEvent, DagsterEventBatchMetadata, DagsterEventType, generate_event_batch_id


def takes_batches(instance: dg.DagsterInstance) -> bool:
    return bool(getattr(instance.event_log_storage, TAKES_BATCHES, False))


def in_batches(
    context: dg.OpExecutionContext | dg.AssetExecutionContext, evaluations: Sequence[dg.AssetCheckEvaluation]
) -> Iterator[object]:
    """What a step yields to report ``evaluations``: one batch of events (logged as Dagster logs
    an output's materializations) where the event log takes it, else the evaluations themselves."""
    api = batching_api() if len(evaluations) > 1 and takes_batches(context.instance) else None
    if api is None:
        yield from evaluations
        return
    event_class, batch_metadata, event_type, new_batch_id = api
    step = context.get_step_execution_context()
    batch = new_batch_id()
    last = len(evaluations) - 1
    for i, evaluation in enumerate(evaluations):
        # logged now, into Dagster's buffer of the batch, stored at its last event
        yield event_class.from_step(
            event_type.ASSET_CHECK_EVALUATION,
            step,
            evaluation,
            _message(evaluation),
            batch_metadata(batch, i == last),
        )


def _message(evaluation: dg.AssetCheckEvaluation) -> str:
    """The line Dagster's own event of a check evaluation carries."""
    verdict = "passed." if evaluation.passed else "did not pass."
    described = "" if evaluation.description is None else f" Description: '{evaluation.description}'"
    return f"Asset check '{evaluation.check_name}' on '{evaluation.asset_key.to_user_string()}' {verdict}{described}"
