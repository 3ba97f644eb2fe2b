"""Reading the datasets back: any days, some columns, as Arrow or pandas (SPEC §11).

The loading half of the Dagster IO manager (``defs/io_manager.py``), with no
Dagster in it. Days are read one file at a time, with only the asked-for
columns, through :class:`~hermes_assets.lib.warehouse.datasets.Warehouse` (a local
path or a pyarrow filesystem URI alike). A day with no file reads as an empty
table with the dataset's columns, so an empty day and a busy one have the
same schema (and, in pandas, the same dtypes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.warehouse.datasets import Warehouse

if TYPE_CHECKING:  # pandas is imported on the first read as pandas, not by every process loading the definitions
    import pandas as pd


def _pandas_types() -> dict:
    """Arrow types whose pandas default loses information (ints with a null become
    float64, bools object), mapped to pandas' nullable dtypes instead."""
    import pandas as pd

    return {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype(), pa.bool_(): pd.BooleanDtype()}


def select_columns(dataset: str, columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` checked against the dataset's schema (``None``: every column)."""
    if columns is None:
        return None
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise TypeError(f"columns of {dataset} must be a list of column names, not {columns!r}")
    names = schemas.schema_of(dataset).names
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise KeyError(f"{dataset} has no column {', '.join(map(repr, unknown))} (its columns: {', '.join(names)})")
    return list(columns)


@dataclass
class DatasetDays:
    """Some days of one dataset, read lazily: one day's file at a time.

    ``read(day)`` gives one day; iterating gives ``(day, table)`` for every day
    in order (days with no file as empty tables); :meth:`table` and
    :meth:`to_pandas` put them together. Memory is one day's columns at a time
    unless you concatenate.
    """

    warehouse: Warehouse
    dataset: str
    days: list[str]
    columns: list[str] | None = None

    def __post_init__(self) -> None:
        self.columns = select_columns(self.dataset, self.columns)
        self.days = sorted(self.days)

    @property
    def schema(self) -> pa.Schema:
        full = schemas.schema_of(self.dataset)
        return full if self.columns is None else pa.schema([full.field(c) for c in self.columns])

    def read(self, day: str) -> pa.Table:
        """One day's rows, every host's (an empty table with the schema when the day has no file)."""
        table = self.warehouse.read(self.dataset, day, columns=self.columns)
        return self.schema.empty_table() if table is None else table

    def __iter__(self) -> Iterator[tuple[str, pa.Table]]:
        # on an object store a long range (mostly empty days) is one listing, not one open per day
        present = (
            None
            if self.warehouse.storage.cheap_listing or len(self.days) < 2
            else self.warehouse.existing(self.dataset, self.days, own=False)
        )
        for day in self.days:
            yield day, (self.read(day) if present is None or day in present else self.schema.empty_table())

    def __len__(self) -> int:
        return len(self.days)

    def table(self) -> pa.Table:
        """Every day's rows as one Arrow table, in day order, in the dataset's own types."""
        parts = [t for _, t in self if t.num_rows]
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    def to_pandas(self) -> pd.DataFrame:
        return to_pandas(self.table())


def json_as_text(table: pa.Table) -> pa.Table:
    """JSON extension columns as plain ``string`` columns (the same text)."""
    for i, field in enumerate(table.schema):
        if isinstance(field.type, pa.BaseExtensionType):
            column = table.column(i)
            storage = schemas.storage_of(column)
            table = table.set_column(i, field.with_type(field.type.storage_type), storage)
    return table


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """A DataFrame whose dtypes follow the Arrow schema, whatever the rows hold.

    Timestamps stay ``datetime64[ms, UTC]``, strings and JSON columns are
    pandas strings (JSON as its text), integers and bools are pandas' nullable
    ``Int64``/``Int32``/``boolean`` (a null never turns an id into a float).
    """
    return json_as_text(table).to_pandas(types_mapper=_pandas_types().get)
