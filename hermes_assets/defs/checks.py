"""The check of each day's file: ``day_valid``, one per dataset, evaluated by the write step.

Each captured dataset has one asset check, ``day_valid``, partitioned by day
like its asset. The capture's write step evaluates it on every day of the run,
right after it put the day in place: no step of its own, each written file read
once, as it is on disk (:func:`written_figures`), one evaluation per dataset and
day (:func:`day_evaluations`), naming the materialization of that day it judged.
What is read of a file is what the rules need: its footer (the file must be whole:
one cut short fails the step) and the columns below; the gateway's null counts of
its required columns are those of the footer, the writer's statistics of each row
group (a column the footer does not count, or that the file lacks, is read).
Its metadata carries each rule's figures:

* ``key_unique`` (every dataset): the dataset's key identifies one row
  (``duplicate_rows``; the key's columns read, proven distinct by compute functions where
  they can, :func:`keys_distinct`, else grouped);
* ``required_columns_not_null`` (the gateway dataset): the required columns of
  ``ai_gateway_messages`` (SPEC §5.1) are never null (``null_counts``; from the
  footer, and the columns with nulls read for the rows they name);
* ``date_matches_message_created_at`` (the gateway dataset): every row's
  ``date`` is the UTC day of its ``message_created_at`` (``mismatched_rows``;
  both read).

A day passes when every rule holds; a failing day lists the rules it breaks
(``rules_failed``) and names the rows that break them (``rows``: per rule,
how many, and the first :data:`SAMPLE_ROWS` by their key). A day with no rows
(no file) passes, with ``rows_checked`` 0. So after any run, one day or a
ranged one (a backfill, a sensor's ranged run), each day of the run shows its
check evaluated, as Dagster plans it: one evaluation per dataset and day, the
least a day of the UI shows. The checks about the stores and the run are on the
``hermes_state`` asset (:mod:`hermes_assets.defs.store_checks`).
"""

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse import partition_file
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


def day_figures(dataset: str, table: pa.Table, nulls: Mapping[str, int] | None = None) -> DayFigures:
    """The check's figures of one day's table (the columns :func:`_columns` names). ``nulls``: the
    gateway's null counts of its required columns, known already (from the file's footer,
    :func:`_read_figures`; then ``table`` holds the key, ``date``, ``message_created_at`` and the
    columns that have nulls, for their samples); None: counted here, in ``table``."""
    keys = _keys(dataset)
    figures = DayFigures(rows=table.num_rows)
    if not keys_distinct(table, keys):  # the rows grouped by their key, to count and name the repeated ones
        groups = table.select(keys).group_by(keys, use_threads=False).aggregate([([], "count_all")])
        figures.duplicates = table.num_rows - groups.num_rows
        if figures.duplicates:
            repeated = groups.filter(pc.greater(groups.column("count_all"), 1)).slice(0, SAMPLE_ROWS)
            figures.samples[KEY_UNIQUE] = [
                {**{k: row[k] for k in keys}, "copies": row["count_all"]} for row in repeated.to_pylist()
            ]
    if dataset == GATEWAY:
        if nulls is None:
            nulls = {name: table.column(name).null_count for name in schemas.REQUIRED_GATEWAY_COLUMNS}
        figures.nulls = {name: count for name, count in nulls.items() if count}
        mismatched = mismatched_dates(table.column("date"), table.column("message_created_at"))
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


def keys_distinct(table: pa.Table, keys: list[str]) -> bool:
    """Whether no two rows of ``table`` share their ``keys``, where compute functions prove it
    (False: not proven, the rows are grouped). One key: as many distinct values as rows. Several
    (a dataset whose files are ordered by its key): every row's key after the last's. Acero's
    grouping, the other way, takes its memory from Arrow's own default pool (mimalloc here),
    whatever pool pyarrow is set to, and keeps it after the step (docs/benchmarks.md)."""
    if len(keys) == 1:
        return pc.count_distinct(table.column(keys[0]), mode="all").as_py() == table.num_rows
    return partition_file.is_sorted(table, keys, strict=True)


#: what a ``date`` that is no day in the canonical form (``YYYY-MM-DD``) stands for: no UTC day equals it
_NOT_A_DAY = 1 << 40
#: day 0 of Arrow's date32 (days since the Unix epoch)
_EPOCH = dt.date(1970, 1, 1)


def mismatched_dates(dates: pa.ChunkedArray, times: pa.ChunkedArray) -> pa.ChunkedArray:
    """Per row, whether ``date`` is not the UTC day of ``message_created_at`` written ``YYYY-MM-DD``
    (false where either is NULL): the day of each time by one cast, each distinct ``date`` text
    parsed once (a file holds a few; ``dates`` dictionary-encoded: each chunk's dictionary), rather
    than every time formatted as text."""
    if pa.types.is_dictionary(dates.type):
        chunks = [pc.take(_day_numbers(chunk.dictionary), chunk.indices) for chunk in dates.chunks]
        given = pa.chunked_array(chunks, pa.int64())
    else:
        texts = pc.unique(dates)
        given = pc.take(_day_numbers(texts), pc.index_in(dates, value_set=texts))
    actual = pc.cast(pc.cast(times, pa.date32()), pa.int32()).cast(pa.int64())
    return pc.fill_null(pc.not_equal(actual, given), False)


