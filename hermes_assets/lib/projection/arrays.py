"""Python column lists as Arrow arrays of a dataset's field types (extension types included)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa


def arrow_array(values: Sequence[object], typ: pa.DataType) -> pa.Array:
    if isinstance(typ, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(typ, pa.array(values, type=typ.storage_type))
    return pa.array(values, type=typ)
