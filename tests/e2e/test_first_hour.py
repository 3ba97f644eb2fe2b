"""A newcomer's first hour, as a person types it.

- ``make run`` on five days of Hermes history: five partitions, all filled by the
  first capture, a quiet console (a line when the UI is up, one per run, no daemon
  tick, no SupersessionWarning), and ``make stop`` stops it even when it was started
  from a script (where Dagster used to ignore SIGTERM).
- A bad setting, in ``make run`` and in every ``dg``/``dagster`` command that loads
  the definitions: one line naming the variable, the value and the accepted form
  (a ``HERMES_STATE_DB`` path that does not exist: the path), exit status 2, no
  traceback.
- The ``dg`` commands the README leads with: ``dg check defs``, ``dg list defs``,
  ``dg launch --partition-range`` (one run); and a partition before the first one
  ends in one line naming ``HERMES_ASSETS_START_DATE``, or, with no Hermes store
  at all, naming the store it looked for (never blaming the start date).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.defs.harness import ANALYTICS, DATASETS, EXPOSURES, SMALL_DAYS, days_on_disk, new_capture
from tests.e2e.conftest import REPO, dagster_bin
from tests.e2e.test_backfill_graphql import _free_port
from tests.support.environ import LEAKY
from tests.support.hermes_writer import HermesWriter

pytestmark = pytest.mark.e2e

VENV = Path(sys.executable).parent.parent
DG = str(Path(sys.executable).with_name("dg"))
ASSETS = ",".join(DATASETS)
#: how long the first capture of five days may take under load (sensor tick + runs)
CAPTURE_TIMEOUT_S = 240

#: each kind of bad setting, and the line a person must see
BAD = {
    "start_date": (
        "HERMES_ASSETS_START_DATE",
        "2026/11/01",
        "HERMES_ASSETS_START_DATE='2026/11/01' is not a date (YYYY-MM-DD)",
    ),
    "workers": ("HERMES_ASSETS_WORKERS", "0", "HERMES_ASSETS_WORKERS='0' is not a positive integer"),
    # partitions run from the start date to today: a start in the future would leave none
    "future_start_date": (
        "HERMES_ASSETS_START_DATE",
        "2999-01-01",
        "HERMES_ASSETS_START_DATE='2999-01-01' is in the future (today is {today}, UTC): "
        "the daily partitions run from it to today, so there would be none; set a day on or before today, or "
        "unset it to start at the earliest Hermes session",
    ),
    "warehouse": ("HERMES_ASSETS_WAREHOUSE", None, "is not a folder this user can write: it cannot be written"),
    # a typo in the store's path: named as such, never as an idle Hermes or a start date
    "state_db": ("HERMES_STATE_DB", None, "which does not exist: check the path"),
}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LEAKY and k != "DAGSTER_PG_URL"}
    env.update({"PYTHONUNBUFFERED": "1", **extra})
    return env


def bad_env(case: str, install, unwritable: Path) -> tuple[dict, str]:
    name, value, line = BAD[case]
    # today as the command will see it (a suite that runs across midnight UTC built BAD the day before)
    line = line.replace("{today}", dt.datetime.now(dt.UTC).date().isoformat())
    if case == "state_db":
        value = str(install.root / "hermes" / "stat.db")
        line = f"{name} names {value}, {line} (unset HERMES_STATE_DB to use the Hermes home's own store)."
    elif value is None:
        value = str(unwritable)
        line = f"{name}={value!r} {line}"
    return clean_env(**{**install.environ(), name: value}), line


def make(target: str, env: dict, port: int | None = None, **kw) -> list[str]:
    """``make <target>`` of this checkout with the test venv (never reinstalled by the test)."""
    args = ["make", "--no-print-directory", "-o", f"{VENV}/.installed", f"VENV={VENV}", target]
    return args + ([f"PORT={port}"] if port else [])


@pytest.fixture
def install(tmp_path):
    cap = new_capture(tmp_path / "install")
    shutil.copyfile(REPO / "dagster.yaml", cap.dagster_home / "dagster.yaml")
    return cap


def run(args: list[str], env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


# --------------------------------------------------------------------------
# a bad setting: one line, everywhere a person types a command
# --------------------------------------------------------------------------

COMMANDS = {
    "make run": lambda: make("run", {}, port=_free_port()),
    "dg check defs": lambda: [DG, "check", "defs"],
    "dg list defs": lambda: [DG, "list", "defs"],
    "dg launch": lambda: [DG, "launch", "--assets", ASSETS, "--partition", "2026-06-01"],
    "dagster asset materialize": lambda: [
        dagster_bin(),
        "asset",
        "materialize",
        "-m",
        "hermes_assets.definitions",
        "--select",
        ASSETS,
        "--partition",
        "2026-06-01",
    ],
    "dagster definitions validate": lambda: [
        dagster_bin(),
        "definitions",
        "validate",
        "-m",
        "hermes_assets.definitions",
    ],
}
MATRIX = [("make run", c) for c in BAD] + [(cmd, c) for cmd in COMMANDS if cmd != "make run" for c in BAD]


@pytest.mark.parametrize("command, case", MATRIX, ids=[f"{c}-{k}" for c, k in MATRIX])
def test_a_bad_setting_is_one_line_naming_it(command, case, install, unwritable_folder):
    env, line = bad_env(case, install, unwritable_folder)
    proc = run(COMMANDS[command](), env)
    lines = [
        ln
        for ln in (proc.stdout + proc.stderr).splitlines()
        if ln.strip()
        and ln != "All component YAML validated successfully."  # dg check's own first line
        and "SupersessionWarning" not in ln
        and ln.strip() != "return callback(*args, **kwargs)"
    ]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1, lines
    assert line in lines[0], lines[0]
    if command == "make run":  # make's own one-line stop: the line, then nothing started
        assert lines[0].endswith(".  Stop.") and not lines[0].endswith("..  Stop."), lines[0]
        assert not (install.dagster_home / ".hermes_assets-dev.pid").exists()
    else:  # the line itself (the unwritable folder's reason, Read-only file system or Permission denied, after it)
        assert lines[0] == line or (case == "warehouse" and lines[0].startswith(line + " (")), lines[0]
    assert "Traceback" not in proc.stderr and "ValidationError" not in proc.stderr


# --------------------------------------------------------------------------
# the dg commands
# --------------------------------------------------------------------------


@pytest.fixture
def small_install(install):
    from tests.defs.harness import copy_small

    copy_small(install.home)
    return install


def small_env(install, **extra) -> dict:
    return clean_env(**install.environ(), HERMES_ASSETS_LOG_FORMAT="json", **extra)


def test_dg_check_defs_and_dg_list_defs(small_install):
    env = small_env(small_install)
    check = run([DG, "check", "defs"], env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "All definitions loaded successfully." in check.stdout
    listed = run([DG, "list", "defs", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assets = {a["asset_key"] for a in doc["assets"]}
    assert assets == {*DATASETS, "hermes_state", *ANALYTICS, EXPOSURES}
    assert {s["name"] for s in doc["sensors"]} == {"hermes_state_sensor", "hermes_automation"}
    for proc in (check, listed):  # our own commands: no warning about being superseded, no beta noise
        assert "SupersessionWarning" not in proc.stderr and "BetaWarning" not in proc.stderr, proc.stderr


def test_dg_launch_a_partition_range_is_one_run(small_install):
    env = small_env(small_install, HERMES_ASSETS_START_DATE="2026-05-01")
    proc = run([DG, "launch", "--assets", ASSETS, "--partition-range", f"{SMALL_DAYS[0]}...{SMALL_DAYS[-1]}"], env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "SupersessionWarning" not in out and "BetaWarning" not in out
    assert " - DEBUG - " not in out, "runs print Dagster's events at INFO (dagster.yaml)"
    # a quiet console: the run's one line (its days and rows), our other events in the run's log
    (done,) = [json.loads(ln) for ln in out.splitlines() if '"hermes.run.done"' in ln]
    assert (done["status"], done["days"], done["sessions"]) == ("success", len(SMALL_DAYS), 59), done
    assert '"hermes.capture.plan"' not in out
    for dataset in DATASETS:
        assert days_on_disk(small_install.warehouse, dataset) == SMALL_DAYS
    instance = dg.DagsterInstance.from_config(str(small_install.dagster_home))
    try:
        (only,) = instance.get_runs()
        assert (only.tags["dagster/asset_partition_range_start"], only.tags["dagster/asset_partition_range_end"]) == (
            SMALL_DAYS[0],
            SMALL_DAYS[-1],
        )
    finally:
        instance.dispose()


@pytest.mark.parametrize("command", ["dg launch", "dagster asset materialize"])
def test_a_partition_before_the_first_names_the_start_date(command, small_install):
    """Unset, the partitions start on the store's first day (2026-06-01): 2026-05-20 is not one."""
    env = small_env(small_install)
    args = COMMANDS[command]()
    args[args.index("2026-06-01")] = "2026-05-20"
    proc = run(args, env)
    lines = [
        ln
        for ln in proc.stderr.splitlines()
        if ln.strip() and "SupersessionWarning" not in ln and ln.strip() != "return callback(*args, **kwargs)"
    ]
    assert proc.returncode == 2  # a one-line mistake, as a bad setting
    assert lines == [
        "partition 2026-05-20 is before the first partition, 2026-06-01 (HERMES_ASSETS_START_DATE is "
        "unset, so they start on the day of the earliest Hermes session): set "
        "HERMES_ASSETS_START_DATE=2026-05-20 or earlier to capture it"
    ], proc.stderr
    assert not small_install.warehouse.exists() or not any(small_install.warehouse.rglob("*.parquet"))


