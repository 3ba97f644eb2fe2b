"""The console of ``make run``: a few lines while it captures a history, none while it idles.

``make run`` (a real ``dg dev``, the repo's ``dagster.yaml``) on a store of 20 days that
``tools/gen_state_db.py`` writes with the real Hermes writer, partitions from its first day to
today (days without a session among them), the sensor on a 5 s poll (six times the ticks of
the default): every line it prints is counted from its start until every day is captured and
its analytics computed, then over a minute of idling. The budget is the issue's for the 100-day
store at the default poll (40 lines in the first five minutes, 2 a minute idle): the figures
measured there are in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO
from tests.e2e.test_backfill_graphql import _free_port
from tests.e2e.test_first_hour import _graphql, clean_env, install  # noqa: F401  (the fixture)
from tests.e2e.test_make_run import start_make_run, stop_for_good

pytestmark = pytest.mark.e2e

CAPTURE_TIMEOUT_S = 300
IDLE_S = 60
FIRST_LINES_BUDGET = 40
IDLE_LINES_PER_MINUTE = 2

STATS_Q = """
query {
  assetNodes(assetKeys: [{path: ["hermes_sessions"]}, {path: ["hermes_daily_usage"]}]) {
    partitionStats { numMaterialized numPartitions numMaterializing }
  }
}"""


def _lines(console: Path) -> list[str]:
    return [ln for ln in console.read_text(errors="replace").splitlines() if ln.strip()]


def test_make_run_prints_a_few_lines_while_it_captures_and_none_while_it_idles(install, tmp_path):
    hermes = tmp_path / "hermes"
    gen = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "gen_state_db.py"),
            str(hermes),
            "--sessions",
            "40",
            "--seed",
            "7",
            "--days",
            "20",
            "--start-date",
            "2026-06-01",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert gen.returncode == 0, gen.stderr
    port = _free_port()
    env = clean_env(**install.environ(), HERMES_STATE_DB=str(hermes / "state.db"), HERMES_ASSETS_POLL_SECONDS="5")
    env.pop("HERMES_ASSETS_START_DATE", None)  # the partitions start where the history does, end today
    console = tmp_path / "console.txt"
    proc = start_make_run(env, port, console)
    try:
        deadline = time.monotonic() + CAPTURE_TIMEOUT_S
        while True:
            assert proc.poll() is None, console.read_text()[-4000:]
            assert time.monotonic() < deadline, "not every day captured in time:\n" + console.read_text()[-4000:]
            try:
                stats = [n["partitionStats"] for n in _graphql(port, STATS_Q)["assetNodes"]]
            except Exception:  # not up yet
                stats = []
            if stats and all(s["numMaterialized"] == s["numPartitions"] and not s["numMaterializing"] for s in stats):
                break
            time.sleep(2)
        time.sleep(10)  # the last run's line
        first = _lines(console)
        time.sleep(IDLE_S)
        idle = _lines(console)[len(first) :]
    finally:
        stop = stop_for_good(proc, env)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert len(first) <= FIRST_LINES_BUDGET, "\n".join(first)
    assert len(idle) <= IDLE_LINES_PER_MINUTE * IDLE_S / 60, "\n".join(idle)
    # what they are: the UI's line, the runs' lines (each once), the fixture's two bad cells' warnings
    assert any(f"the Dagster UI is up on http://127.0.0.1:{port}" in ln for ln in first), first
    done = [json.loads(ln) for ln in first if ln.startswith("{") and '"hermes.run.done"' in ln]
    assert done and all(d["status"] == "success" for d in done), first
    assert sum(d["days"] for d in done) >= stats[0]["numPartitions"]  # every day, sessions or not
    assert not [ln for ln in first if "AssetDaemon" in ln or "BackfillDaemon" in ln or ln.strip() == "None"]


def test_dg_launch_on_a_terminal_draws_a_progress_bar_then_the_runs_line(install, tmp_path):
    """``dg launch`` of a range, typed on a terminal (``script`` gives it one): rich's bar of each
    long step, counted in days, then the run's one line; without a terminal, no bar."""
    from tests.defs.harness import SMALL_DAYS, copy_small
    from tests.e2e.test_first_hour import DG, run

    copy_small(install.home)
    env = clean_env(**install.environ(), HERMES_ASSETS_START_DATE="2026-05-01", HERMES_ASSETS_LOG_FORMAT="console")
    launch = [DG, "launch", "--assets", "*", "--partition-range", f"{SMALL_DAYS[0]}...{SMALL_DAYS[-1]}"]
    typed = tmp_path / "typed.txt"
    shown = run(["script", "-qec", shlex.join(launch), str(typed)], env, timeout=600)
    assert shown.returncode == 0, typed.read_text(errors="replace")[-3000:]
    screen = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", typed.read_text(errors="replace"))
    for step in ("project_rows", "write_partitions", "hermes_daily_usage"):
        assert re.search(rf"{step} .*{len(SMALL_DAYS)}/{len(SMALL_DAYS)} days · [\d,]+ rows", screen), screen[-3000:]
    assert "hermes.run.done" in screen and "status=success" in screen
    plain = run(launch, env, timeout=600)  # no terminal: the run's line, no bar
    assert plain.returncode == 0 and "hermes.run.done" in plain.stderr
    assert f"/{len(SMALL_DAYS)} days ·" not in plain.stdout + plain.stderr
