"""Scale-out by configuration: ``HERMES_ASSETS_EXECUTOR``.

``deploy/README.md`` documents the switch. Here: ``multiprocess`` loads,
validates with the ``dagster`` CLI and really runs a partition with one
process per step; ``k8s`` and ``celery`` need their Dagster integration
installed, and without it the definitions refuse to load with a
ConfigurationError that names the package to install.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re

import dagster as dg
import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.basics.errors import ConfigurationError
from tests.defs.harness import DATASETS, SMALL_DAYS, day_path
from tests.ecosystem.conftest import cli_installation, dagster_cli

#: each executor's module, and the line that names the extra installing its package
INTEGRATIONS = {
    name: (
        f"dagster_{name}",
        f"HERMES_ASSETS_EXECUTOR={name} needs dagster-{name}, which the project's {name} extra installs: "
        f"`.venv/bin/uv sync --frozen --inexact --extra {name}` (or pip install 'hermes_assets[{name}]')",
    )
    for name in ("k8s", "celery")
}


def _cause(exc: BaseException | None, kind: type) -> BaseException | None:
    while exc is not None:
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def test_multiprocess_definitions_load_and_validate(capture, monkeypatch):
    monkeypatch.setenv("HERMES_ASSETS_EXECUTOR", "multiprocess")
    defs = capture.defs()
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_implicit_global_asset_job_def().executor_def.name == "multiprocess"


@pytest.mark.parametrize("name", sorted(INTEGRATIONS))
def test_k8s_and_celery_select_their_executor_or_say_what_to_install(capture, monkeypatch, name):
    """With the integration installed the switch returns its executor; without it (CI
    installs neither) the definitions fail to load with an error naming the package."""
    module, line = INTEGRATIONS[name]
    monkeypatch.setenv("HERMES_ASSETS_EXECUTOR", name)
    if importlib.util.find_spec(module) is not None:
        job = capture.defs().resolve_implicit_global_asset_job_def()
        assert name in job.executor_def.name
        return
    with pytest.raises(Exception) as info:
        capture.defs()
    err = _cause(info.value, ConfigurationError)
    assert err is not None, f"expected a ConfigurationError, got {info.value!r}"
    assert str(err) == line
    assert err.error_kind == "configuration_error"


@pytest.mark.e2e
def test_multiprocess_executor_runs_a_partition_step_by_step(tmp_path):
    """``dagster definitions validate`` accepts it, and a real run uses one process per step."""
    cap, env = cli_installation(
        tmp_path / "install", HERMES_ASSETS_EXECUTOR="multiprocess", HERMES_ASSETS_LOG_LEVEL="debug"
    )  # every event printed, each with its op
    # the README's DEBUG switch: Dagster's step events on the console, to see which process ran each step
    yaml = cap.dagster_home / "dagster.yaml"
    yaml.write_text(yaml.read_text().replace("python_log_level: INFO", "python_log_level: DEBUG"))
    validate = dagster_cli(env, "definitions", "validate", "-m", "hermes_assets.definitions")
    assert validate.returncode == 0, validate.stdout + validate.stderr

    day = SMALL_DAYS[1]
    run = dagster_cli(
        env, "asset", "materialize", "-m", "hermes_assets.definitions", "--select", "*", "--partition", day
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "Executing steps using multiprocess executor" in out
    # each step ran in a child process of its own: several distinct pids announce STEP_START
    step_pids = set(re.findall(r" - (\d+) - [\w.]+ - STEP_START - ", out))
    assert len(step_pids) >= 4, step_pids
    for dataset in DATASETS:
        assert pq.read_metadata(day_path(cap.warehouse, dataset, day)).num_rows > 0
    # our JSON log lines came from the step processes too, each naming its op
    # (step processes write at once: a line two of them interleaved is not one event, skipped)
    ops = set()
    for line in out.splitlines():
        if line.startswith('{"'):
            with contextlib.suppress(ValueError):
                ops.add(json.loads(line).get("op"))
    assert {"hermes_capture.plan", "hermes_capture.project_rows", "hermes_capture.write_partitions"} <= ops
