"""The examples of "Building on the datasets" (``docs/building.md``), executed as written.

Every ```python block after a ``<!-- example: NAME -->`` marker runs over the
captured small fixture: the downstream asset as a module of its own next to
the project's definitions, the notebook snippet in a fresh interpreter (as a
notebook kernel runs it) with only its date pointed at a fixture day.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.defs.harness import ANALYTICS, DATASETS, SMALL_DAYS, day_path, md_values
from tests.e2e.conftest import REPO
from tests.sensor.harness import project_env

README = REPO / "docs" / "building.md"
_BLOCK = re.compile(r"<!-- example: (\w+) -->\s*```python\n(.*?)```", re.S)
DAY = "2026-06-07"
README_DAY = "2026-07-20"


def examples() -> dict[str, str]:
    return dict(_BLOCK.findall(README.read_text(encoding="utf-8")))


def test_the_readme_has_both_examples_and_the_asset_is_about_ten_lines():
    found = examples()
    assert sorted(found) == ["downstream_asset", "notebook"]
    assert len(found["downstream_asset"].strip().splitlines()) <= 14
    assert README_DAY in found["notebook"]


def _as_a_defs_module(code: str, folder: Path, monkeypatch) -> None:
    """``code`` saved as ``my_report.py`` in a folder the ``hermes_assets.defs`` package searches
    (as a file saved in ``hermes_assets/defs/`` is: the repository's own folder stays untouched)."""
    import hermes_assets.defs

    (folder / "my_report.py").write_text(code, encoding="utf-8")
    monkeypatch.setattr(hermes_assets.defs, "__path__", [*hermes_assets.defs.__path__, str(folder)])
    monkeypatch.delitem(sys.modules, "hermes_assets.defs.my_report", raising=False)


@pytest.mark.slow
def test_the_downstream_asset_example_runs(small, instance, tmp_path, monkeypatch):
    assert small.materialize(SMALL_DAYS[0], SMALL_DAYS[-1], instance=instance).success
    _as_a_defs_module(examples()["downstream_asset"], tmp_path, monkeypatch)
    defs = small.defs()
    asset = defs.resolve_assets_def("hermes_user_turns")
    graph = defs.resolve_asset_graph()
    assert graph.get(asset.key).parent_keys == {dg.AssetKey("ai_gateway_messages_hermes")}
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=instance, partition_key=DAY, asset_selection=[asset.key])
    assert result.success
    (event,) = result.get_asset_materialization_events()
    md = md_values(event.event_specific_data.materialization.metadata)
    rows = pq.read_table(day_path(small.warehouse, "ai_gateway_messages_hermes", DAY), columns=["session_id", "role"])
    users = rows.filter(pc.equal(rows.column("role"), "user"))
    per_session = users.group_by("session_id").aggregate([([], "count_all")]).column("count_all").to_pylist()
    assert md == {"sessions": len(per_session), "max_user_turns": max(per_session)}
    assert md["sessions"] > 0


@pytest.mark.slow
@pytest.mark.e2e
def test_the_notebook_example_runs_in_a_fresh_interpreter(small, instance):
    everything = (*DATASETS, *ANALYTICS)
    assert small.materialize(SMALL_DAYS[0], SMALL_DAYS[-1], instance=instance, select=everything).success
    code = examples()["notebook"].replace(README_DAY, DAY) + (
        "\nimport json\n"
        "print('RESULT=' + json.dumps({'parts': [len(parts), str(parts['attributes'].dtype)],"
        " 'usage': [usage.num_rows, usage.column_names], 'calls': list(calls.columns)}))\n"
    )
    env = project_env(**small.environ())
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT="))
    got = json.loads(line[len("RESULT=") :])
    wh = small.warehouse
    assert got["parts"] == [pq.read_metadata(day_path(wh, "ai_gateway_messages_hermes", DAY)).num_rows, "str"]
    usage = pq.read_table(day_path(wh, "hermes_daily_usage", DAY))
    assert got["usage"] == [usage.num_rows, usage.column_names]
    assert got["calls"] == ["session_id", "part_type", "tool_name"]
