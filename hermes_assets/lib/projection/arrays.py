"""Python column lists (or rows) as Arrow arrays of a dataset's field types (extension types included)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc


def arrow_array(values: Sequence[object], typ: pa.DataType) -> pa.Array:
    if isinstance(typ, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(typ, pa.array(values, type=typ.storage_type))
    return pa.array(values, type=typ)


def repeated(values: Sequence[object], counts: Sequence[int], typ: pa.DataType) -> pa.Array:
    """Each of ``values`` ``counts`` times over, in order, as one array of ``typ``: one Arrow
    value per run, expanded by Arrow (a run-end decode), never a Python list per row."""
    kept = [(v, c) for v, c in zip(values, counts, strict=True) if c > 0]
    storage = typ.storage_type if isinstance(typ, pa.ExtensionType) else typ
    if not kept:
        array = pa.array([], storage)
    elif all(v is kept[0][0] for v, _ in kept):  # one value (a table's store, its day): no runs to decode
        array = pa.repeat(pa.scalar(kept[0][0], storage), sum(c for _, c in kept))
    else:
        ends = pa.array(list(itertools.accumulate(c for _, c in kept)), pa.int64())
        array = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, pa.array([v for v, _ in kept], storage)))
    return pa.ExtensionArray.from_storage(typ, array) if isinstance(typ, pa.ExtensionType) else array


def row_columns(rows: list[tuple], fields: Sequence[pa.Field]) -> list[pa.Array]:
    """The columns of ``rows`` (tuples, one value per field, in order) as arrays of the fields'
    types. Arrow converts the rows in one pass (as a struct of the fields' storage types, whose
    children are the columns), without a Python tuple per column: the same arrays as
    :func:`arrow_array` of each column, built with less work. Text past 2 GiB, which Arrow
    splits into chunks, is converted column by column."""
    storage = pa.struct([pa.field(f.name, _storage(f.type)) for f in fields])
    converted = pa.array(rows, storage)
    if isinstance(converted, pa.ChunkedArray):
        return [arrow_array(values, f.type) for values, f in zip(zip(*rows), fields, strict=True)]
    return [
        column if column.type == f.type else pa.ExtensionArray.from_storage(f.type, column)
        for column, f in zip(converted.flatten(), fields, strict=True)
    ]


def _storage(typ: pa.DataType) -> pa.DataType:
    return typ.storage_type if isinstance(typ, pa.BaseExtensionType) else typ
