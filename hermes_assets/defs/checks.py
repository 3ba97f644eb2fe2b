"""The check of each day's file: ``day_valid``, one per dataset, evaluated by the write step.

Each captured dataset has one asset check, ``day_valid``, partitioned by day
like its asset. The capture's write step evaluates it on every day of the run,
right after it put the day in place: no step of its own, each written file read
once (:func:`written_figures`), one evaluation per dataset and day
(:func:`day_evaluations`), naming the materialization of that day it judged.
Its metadata carries each rule's figures:

* ``key_unique`` (every dataset): the dataset's key identifies one row
  (``duplicate_rows``);
* ``required_columns_not_null`` (the gateway dataset): the required columns of
  ``ai_gateway_messages`` (SPEC §5.1) are never null (``null_counts``);
* ``date_matches_message_created_at`` (the gateway dataset): every row's
  ``date`` is the UTC day of its ``message_created_at`` (``mismatched_rows``).

A day passes when every rule holds; a failing day lists the rules it breaks
(``rules_failed``) and names the rows that break them (``rows``: per rule,
how many, and the first :data:`SAMPLE_ROWS` by their key). A day with no rows
(no file) passes, with ``rows_checked`` 0. So after any run, one day or a
ranged one (a backfill, a sensor's ranged run), each day of the run shows its
check evaluated, as Dagster plans it: one evaluation per dataset and day, the
least a day of the UI shows. The checks about the stores and the run are on the
``hermes_state`` asset (:mod:`hermes_assets.defs.store_checks`).
"""

from collections.abc import Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.datasets import Warehouse

DAY_VALID = "day_valid"
KEY_UNIQUE = "key_unique"
REQUIRED_NOT_NULL = "required_columns_not_null"
DATE_MATCHES = "date_matches_message_created_at"
#: the rules each dataset's ``day_valid`` holds its days to
RULES = {
    GATEWAY: (KEY_UNIQUE, REQUIRED_NOT_NULL, DATE_MATCHES),
    SESSIONS: (KEY_UNIQUE,),
    MESSAGES: (KEY_UNIQUE,),
}
#: the rows a failing day names in its metadata, per rule (the count is always whole)
SAMPLE_ROWS = 20


def _keys(dataset: str) -> list[str]:
    return list(schemas.DATASETS[dataset].key)


_RULE_TEXT = {
    KEY_UNIQUE: lambda ds: f"({', '.join(_keys(ds))}) identifies one row (`key_unique`)",
    REQUIRED_NOT_NULL: lambda ds: (
        "the required columns of ai_gateway_messages (SPEC §5.1, marked *) are never null (`required_columns_not_null`)"
    ),
    DATE_MATCHES: lambda ds: (
        "every row's `date` is the UTC day of its `message_created_at` (`date_matches_message_created_at`)"
    ),
}


