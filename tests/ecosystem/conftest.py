"""Fixtures of the ecosystem tests: the small store captured once, with its log lines.

``small_capture`` materializes every day of a private copy of the small
fixture store in ONE ranged run of the project's own definitions (loaded the
way ``dagster dev`` loads them, so the log bridge of ``defs/run_log.py`` is
in place), with JSON logs captured. Tests that only read the result (README
queries, log parsing, run-log routing) share it; it is built once per session.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from hermes_assets.lib.basics import logs
from tests.defs.conftest import capture  # noqa: F401  (fixture: an isolated installation per test)
from tests.defs.harness import SMALL_DAYS, Capture, copy_small, new_capture
from tests.e2e.conftest import REPO, dagster_bin
from tests.sensor.harness import project_env

#: variables of a developer's own setup that must not leak into these tests
CLEARED = (
    "HERMES_STATE_DB",
    "HERMES_ASSETS_EXECUTOR",
    "HERMES_ASSETS_BUSY_TIMEOUT_MS",
    "HERMES_ASSETS_WORKERS",
    "DAGSTER_PG_URL",
    "HERMES_ASSETS_LOG_FORMAT",
)


@dataclass
class CapturedRun:
    capture: Capture
    instance: dg.DagsterInstance
    result: object  # ExecuteInProcessResult
    log_text: str

    @property
    def warehouse(self) -> Path:
        return self.capture.warehouse

    def events(self) -> list[dict]:
        """Every JSON log line printed during the run, parsed (a non-JSON line fails the test)."""
        return parse_json_lines(self.log_text)


def parse_json_lines(text: str) -> list[dict]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"log line {n} is not JSON: {line[:200]!r}") from None
    return out


class captured_logs:
    """``with captured_logs("json") as buf:`` routes our structlog lines into ``buf``."""

    def __init__(self, fmt: str = "json"):
        self.fmt = fmt
        self.buf = io.StringIO()

    def __enter__(self) -> io.StringIO:
        logs.configure(self.fmt, stream=self.buf)
        return self.buf

    def __exit__(self, *exc) -> None:
        logs.configure(logs.resolve_format())  # back to the process's stderr


@pytest.fixture(scope="session")
def small_capture(tmp_path_factory) -> CapturedRun:
    cap = new_capture(tmp_path_factory.mktemp("ecosystem-small"))
    copy_small(cap.home)
    with pytest.MonkeyPatch.context() as mp:
        for name in CLEARED:
            mp.delenv(name, raising=False)
        for name, value in cap.environ().items():
            mp.setenv(name, value)
        mp.setenv("HERMES_ASSETS_WORKERS", "1")  # days in this process: every event reaches the run log
        mp.setenv("HERMES_ASSETS_LOG_LEVEL", "debug")  # every event printed (the console prints warnings alone)
        instance = dg.DagsterInstance.ephemeral()
        with captured_logs("json") as buf:
            result = cap.materialize(SMALL_DAYS[0], SMALL_DAYS[-1], instance=instance)
    assert result.success
    return CapturedRun(cap, instance, result, buf.getvalue())


def cli_installation(root: Path, **settings: str) -> tuple[Capture, dict[str, str]]:
    """An installation for ``dagster`` CLI processes: a copy of the small store, the repo's
    ``dagster.yaml``, partitions from 2026-05-01, JSON logs; and the environment to run them in."""
    cap = new_capture(root)
    copy_small(cap.home)
    shutil.copyfile(REPO / "dagster.yaml", cap.dagster_home / "dagster.yaml")
    env = project_env(
        **cap.environ(), HERMES_ASSETS_START_DATE="2026-05-01", HERMES_ASSETS_LOG_FORMAT="json", **settings
    )
    return cap, env


def dagster_cli(env: dict[str, str], *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """``dagster <args>`` from the repo root; output captured as text."""
    return subprocess.run([dagster_bin(), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
