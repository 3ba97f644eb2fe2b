"""One store, one host, once: the real project, run as a person runs it, under hostnames that
change (a container restarted) and labels that collide (two machines cloned from one image).

Each installation is its own ``DAGSTER_HOME`` running ``dagster asset materialize`` on a
store written by the real Hermes writer, into one shared warehouse folder. The hostname
each process sees is set by ``tests/support/hostname`` (``socket.gethostname()``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.analytics import daily
from hermes_assets.lib.hosts.host_identity import IDENTITY_FILE
from tests.ecosystem.test_many_hosts import DAYS, RUN_TIMEOUT_S, Host, changed_writes, write_sessions
from tests.sensor.harness import DAGSTER, REPO
from tests.support.hermes_writer import START_S

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

HOSTNAME_SHIM = REPO / "tests" / "support" / "hostname"


def installation(base: Path, name: str, warehouse: Path, *, hostname: str, label: str | None = None) -> Host:
    """An installation of its own (``DAGSTER_HOME``, store) whose machine is named ``hostname``;
    ``label``: its ``HERMES_ASSETS_HOST`` (None: unset, the hostname decides)."""
    host = Host(name, base, str(warehouse), {})
    host.env.pop("HERMES_ASSETS_HOST")
    if label is not None:
        host.env["HERMES_ASSETS_HOST"] = label
    host.env["PYTHONPATH"] = str(HOSTNAME_SHIM)
    host.env["HERMES_TEST_HOSTNAME"] = hostname
    return host


def run(host: Host) -> subprocess.CompletedProcess:
    proc = host.start()
    proc.wait(RUN_TIMEOUT_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, host.log_text(), "")


def succeeded(host: Host) -> None:
    done = run(host)
    assert done.returncode == 0, f"{host.name}'s run failed:\n{done.stdout[-4000:]}"


def refused(host: Host) -> str:
    """The one line a refused run printed (exit status 2, before anything ran)."""
    done = run(host)
    assert done.returncode == 2, f"{host.name}'s run was not refused:\n{done.stdout[-4000:]}"
    # what is left once the JSON events and Dagster's own warning about the command itself are out
    said = [
        line
        for line in done.stdout.splitlines()
        if line.strip() and not line.startswith(("{", " ")) and "SupersessionWarning" not in line
    ]
    assert len(said) == 1, done.stdout[-4000:]
    return said[0]


def snapshot(warehouse: Path) -> dict[str, bytes]:
    """Every file of the warehouse (data, analytics, read marks, claims), by path."""
    return {str(p.relative_to(warehouse)): p.read_bytes() for p in sorted(warehouse.rglob("*")) if p.is_file()}


def data_files(warehouse: Path) -> dict[str, bytes]:
    return {k: v for k, v in snapshot(warehouse).items() if k.endswith("part-0.parquet")}


def test_a_container_restarted_under_a_new_hostname_keeps_its_label_or_is_refused(tmp_path):
    """A pod's hostname is its name: each restart is a new one. With its ``DAGSTER_HOME`` kept
    (a volume), the host keeps the label of its first capture and a re-run writes nothing;
    with it lost, the same store under the new name is refused in one line, nothing written,
    and the relabel job moves the old label's files to the new one, after which a run
    captures nothing twice and the analytics are the same."""
    warehouse = tmp_path / "warehouse"
    first = installation(tmp_path, "pod", warehouse, hostname="pod-7f9c2")
    write_sessions(first.store, "pod", 0, 6, start_s=START_S)
    succeeded(first)
    before = snapshot(warehouse)
    assert {Path(k).parts[2] for k in data_files(warehouse) if Path(k).parts[0] == "hermes_sessions"} == {
        "host=pod-7f9c2"
    }
    assert json.loads((first.dagster_home / IDENTITY_FILE).read_text())["label"] == "pod-7f9c2"

    # restarted, its DAGSTER_HOME on a volume: a new hostname, the same host
    first.env["HERMES_TEST_HOSTNAME"] = "pod-a1b20"
    succeeded(first)
    assert changed_writes(first) == 0 and data_files(warehouse) == data_files_of(before)
    assert not list(warehouse.glob("*/day=*/host=pod-a1b20"))

    # restarted with its DAGSTER_HOME lost: a new installation reading the same store
    lost = installation(tmp_path, "pod-again", warehouse, hostname="pod-c3d40")
    lost.env["HERMES_STATE_DB"] = str(first.store)
    still = snapshot(warehouse)
    line = refused(lost)
    assert str(first.store) in line and "'pod-7f9c2'" in line and "'pod-c3d40'" in line and "relabel_host" in line
    assert snapshot(warehouse) == still, "a refused run wrote into the warehouse"
    assert not (lost.dagster_home / IDENTITY_FILE).exists()

    # the documented way out: the relabel job, from the CLI, then a run that captures nothing twice
    config = tmp_path / "relabel.yaml"
    config.write_text(json.dumps({"ops": {"relabel": {"config": {"from_label": "pod-7f9c2"}}}}))
    cmd = [str(DAGSTER), "job", "execute", "-m", "hermes_assets.definitions", "-j", "relabel_host", "-c", str(config)]
    done = subprocess.run(cmd, cwd=REPO, env=lost.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not list(warehouse.glob("*/day=*/host=pod-7f9c2/part-0.parquet"))
    relabeled = tables(warehouse)
    succeeded(lost)  # its store is its own now: the same rows (a file may be re-encoded once)
    assert tables(warehouse) == relabeled
    moved = data_files(warehouse)
    sessions = [k for k in moved if k.startswith("hermes_sessions/")]
    assert sessions and all("/host=pod-c3d40/" in k for k in sessions)
    for dataset in (daily.USAGE, daily.TOOLS):  # the analytics: the same figures, byte for byte
        assert {k: v for k, v in moved.items() if k.startswith(dataset)} == {
            k: v for k, v in before.items() if k.startswith(dataset) and k.endswith("part-0.parquet")
        }


def tables(warehouse: Path) -> dict[str, pa.Table]:
    """Every data file's rows, by path."""
    return {
        str(p.relative_to(warehouse)): pq.read_table(p) for p in sorted(warehouse.glob("*/day=*/**/part-0.parquet"))
    }


