"""Each day's metadata of a ranged run's materializations, handed to Dagster in one go per asset.

A step that writes many days of an asset in one run gives each day's
materialization its own metadata (its rows, its file, its totals) through
``context.add_asset_metadata``, one call per day. Dagster keeps what a step
added in an immutable accumulator that each call copies whole, checking every
entry again: on the 1M store's 330 days the analytics step's 1,980 calls cost
about 0.8 s of CPU, growing with the square of the days. So the days of an
asset are added here at once, into the same accumulator, with the values each
call would have left there: the same events, with the same metadata, reach
the run's log.

That accumulator is Dagster's private API (the step's ``_metadata_accumulator``
and its records, ``dagster/_core/execution/context/metadata_logging.py``):
where it moved (:func:`accumulator_api`), each day goes through
``add_asset_metadata`` as before.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg


def accumulator_api(step: object) -> tuple | None:
    """Dagster's private pieces this relies on, for the step execution context ``step``, or None
    where they moved."""
    try:
        from dagster._core.execution.context.metadata_logging import AssetMetadataHandle, OutputMetadataAccumulator
    except ImportError:
        return None
    accumulator = getattr(step, "_metadata_accumulator", None)
    if not isinstance(accumulator, OutputMetadataAccumulator) or not isinstance(
        getattr(accumulator, "per_output_metadata", None), Mapping
    ):
        return None
    return AssetMetadataHandle, OutputMetadataAccumulator


def add_days_metadata(
    context: dg.AssetExecutionContext, asset_key: str, days: Sequence[tuple[str, Mapping[str, Any]]]
) -> None:
    """``context.add_asset_metadata(values, asset_key=asset_key, partition_key=day)`` for each
    ``(day, values)`` of ``days`` (days of the run's range), in one copy of the step's metadata."""
    step = context.get_step_execution_context()
    api = accumulator_api(step) if len(days) > 1 else None
    if api is None:
        for day, values in days:
            context.add_asset_metadata(values, asset_key=asset_key, partition_key=day)
        return
    handle_class, accumulator_class = api
    key = dg.AssetKey(asset_key)
    if key not in context.assets_def.keys:  # what add_asset_metadata refuses, refused alike
        raise dg.DagsterInvariantViolationError(
            f"Attempted to add metadata for asset key '{key}' that is not being materialized."
        )
    targeted = set(context.partition_keys)
    held = dict(step._metadata_accumulator.per_output_metadata)
    for day, values in days:
        if day not in targeted:
            raise dg.DagsterInvariantViolationError(
                f"Attempted to add metadata for partition key '{day}' that is not being targeted."
            )
        handle = handle_class(asset_key=key, partition_key=day)
        held[handle] = {**held.get(handle, {}), **values}
    step._metadata_accumulator = accumulator_class(per_output_metadata=held)