def day_check_specs(partitions: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    """``day_valid`` of each captured dataset, on its partitions, evaluated by the write step."""
    return [
        dg.AssetCheckSpec(
            DAY_VALID,
            asset=dataset,
            description="Each day's file, as the capture wrote it: "
            + "; ".join(_RULE_TEXT[rule](dataset) for rule in RULES[dataset])
            + ". Evaluated by the capture on every day it runs.",
            partitions_def=partitions,
        )
        for dataset in CAPTURE_DATASETS
    ]


def check_key(dataset: str) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(dg.AssetKey(dataset), DAY_VALID)


#: the checks a capture run evaluates, as a run request names them
CAPTURE_CHECKS = [check_key(dataset) for dataset in CAPTURE_DATASETS]


def check_output(dataset: str) -> str:
    """The output of the capture graph that carries a check's result (Dagster's naming)."""
    return f"{dataset}_{DAY_VALID}"


@dataclass
class DayFigures:
    """What one written partition file shows the check."""

    rows: int = 0
    duplicates: int = 0
    #: required column -> rows where it is null (gateway)
    nulls: dict[str, int] = field(default_factory=dict)
    #: rows whose `date` is not the day of their `message_created_at` (gateway)
    mismatched: int = 0
    #: rule -> the first rows that break it (their key and what is wrong), when some do
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def day_figures(dataset: str, table: pa.Table) -> DayFigures:
    """The check's figures of one day's table (the columns :func:`_columns` names)."""
    keys = _keys(dataset)
    groups = table.select(keys).group_by(keys).aggregate([([], "count_all")])
    figures = DayFigures(rows=table.num_rows, duplicates=table.num_rows - groups.num_rows)
    if figures.duplicates:
        repeated = groups.filter(pc.greater(groups.column("count_all"), 1)).slice(0, SAMPLE_ROWS)
        figures.samples[KEY_UNIQUE] = [
            {**{k: row[k] for k in keys}, "copies": row["count_all"]} for row in repeated.to_pylist()
        ]
    if dataset == GATEWAY:
        figures.nulls = {
            name: table.column(name).null_count
            for name in schemas.REQUIRED_GATEWAY_COLUMNS
            if table.column(name).null_count
        }
        days = pc.strftime(table.column("message_created_at"), format="%Y-%m-%d")
        mismatched = pc.fill_null(pc.not_equal(days, table.column("date")), False)
        figures.mismatched = pc.sum(mismatched).as_py() or 0
        if figures.nulls:
            figures.samples[REQUIRED_NOT_NULL] = _null_rows(table, keys, list(figures.nulls))
        if figures.mismatched:
            bad = table.filter(mismatched).slice(0, SAMPLE_ROWS)
            figures.samples[DATE_MATCHES] = [
                {**{k: row[k] for k in keys}, "date": row["date"], "message_created_at": str(row["message_created_at"])}
                for row in bad.select([*keys, "date", "message_created_at"]).to_pylist()
            ]
    return figures


def _null_rows(table: pa.Table, keys: list[str], columns: list[str]) -> list[dict[str, Any]]:
    """The first rows with a null required column: their key and which columns are null."""
    mask = pc.is_null(table.column(columns[0]))
    for name in columns[1:]:
        mask = pc.or_(mask, pc.is_null(table.column(name)))
    rows = table.filter(mask).slice(0, SAMPLE_ROWS).to_pylist()
    return [{**{k: row[k] for k in keys}, "null_columns": [c for c in columns if row[c] is None]} for row in rows]


def _columns(dataset: str) -> list[str]:
    if dataset == GATEWAY:
        return list(schemas.REQUIRED_GATEWAY_COLUMNS)  # the key, `date` and `message_created_at` among them
    return _keys(dataset)


def _read_figures(warehouse: Warehouse, dataset: str, day: str) -> DayFigures:
    columns = _columns(dataset)
    # `store` repeats one long path per row: keep it dictionary-encoded
    table = warehouse.read_own(dataset, day, columns=columns, read_dictionary=["store"] if "store" in columns else None)
    return DayFigures() if table is None else day_figures(dataset, table)


def written_figures(
    warehouse: Warehouse, days: Mapping[str, Mapping[str, int]], *, workers: int = 2
) -> dict[str, dict[str, DayFigures]]:
    """The check's figures of each day of a run: ``days`` maps each dataset to the run's days and
    the rows each day's file holds after the write (0: no file). Each file with rows is read once,
    only the columns the rules need, on ``workers`` threads; a day without rows has empty figures."""
    figures: dict[str, dict[str, DayFigures]] = {
        dataset: {day: DayFigures() for day in days.get(dataset, {})} for dataset in CAPTURE_DATASETS
    }
    jobs = [(dataset, day) for dataset in CAPTURE_DATASETS for day, rows in days.get(dataset, {}).items() if rows]
    with ThreadPoolExecutor(max(1, min(workers, len(jobs)))) as pool:
        read = list(pool.map(lambda job: _read_figures(warehouse, *job), jobs))
    for (dataset, day), found in zip(jobs, read):
        figures[dataset][day] = found
    return figures


def rule_holds(rule: str, figures: DayFigures) -> bool:
    if rule == KEY_UNIQUE:
        return not figures.duplicates
    if rule == REQUIRED_NOT_NULL:
        return not figures.nulls
    return not figures.mismatched


def day_result(dataset: str, figures: DayFigures) -> tuple[bool, dict[str, Any]]:
    """Whether one day of a dataset passes ``day_valid``, and the metadata its evaluation shows."""
    metadata: dict[str, Any] = {"rows_checked": figures.rows, "duplicate_rows": figures.duplicates}
    if dataset == GATEWAY:
        metadata["null_counts"] = dict(sorted(figures.nulls.items()))
        metadata["mismatched_rows"] = figures.mismatched
    failed = [rule for rule in RULES[dataset] if not rule_holds(rule, figures)]
    metadata["rules_failed"] = failed
    if failed:
        metadata["rows"] = {rule: figures.samples.get(rule, []) for rule in failed}
    return not failed, metadata


def day_evaluations(
    figures: Mapping[str, Mapping[str, DayFigures]],
    *,
    targets: Mapping[str, Mapping[str, AssetCheckEvaluationTargetMaterializationData]] | None = None,
    selected: Collection[dg.AssetCheckKey] | None = None,
) -> list[dg.AssetCheckEvaluation]:
    """One evaluation of ``day_valid`` per dataset (those whose check is in ``selected``, when
    given) and per day of its ``figures``, on that day's partition; ``targets`` names, per dataset
    and day, the materialization each judged."""
    evaluations = []
    for dataset in CAPTURE_DATASETS:
        if selected is not None and check_key(dataset) not in selected:
            continue
        for day, found in sorted(figures.get(dataset, {}).items()):
            passed, metadata = day_result(dataset, found)
            evaluations.append(
                dg.AssetCheckEvaluation(
                    asset_key=dg.AssetKey(dataset),
                    check_name=DAY_VALID,
                    passed=passed,
                    metadata=metadata,
                    severity=dg.AssetCheckSeverity.ERROR,
                    blocking=False,
                    partition=day,
                    target_materialization_data=(targets or {}).get(dataset, {}).get(day),
                )
            )
    return evaluations


#: what an event log that reads a run's materializations from its index columns offers (hermes_assets/event_log)
RUN_MATERIALIZATIONS = "materializations_of_run"


def materializations(
    instance: dg.DagsterInstance, days: Mapping[str, Iterable[str]], run_id: str
) -> dict[str, dict[str, AssetCheckEvaluationTargetMaterializationData]]:
    """The materialization of each dataset's ``days`` that the run ``run_id`` (the one that just
    wrote them) stored, for the evaluations to name what they judged: one query per dataset, of
    the index's columns where the event log offers it (the project's own), else Dagster's records."""
    lookup = getattr(instance.event_log_storage, RUN_MATERIALIZATIONS, None)
    found: dict[str, dict[str, AssetCheckEvaluationTargetMaterializationData]] = {}
    for dataset, wanted in days.items():
        partitions = sorted(set(wanted))
        if not partitions:
            continue
        by_day = found.setdefault(dataset, {})
        if lookup is not None:
            for day, (storage_id, timestamp) in lookup(run_id, dg.AssetKey(dataset), partitions).items():
                by_day[day] = AssetCheckEvaluationTargetMaterializationData(
                    run_id=run_id, storage_id=storage_id, timestamp=timestamp
                )
            continue
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(dataset), asset_partitions=partitions),
            limit=len(partitions),
        ).records  # newest first: this run's, one per day
        for record in records:
            if record.partition_key is not None and record.partition_key not in by_day:
                by_day[record.partition_key] = AssetCheckEvaluationTargetMaterializationData(
                    run_id=record.run_id, storage_id=record.storage_id, timestamp=record.timestamp
                )
    return found
