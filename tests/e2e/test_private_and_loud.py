"""``dagster asset materialize`` as a user runs it: private files, loud mistakes.

Real CLI processes from the repo root, with the umask set in the child
(``subprocess``'s ``umask=``), a temp ``DAGSTER_HOME`` and a copy of the small
fixture store.

- D16: under umask ``022`` and ``000`` every folder is ``0700`` and every file
  ``0600``, in a local warehouse and in a ``file://`` one with its default
  spool; a re-run closes what an older version left ``0755``/``0644``.
- SPEC §1: a mistyped ``HERMES_STATE_DB`` is a bad setting: one line naming the
  path, exit status 2, no run; no Hermes at all succeeds quietly; a reversed
  range says so in one WARNING line.
"""

from __future__ import annotations

import json
import os
import subprocess

import dagster as dg
import pytest

from tests.defs.harness import SMALL_DAYS
from tests.e2e.conftest import REPO, dagster_bin
from tests.support.modes import names, open_up, wrong_modes

pytestmark = pytest.mark.e2e

#: the README's selection: the three assets by name (``*`` makes Dagster's CLI print a beta warning)
SELECT = "hermes_sessions,hermes_messages,ai_gateway_messages_hermes"
RANGE = f"{SMALL_DAYS[0]}...{SMALL_DAYS[2]}"


def materialize(env: dict, *args: str, mask: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [dagster_bin(), "asset", "materialize", "-m", "hermes_assets.definitions", "--select", SELECT, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        umask=-1 if mask is None else mask,
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def our_events(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"')]


# --------------------------------------------------------------------------
# D16
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o000], ids=["umask022", "umask000"])
def test_a_cli_run_writes_private_files_and_a_rerun_closes_old_ones(installation, dagster_env, mask):
    ok(materialize(dagster_env, "--partition-range", RANGE, mask=mask))
    warehouse = installation.warehouse
    assert {".lock", ".read_at", "part-0.parquet", ".staging", "day=" + SMALL_DAYS[0]} <= names(warehouse)
    assert wrong_modes(warehouse) == {}

    open_up(warehouse)  # what a version before D16 left under umask 022
    ok(materialize(dagster_env, "--partition-range", RANGE, mask=mask))
    assert wrong_modes(warehouse) == {}


def test_a_cli_run_into_a_file_uri_warehouse_keeps_it_and_its_spool_private(installation, dagster_env, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    warehouse = tmp_path / "uri-warehouse"
    env = {**dagster_env, "HERMES_ASSETS_WAREHOUSE": warehouse.as_uri(), "TMPDIR": str(temp)}
    ok(materialize(env, "--partition-range", RANGE, mask=0o000))
    spool = temp / f"hermes_assets-spool-{os.getuid()}"
    assert {"part-0.parquet", ".read_at"} <= names(warehouse)
    assert {".lock", ".staging"} <= names(spool)
    assert wrong_modes(warehouse) == {}
    assert wrong_modes(spool) == {}


# --------------------------------------------------------------------------
# mistakes must not look like success
# --------------------------------------------------------------------------


def test_a_mistyped_state_db_is_one_line_naming_the_path_and_no_run(installation, dagster_env, tmp_path):
    typo = tmp_path / "hermes" / "stat.db"
    proc = materialize({**dagster_env, "HERMES_STATE_DB": str(typo)}, "--partition-range", RANGE)
    lines = [
        ln
        for ln in proc.stderr.splitlines()
        if ln.strip() and "SupersessionWarning" not in ln and ln.strip() != "return callback(*args, **kwargs)"
    ]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert lines == [
        f"HERMES_STATE_DB names {typo}, which does not exist: check the path "
        "(unset HERMES_STATE_DB to use the Hermes home's own store)."
    ], proc.stderr
    assert "Traceback" not in proc.stderr and "START_DATE" not in proc.stderr
    instance = dg.DagsterInstance.from_config(str(installation.dagster_home))
    try:
        assert instance.get_runs() == []  # stopped before any run
    finally:
        instance.dispose()
    assert not list(installation.warehouse.rglob("*.parquet"))


def test_no_hermes_installed_succeeds_quietly(installation, dagster_env):
    installation.store.unlink()
    out = ok(materialize(dagster_env, "--partition", SMALL_DAYS[0]))
    events = our_events(out)
    # the console's one line is the run's; why nothing was read is in the run's log (the UI's)
    assert [e["event"] for e in events] == ["hermes.run.done"], events
    assert (events[0]["status"], events[0]["sessions"]) == ("success", 0), events
    instance = dg.DagsterInstance.from_config(str(installation.dagster_home))
    try:
        (run,) = instance.get_runs()
        logged = [x.user_message.split(" ", 1)[0] for x in instance.all_logs(run.run_id) if x.user_message]
    finally:
        instance.dispose()
    assert logged.count("hermes.store.missing") == 1, logged
    assert " - WARNING - " not in out and " - ERROR - " not in out
    assert "Warning:" not in out.replace("SupersessionWarning: Function `asset_materialize_command`", "")


def test_a_reversed_range_says_so_in_one_warning_line(installation, dagster_env):
    out = ok(materialize(dagster_env, "--partition-range", f"{SMALL_DAYS[2]}...{SMALL_DAYS[0]}"))
    said = [line for line in out.splitlines() if "nothing_to_capture" in line]
    assert len(said) == 1, said
    (event,) = [e for e in our_events(out) if e["level"] == "warning"]
    assert event["event"] == "hermes.capture.nothing_to_capture" and event["days"] == 0
    assert "holds no partition" in event["reason"]
    assert not any(installation.warehouse.rglob("*.parquet"))