def _day_numbers(texts: pa.Array) -> pa.Array:
    """Each text's day as Arrow's date32 counts it (days since 1970-01-01), :data:`_NOT_A_DAY` for a
    text that is no day written ``YYYY-MM-DD``, NULL for NULL."""
    days: list[int | None] = []
    for text in texts.to_pylist():
        if text is None:
            days.append(None)
            continue
        try:
            day = dt.date.fromisoformat(text)
        except ValueError:
            days.append(_NOT_A_DAY)
            continue
        # fromisoformat reads other ISO forms too (20260601): only the form strftime writes matches
        days.append((day - _EPOCH).days if day.isoformat() == text else _NOT_A_DAY)
    return pa.array(days, pa.int64())


def _null_rows(table: pa.Table, keys: list[str], columns: list[str]) -> list[dict[str, Any]]:
    """The first rows with a null required column: their key and which columns are null."""
    mask = pc.is_null(table.column(columns[0]))
    for name in columns[1:]:
        mask = pc.or_(mask, pc.is_null(table.column(name)))
    rows = table.filter(mask).slice(0, SAMPLE_ROWS).to_pylist()
    return [{**{k: row[k] for k in keys}, "null_columns": [c for c in columns if row[c] is None]} for row in rows]


def _columns(dataset: str) -> list[str]:
    """The columns of a day's file the rules read (the gateway's other required columns: their
    null counts in the footer, :func:`footer_nulls`)."""
    if dataset == GATEWAY:
        return [*_keys(dataset), "date", "message_created_at"]
    return _keys(dataset)


def footer_nulls(metadata: pq.FileMetaData, columns: Iterable[str]) -> dict[str, int | None]:
    """Each of ``columns``' nulls in a Parquet file, as its footer counts them (the writer's
    statistics of each row group); None for a column the footer does not count (no statistics,
    or no such column: its cells must be read)."""
    paths = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    return {name: _footer_count(metadata, paths.get(name)) for name in columns}


def _footer_count(metadata: pq.FileMetaData, index: int | None) -> int | None:
    if index is None:
        return None
    total = 0
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_null_count:
            return None
        total += stats.null_count
    return total


#: the columns the check reads dictionary-encoded: ``store`` repeats one long path per row, a
#: gateway file's ``date`` holds a few days (each parsed once, :func:`mismatched_dates`)
_DICTIONARY_COLUMNS = {SESSIONS: ["store"], MESSAGES: ["store"], GATEWAY: ["date"]}


def _open(f: pa.NativeFile, dataset: str) -> pq.ParquetFile:
    """``f`` as a Parquet file, :data:`_DICTIONARY_COLUMNS` read dictionary-encoded; a file that
    lacks one of them is opened without (the column reads as NULL, :func:`_conform`)."""
    try:
        return pq.ParquetFile(f, read_dictionary=_DICTIONARY_COLUMNS[dataset])
    except KeyError:  # pyarrow's answer to a dictionary column the file does not have
        return pq.ParquetFile(f)


def _read_figures(warehouse: Warehouse, dataset: str, day: str) -> DayFigures:
    """The figures of this host's file of the day, as it is on disk (no file: empty figures): its
    footer, and only the columns the rules read (:data:`_DICTIONARY_COLUMNS` kept dictionary-encoded).
    The gateway's null counts of its required columns are the footer's
    (the writer's statistics of every row group); a column the footer does not count is read."""
    try:
        with warehouse.storage.open_input(warehouse.path(dataset, day)) as f:
            file = _open(f, dataset)
            columns = _columns(dataset)
            counted = footer_nulls(file.metadata, schemas.REQUIRED_GATEWAY_COLUMNS) if dataset == GATEWAY else {}
            # the columns the footer does not count, and those with nulls (their rows are named): read
            columns += [name for name, count in counted.items() if count != 0 and name not in columns]
            table = _conform(dataset, file, columns)
    except FileNotFoundError:
        return DayFigures()
    if dataset != GATEWAY:
        return day_figures(dataset, table)
    nulls = {name: table.column(name).null_count if count is None else count for name, count in counted.items()}
    return day_figures(dataset, table, nulls)


def _conform(dataset: str, file: pq.ParquetFile, columns: list[str]) -> pa.Table:
    """``columns`` of ``file`` in the dataset's types (dictionary-encoded as read); a column the
    file lacks reads as its default (:data:`schemas.ADDED_COLUMNS`) or NULL, as a partition file's
    rows always read (:func:`~hermes_assets.lib.warehouse.partition_file.read`)."""
    schema = schemas.schema_of(dataset)
    present = set(file.schema_arrow.names)
    read = file.read(columns=[c for c in columns if c in present], use_threads=False)
    arrays, fields = [], []
    for name in columns:
        field = schema.field(name)
        if name in present:
            column = read.column(name)
            if isinstance(column.type, pa.DictionaryType):
                field = field.with_type(pa.dictionary(column.type.index_type, field.type))
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(read.num_rows, field.type))
        fields.append(field)
    return partition_file.fill_added_columns(pa.table(arrays, schema=pa.schema(fields)))


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
