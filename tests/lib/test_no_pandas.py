"""A capture of days without any session never imports pandas in the run's process, nor does a
Dagster run of every asset (the datasets, their analytics, the secrets' exposures) on such a day.

pyarrow imports pandas (when installed) on its first conversion of Python values in a process, a
third of a second of a run that has nothing to capture; a day's empty tables are built from typed
arrays instead (``schemas.empty_table``, ``schemas.table_of_rows``), and the analytics of a day
without rows convert no value. Each capture runs in a fresh interpreter: the suite's own process
has imported pandas long before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.redaction import sighting_files
from tests.conftest import REPO
from tests.defs.harness import ANALYTICS, DATASETS, EXPOSURES

#: a day before any of the small fixture's sessions
EMPTY_DAY = "2024-01-01"


def _in_fresh_interpreter(code: str, tmp_path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _capture(tmp_path: Path, store: Path, then: str = "") -> dict:
    return _in_fresh_interpreter(
        f"""
        import json, sys
        from hermes_assets.lib.warehouse.datasets import Warehouse
        from tests.support.capture_run import capture_days

        run, written = capture_days([{str(store)!r}], Warehouse({str(tmp_path / "warehouse")!r}), days=[{EMPTY_DAY!r}])
        {then}
        print(json.dumps({{"days": [s.day for s in run.days], "failures": len(written.failures),
                           "pandas": "pandas" in sys.modules}}))
        """,
        tmp_path,
    )


@pytest.mark.slow  # a fresh interpreter
def test_a_capture_of_a_day_without_sessions_does_not_import_pandas(tmp_path, fixture_copy):
    found = _capture(tmp_path, fixture_copy("small"))
    assert found["days"] == [EMPTY_DAY] and found["failures"] == 0
    assert found["pandas"] is False


@pytest.mark.slow  # a fresh interpreter
def test_a_dagster_run_of_every_asset_on_a_day_without_sessions_does_not_import_pandas(tmp_path, fixture_copy):
    """The whole run, as ``dagster asset materialize --select '*'`` runs it: the capture computes the
    day's analytics from its empty tables (its ``day_figures``), the analytics and the exposures are
    written from them."""
    store = fixture_copy("small")
    found = _in_fresh_interpreter(
        f"""
        import json, os, shutil, sys
        from pathlib import Path
        from tests.defs.harness import ANALYTICS, DATASETS, EXPOSURES, new_capture

        cap = new_capture(Path({str(tmp_path / "cap")!r}))
        shutil.copyfile({str(store)!r}, cap.store)
        os.environ.update(cap.environ(), HERMES_ASSETS_START_DATE={EMPTY_DAY!r})
        result = cap.materialize({EMPTY_DAY!r}, select=[*DATASETS, *ANALYTICS, EXPOSURES])
        done = sorted({{e.asset_key.path[-1] for e in result.get_asset_materialization_events()}})
        print(json.dumps({{"success": result.success, "materialized": done, "pandas": "pandas" in sys.modules}}))
        """,
        tmp_path,
    )
    assert found["success"] is True
    assert found["materialized"] == sorted({*DATASETS, *ANALYTICS, EXPOSURES})
    assert found["pandas"] is False


@pytest.mark.slow  # a fresh interpreter
def test_the_probe_sees_pandas_imported_by_a_conversion_of_python_values(tmp_path, fixture_copy):
    """The test above can fail: the same capture, then one conversion of a Python list, imports it."""
    assert importlib.util.find_spec("pandas") is not None  # installed: pyarrow would import it
    found = _capture(tmp_path, fixture_copy("small"), then="import pyarrow as pa; pa.array([])")
    assert found["days"] == [EMPTY_DAY]
    assert found["pandas"] is True


@pytest.mark.parametrize(
    "schema",
    [*(s.schema for s in (*schemas.DATASETS.values(), *schemas.ANALYTICS.values(), *schemas.SECRETS.values()))]
    + [sighting_files.SCHEMA],
    ids=lambda s: ",".join(s.names[:2]),
)
def test_the_empty_table_of_a_schema_is_pyarrows(schema):
    made, theirs = schemas.empty_table(schema), schema.empty_table()
    assert made.equals(theirs) and made.schema.equals(theirs.schema, check_metadata=True)
    assert [c.num_chunks for c in made.columns] == [c.num_chunks for c in theirs.columns]
    assert [c.type for c in made.columns] == [c.type for c in theirs.columns]


@pytest.mark.parametrize(
    "schema",
    [*(s.schema for s in (*schemas.ANALYTICS.values(), *schemas.SECRETS.values()))],
    ids=lambda s: ",".join(s.names[:2]),
)
def test_the_table_of_no_rows_is_pyarrows(schema):
    """What the analytics and the exposures build from their rows: with none, the same table as
    ``pa.Table.from_pylist`` (whose conversion imports pandas); with some, its own."""
    made, theirs = schemas.table_of_rows([], schema), pa.Table.from_pylist([], schema=schema)
    assert made.equals(theirs) and made.schema.equals(theirs.schema, check_metadata=True)
    assert [c.num_chunks for c in made.columns] == [c.num_chunks for c in theirs.columns]
    row = {name: None for name in schema.names}
    assert schemas.table_of_rows([row], schema).equals(pa.Table.from_pylist([row], schema=schema))
