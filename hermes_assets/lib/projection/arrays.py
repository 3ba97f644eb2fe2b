"""Python column lists as Arrow arrays of a dataset's field types (extension types included)."""

from __future__ import annotations

import pyarrow as pa


def arrow_array(values, typ: pa.DataType) -> pa.Array:
    if isinstance(typ, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(typ, pa.array(values, type=typ.storage_type))
    return pa.array(values, type=typ)
