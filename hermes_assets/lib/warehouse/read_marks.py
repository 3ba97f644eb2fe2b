"""Which read of each store a day's file holds: no lost update (SPEC §6).

Beside each day's file a small ``.read_at`` file says, per store path, when
that store was read for the rows the file holds (JSON, ``{path: epoch s}``;
the data files stay byte-identical). A write whose stores were read before
the file's marks leaves those stores' rows alone: a long backfill that read a
day before Hermes's last write never undoes the sensor run that captured it.
The day's lock only orders the writes; the marks order the reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyarrow as pa

from hermes_assets.lib.plan.capture_plan import StoreFacts

#: the marks file in each day's folder
READ_AT_FILE = ".read_at"


def parse(data: pa.Buffer | None) -> dict[str, float]:
    """The marks of a ``.read_at`` file's bytes (none when there is no file, or it does not parse)."""
    if data is None:
        return {}
    text = data.to_pybytes().decode("utf-8", "replace").strip()
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    if isinstance(value, (int, float)):  # written by an earlier version: one mark for every store
        return {"*": float(value)}
    return {k: float(v) for k, v in value.items() if isinstance(v, (int, float))} if isinstance(value, dict) else {}


def render(marks: dict[str, float]) -> pa.Buffer:
    return pa.py_buffer(json.dumps(marks, sort_keys=True).encode())


def fresh(stores: Iterable[StoreFacts], marks: dict[str, float], read_at: float | None) -> list[StoreFacts]:
    """The stores read no earlier than the file's mark for them (all, when ``read_at`` is None)."""
    return [s for s in stores if read_at is None or marks.get(s.path, marks.get("*", 0.0)) <= read_at]


def marked(marks: dict[str, float], stores: Iterable[StoreFacts], read_at: float) -> dict[str, float]:
    """``marks`` with ``stores`` marked as read at ``read_at``."""
    return {**marks, **{s.path: read_at for s in stores}}