def test_a_partition_before_the_first_with_no_store_names_the_store_not_the_start_date(install):
    """No Hermes at the home (the idle case): the partitions start today for want of a store, and
    the line says so; moving HERMES_ASSETS_START_DATE would capture nothing."""
    env = small_env(install)
    proc = run(COMMANDS["dg launch"](), env)  # 2026-06-01: before today
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert proc.returncode == 2  # a one-line mistake, as a bad setting
    assert lines == [
        f"partition 2026-06-01 is before the first partition, {today}: no Hermes store at {install.store}, "
        "so they start today; nothing to capture before it (HERMES_HOME or HERMES_STATE_DB names where "
        "Hermes keeps its state.db)"
    ], proc.stderr
    assert "HERMES_ASSETS_START_DATE" not in proc.stderr


# --------------------------------------------------------------------------
# make run on five days of history, make stop
# --------------------------------------------------------------------------


def write_five_days(install) -> list[str]:
    """One session a day, the last four days and today (UTC), with the real writer."""
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = []
    writer = HermesWriter(install.store, home=install.home)
    try:
        for back in range(4, -1, -1):
            day = today - dt.timedelta(days=back)
            # early in the day (today: 30 s after midnight), so no session lies in the future
            writer.at(day.timestamp() + (30 if back == 0 else 3600))
            sid = writer.session(f"s{back}", "cli", model="model-a")
            writer.msg(sid, "user", f"hello {back}")
            writer.msg(sid, "assistant", f"hi {back}")
            days.append(day.date().isoformat())
    finally:
        writer.close()
    return days