def data_files_of(files: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in files.items() if k.endswith("part-0.parquet")}


@pytest.mark.parametrize("how", ["set", "hostname"])
def test_a_second_installation_with_the_same_label_is_refused_before_it_writes(tmp_path, how):
    """Two machines cloned from one image (the same hostname), or given the same
    ``HERMES_ASSETS_HOST``: the second, its own ``DAGSTER_HOME`` and its own store, is refused
    in one line naming the label, the first host's first capture and the setting; every file
    of the warehouse stays byte-identical."""
    warehouse = tmp_path / "warehouse"
    label = "gateway-1" if how == "set" else None
    first = installation(tmp_path, "alpha", warehouse, hostname="vm-golden", label=label)
    second = installation(tmp_path, "beta", warehouse, hostname="vm-golden", label=label)
    for host in (first, second):
        write_sessions(host.store, host.name, 0, 4, start_s=START_S)
    succeeded(first)
    before = snapshot(warehouse)
    taken = label or "vm-golden"
    since = json.loads((warehouse / ".hosts" / "labels" / f"{taken}.json").read_text())["since"]
    line = refused(second)
    assert f"'{taken}'" in line and since in line and "HERMES_ASSETS_HOST" in line
    assert snapshot(warehouse) == before
    # with a label of its own, it captures its store beside the first
    second.env["HERMES_ASSETS_HOST"] = "gateway-2"
    succeeded(second)
    assert {k: v for k, v in snapshot(warehouse).items() if f"host={taken}/" in k} == {
        k: v for k, v in before.items() if f"host={taken}/" in k
    }
    assert sorted({Path(k).parts[2] for k in data_files(warehouse) if k.startswith("hermes_sessions/")}) == sorted(
        [f"host={taken}", "host=gateway-2"]
    )
    assert len(DAYS) == 3
