"""Run the core library end to end on one store: plan it, project every day of all three datasets.

This is the capture pipeline's own projection (:func:`hermes_assets.lib.capture.day_rows.project_day`,
what the ``project_rows`` op runs per day) minus policy resolution (every session
is ``full`` unless a test says otherwise) and minus partition files. Tests assert
on the returned tables or on :func:`rows`, a decoded view of them.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from hermes_assets.lib.basics import errors, ids, schemas
from hermes_assets.lib.basics.errors import CellError, ErrorTally
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.capture import day_rows
from hermes_assets.lib.plan import capture_plan
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.redaction.redactor import RedactionConfig
from hermes_assets.lib.source.state_db import ReaderFactory, StoreReader
from hermes_assets.lib.source.stores import Store

#: the fixed "now" of every deterministic projection in the tests (2026-09-21)
NOW_S = 1790000000.0
USER_HOME = "/home/hermes-user"
#: the store path HypAware's parity rows were made with (what source_path_hash hashes)
CANONICAL_STORE_PATH = "/home/hermes-user/.hermes/state.db"

#: every JSON column of the three datasets (``usage_by_model``, ``content_json``, ``display_metadata`` ...)
JSON_COLUMNS = frozenset(
    f.name
    for dataset in (schemas.AI_GATEWAY_MESSAGES, schemas.HERMES_SESSIONS, schemas.HERMES_MESSAGES)
    for f in dataset
    if f.type == schemas.JSON
)


@dataclass(frozen=True)
class CopyReaders(ReaderFactory):
    """Opens each store from a copy elsewhere (``copies``: store path -> the copy's path):
    the rows name the store's path, not the copy's."""

    copies: tuple[tuple[str, str], ...] = ()

    def open(self, store: Store, now_s: float | None = None) -> StoreReader:
        file = dict(self.copies).get(store.path)
        return StoreReader(store, busy_timeout_ms=self.busy_timeout_ms, now_s=now_s, file=file)


def _test_key() -> str:
    """A fixed key (the goldens' markers do not change between runs), in a private file of this process."""
    folder = tempfile.mkdtemp(prefix="hermes-assets-tests-key-")
    atexit.register(shutil.rmtree, folder, True)  # one per process; removed when it exits
    path = os.path.join(folder, "redaction.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(hashlib.sha256(b"hermes_assets tests: the redaction key").digest())
    return path


#: every projection of the tests redacts, as a capture does by default (a fixed key, no .env
#: files): a store without secrets must come out exactly as it did without redaction
TEST_REDACTION = RedactionConfig(_test_key())


def default_ctx(git=None, now_s: float = NOW_S) -> ProjectionContext:
    return ProjectionContext(user_home=USER_HOME, now_s=now_s, git=git if git is not None else NoGit())


@dataclass
class Projection:
    """The three datasets of one store, the bad cells seen building them, and the days."""

    gateway: pa.Table
    sessions: pa.Table
    messages: pa.Table
    #: dataset -> its own count of bad cells (a cell reaching two datasets counts in both)
    tallies: dict[str, ErrorTally]
    #: every bad cell once (``(error_kind, session id, mid, column)``)
    cells: list[tuple]
    days: dict = field(default_factory=dict)

    @property
    def tally(self) -> ErrorTally:
        """Every bad cell once, whichever datasets it reached."""
        merged = ErrorTally(max_samples=10_000)
        for kind, sid, mid, column in self.cells:
            merged.counts[kind] += 1
            merged.samples.append(CellError(kind, sid, mid, column))
        return merged

    def rows(self, session_id: str | None = None) -> list[dict]:
        """Decoded gateway rows (of one ``session_id`` when given), in canonical order."""
        return rows(self.gateway, session_id)

    def session_rows(self, sid: str, label: str = "") -> list[dict]:
        return self.rows(ids.session_id(label, sid))


def project_store(
    path: Path | str,
    *,
    store: Store | None = None,
    as_store: Store | None = None,
    ctx: ProjectionContext | None = None,
    policy_classes: dict | None = None,
    now_s: float = NOW_S,
    redaction: RedactionConfig | None = TEST_REDACTION,
) -> Projection:
    """Plan ``path`` (or ``store``) over every day it has and project each day with
    :func:`day_rows.project_day`, as a capture run does.

    ``as_store`` names the store another path (``CANONICAL_STORE_PATH``) while its
    file is read here: the rows name that path. Sessions with no sane time at all
    (day ``None``) are out of range: the plan reports them, as in a run.
    """
    store = store or Store(str(path))
    readers = ReaderFactory()
    if as_store is not None:
        readers = CopyReaders(copies=((as_store.path, store.path),))
        store = as_store
    ctx = dataclasses.replace(ctx or default_ctx(now_s=now_s), now_s=now_s)
    plan = capture_plan.plan_capture([store], [], user_home=ctx.user_home, now_s=now_s, readers=readers)
    days = sorted({d for d in plan.stores[0].days.values() if d is not None})
    plan = capture_plan.plan_capture([store], days, user_home=ctx.user_home, now_s=now_s, readers=readers)
    if plan.failures():
        raise errors.by_kind(plan.failures()[0].error_kind)(plan.failures()[0].message)
    if policy_classes:
        plan.stores[0].classes = dict(policy_classes)
    tables = {ds: [] for ds in (GATEWAY, SESSIONS, MESSAGES)}
    tallies = {ds: ErrorTally(max_samples=10_000) for ds in tables}
    cells = [
        (errors.OUT_OF_RANGE_SESSION, store.scoped(sid), None, "started_at")
        for _, sid, day in plan.out_of_range
        if day is None
    ]
    for day in days:
        rows = day_rows.project_day(plan, day, ctx, redaction=redaction)
        for ds in tables:
            tables[ds].append(rows.table(ds))
            tallies[ds].merge(rows.tallies[ds])
        cells += sorted(rows.cells, key=repr)
    by_day: dict = {}
    for sid, day in sorted(plan.stores[0].days.items()):
        by_day.setdefault(day, []).append(sid)
    return Projection(
        *(
            _sorted(pa.concat_tables(tables[ds]) if tables[ds] else schemas.DATASETS[ds].schema.empty_table(), ds)
            for ds in (GATEWAY, SESSIONS, MESSAGES)
        ),
        tallies,
        cells,
        by_day,
    )


def _sorted(table: pa.Table, dataset: str) -> pa.Table:
    keys = schemas.DATASETS[dataset].sort_keys
    return table.sort_by([(k, "ascending") for k in keys]) if table.num_rows else table


# --------------------------------------------------------------------------
# decoded rows
# --------------------------------------------------------------------------


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def ms(value: dt.datetime | None) -> int | None:
    """A ``timestamp[ms, UTC]`` value as epoch milliseconds."""
    if value is None:
        return None
    return (value - _EPOCH) // dt.timedelta(milliseconds=1)


def iso(value: dt.datetime | None) -> str | None:
    """``2026-06-01T17:28:18.954Z`` (HypAware's rendering)."""
    if value is None:
        return None
    value = value.astimezone(dt.UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def rows(table: pa.Table, session_id: str | None = None) -> list[dict]:
    """Rows as dicts: JSON columns parsed, timestamps as epoch ms."""
    out = []
    for row in table.to_pylist():
        if session_id is not None and row.get("session_id") != session_id:
            continue
        for name, value in row.items():
            if name in JSON_COLUMNS and isinstance(value, str):
                row[name] = json.loads(value)
            elif isinstance(value, dt.datetime):
                row[name] = ms(value)
        out.append(row)
    return out


def column_text(table: pa.Table, name: str) -> list:
    """The stored text of a column (JSON columns: the JSON text itself)."""
    col = table.column(name)
    if isinstance(col.type, pa.ExtensionType):
        col = pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type)
    return col.to_pylist()