def group_gone(pgid: int, timeout_s: float) -> bool:
    """Whether no process of group ``pgid`` is left within ``timeout_s`` (servers finish shutting down)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    left = subprocess.run(["ps", "-o", "pid,stat,cmd", "-g", str(pgid)], capture_output=True, text=True).stdout
    print(left)
    return False


PARTITIONS_Q = """
query {
  assetNodes(assetKeys: [{path: ["hermes_sessions"]}, {path: ["hermes_messages"]},
                         {path: ["ai_gateway_messages_hermes"]}]) {
    assetKey { path }
    partitionKeysByDimension { partitionKeys }
    partitionStats { numMaterialized numPartitions numFailed }
  }
}"""


def _graphql(port: int, query: str) -> dict:
    import urllib.request

    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["data"]


def test_make_run_five_days_five_partitions_all_filled_then_make_stop(install, tmp_path):
    days = write_five_days(install)
    port = _free_port()
    env = clean_env(**install.environ(), HERMES_ASSETS_POLL_SECONDS="5")
    env.pop("HERMES_ASSETS_START_DATE", None)
    console = tmp_path / "console.txt"
    # started the way a script starts it: in the background, Ctrl-C (SIGINT) ignored
    with open(console, "wb") as out:
        proc = subprocess.Popen(
            make("run", env, port=port),
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    try:
        deadline = time.monotonic() + CAPTURE_TIMEOUT_S
        stats = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, console.read_text()[-4000:]
            try:
                nodes = _graphql(port, PARTITIONS_Q)["assetNodes"]
            except Exception:  # not up yet
                time.sleep(1)
                continue
            keys = [n["partitionKeysByDimension"][0]["partitionKeys"] for n in nodes]
            stats = [n["partitionStats"] for n in nodes]
            assert all(k == days for k in keys), keys  # five partitions: where the history starts, to today
            if all(s["numMaterialized"] == 5 for s in stats):
                break
            time.sleep(2)
        assert stats and all(s == {"numMaterialized": 5, "numPartitions": 5, "numFailed": 0} for s in stats), stats
        for dataset in DATASETS:
            assert days_on_disk(install.warehouse, dataset) == days
    finally:
        stop = run(make("stop", env), env, timeout=120)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert stop.returncode == 0 and stop.stdout.startswith("stopped dg dev"), stop.stdout + stop.stderr
    assert proc.returncode == 0, "make run ends cleanly when dg dev is stopped"
    assert group_gone(proc.pid, 30), "the whole group is gone: webserver, daemon, code server"
    text = console.read_text()
    assert "SupersessionWarning" not in text and " - DEBUG - " not in text, text[-4000:]
    assert f"the Dagster UI is up on http://127.0.0.1:{port}" in text  # Dagster's services say it at info
    # a quiet console: one line per run (its days, rows, seconds), our events in the run's log
    done = [json.loads(ln) for ln in text.splitlines() if ln.startswith("{") and '"hermes.run.done"' in ln]
    assert done and all(d["status"] == "success" for d in done), done
    assert len({d["run_id"] for d in done}) == len(done)  # each once, no second copy through Dagster's logger
    assert sum(d["days"] for d in done if d.get("sessions")) >= len(days)
    assert "hermes.capture.plan" not in text and "Checking for new runs" not in text
