"""Privacy: policy-ignored data never reaches disk, and purge removes a scope everywhere
(SPEC §7, §9 "Logs ... never message content", spec R3).

The project runs as a user runs it: the ``dagster`` CLI with a real instance in
``DAGSTER_HOME`` (the repo's dagster.yaml), its output kept as log files. A
marker string is planted in every text field of policy-ignored sessions, and
another in a scope that is captured first and purged later. Then every file
the runs produced is searched: the warehouse (Parquet decoded, not only its
compressed bytes), ``DAGSTER_HOME`` (run and event storage, compute logs) and
the logs.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.faults import forking, helpers
from tests.faults.helpers import DAY1, DAY2, GATEWAY, REPO, tree_state, write_scenario
from tests.support.hermes_writer import DAY_S, START_S, openai_call

IGNORED = "IGNORED-9f3c-MARKER"
PURGED = "PURGED-7d1a-MARKER"


def _plant(w, sid: str, marker: str, **session) -> None:
    """A session whose every text field carries ``marker``."""
    w.session(
        sid,
        session.pop("source", "cli"),
        system_prompt=f"You are Hermes. {marker}",
        model=f"model-{marker}",
        user_id=f"user-{marker}",
        chat_id=f"chat-{marker}",
        **session,
    )
    w.set_session_title(sid, f"{marker} title {sid}")
    w.msg(sid, "user", f"my secret is {marker}")
    w.msg(
        sid,
        "assistant",
        f"noted {marker}",
        reasoning=f"thinking about {marker}",
        tool_calls=[openai_call(f"call-{sid}", "terminal", {"cmd": f"echo {marker}"})],
        finish_reason="tool_calls",
    )
    w.msg(sid, "tool", f"{marker}\n", tool_call_id=f"call-{sid}", tool_name="terminal")
    w.msg(sid, "user", [{"type": "text", "text": f"structured {marker}"}])


def _store(install, scopes: Path) -> dict[str, str]:
    secret, client = scopes / "secret-project", scopes / "client-x"
    secret.mkdir(parents=True)
    client.mkdir(parents=True)
    (secret / ".hypignore").write_text("ignore\n")
    with install.writer() as w:
        w.at(START_S)
        _plant(w, "secret-hyp", IGNORED, cwd=str(secret))
        _plant(w, "secret-sub", IGNORED, source="subagent", cwd="/tmp/elsewhere", parent_session_id="secret-hyp")
        _plant(w, "secret-tg", IGNORED, source="telegram")
        _plant(w, "client-1", PURGED, cwd=str(client / "src"))
        _plant(w, "client-sub", PURGED, source="subagent", cwd="/tmp/elsewhere", parent_session_id="client-1")
        w.msg(w.session("normal-1", "cli", cwd="/work/repo"), "user", "an ordinary question")
        # hostile cells in an ignored session: were it ever read, they would be counted and logged
        w.raw_sql(
            "UPDATE messages SET tool_calls = ? WHERE session_id = 'secret-hyp' AND role = 'assistant'",
            (f'[{{"function": "{IGNORED}',),
        )
        w.raw_sql(
            "UPDATE messages SET content = CAST(? AS TEXT) WHERE session_id = 'secret-hyp' AND role = 'tool'",
            (f"{IGNORED} \xff".encode("latin-1"),),
        )
        w.at(START_S + DAY_S)
        _plant(w, "client-2", PURGED, cwd=str(client))
        w.msg(w.session("normal-2", "tui", cwd="/work/repo"), "user", "another ordinary question")
    install.write_policy([(f"{Path.home()}/.hermes/channels/telegram", "ignore")])
    return {"client": str(client)}


def _cli(install, logs: Path, name: str, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "DAGSTER_"))}
    env.update(install.environ(), HERMES_ASSETS_LOG_FORMAT="json", PYTHONUNBUFFERED="1")
    dagster = str(Path(sys.executable).with_name("dagster"))
    with open(logs / f"{name}.log", "wb") as out:
        proc = subprocess.run([dagster, *args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=240)
    text = (logs / f"{name}.log").read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]


def _found(marker: str, roots: list[Path]) -> list[str]:
    """Every file under ``roots`` holding ``marker``: raw bytes (UTF-8 and UTF-16), and for
    Parquet files also every decoded value and the footer metadata."""
    hits = []
    needles = (marker.encode(), marker.encode("utf-16-le"))
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            data = path.read_bytes()
            if any(n in data for n in needles):
                hits.append(f"{path} (bytes)")
                continue
            if path.suffix == ".parquet" or data[:4] == b"PAR1":
                meta = pq.read_metadata(path).metadata or {}
                text = json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False)
                if marker in text or any(marker.encode() in k + v for k, v in meta.items()):
                    hits.append(f"{path} (decoded)")
    return hits


@pytest.mark.e2e
def test_ignored_data_never_reaches_disk_and_purge_removes_a_scope_everywhere(install, tmp_path):
    """Protects R3 and SPEC §7/§9 end to end. Sessions ignored by a .hypignore, by
    inheritance (a subagent of an ignored session) and by the machine-local list (a
    Telegram channel) carry a marker in every text field, hostile cells included. After a
    CLI backfill and a sensor preview, the marker is nowhere: not in the warehouse (Parquet
    decoded), not in DAGSTER_HOME (run/event storage, compute logs), not in the logs.
    A second marker, in a scope captured in full, is in the warehouse (the search works)
    but in no log or Dagster file. Once that scope is listed `ignore` and the purge job
    (CLI) has run, the second marker is nowhere either, in every dataset and day (the
    analytics days it fed are recomputed too); the next backfill succeeds and keeps it out."""
    install.dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", install.dagster_home / "dagster.yaml")
    logs = tmp_path / "logs"
    logs.mkdir()
    scopes = _store(install, tmp_path / "scopes")
    hermes_before = tree_state(install.home)
    everywhere = [install.warehouse, install.dagster_home, logs]
    materialize = [
        "asset",
        "materialize",
        "-m",
        "hermes_assets.definitions",
        "--select",
        "*",
        "--partition-range",
        f"{DAY1}...{DAY2}",
    ]

    _cli(install, logs, "materialize-1", *materialize)
    _cli(install, logs, "sensor-preview", "sensor", "preview", "-m", "hermes_assets.definitions", "hermes_state_sensor")
    assert _found(IGNORED, everywhere) == []
    decoded = _found(PURGED, [install.warehouse])
    # <dataset>/day=<day>/[host=<label>/]part-0.parquet
    where = [Path(h.split(" ")[0]).relative_to(install.warehouse).parts for h in decoded]
    datasets = {parts[0] for parts in where}
    # the three datasets, the daily usage per model (the planted model name is a marker too) and the
    # day's top sessions (their title and model)
    captured = {"ai_gateway_messages_hermes", "hermes_sessions", "hermes_messages"}
    assert datasets == captured | {"hermes_daily_usage", "hermes_top_sessions"}, decoded
    assert {parts[1] for parts in where} == {f"day={DAY1}", f"day={DAY2}"}
    assert _found(PURGED, [install.dagster_home, logs]) == [], "captured content reached logs or Dagster storage"

    install.write_policy([(f"{Path.home()}/.hermes/channels/telegram", "ignore"), (scopes["client"], "ignore")])
    config = tmp_path / "purge.yaml"
    config.write_text(json.dumps({"ops": {"purge_scope": {"config": {"scope": scopes["client"]}}}}))
    _cli(
        install,
        logs,
        "purge",
        "job",
        "execute",
        "-m",
        "hermes_assets.definitions",
        "-j",
        "purge_job",
        "-c",
        str(config),
    )
    assert _found(PURGED, everywhere) == []
    assert _found(IGNORED, everywhere) == []
    # the ordinary sessions were not purged
    assert _found("an ordinary question", [install.warehouse]) != []

    _cli(install, logs, "materialize-2", *materialize)
    assert _found(PURGED, everywhere) == [] and _found(IGNORED, everywhere) == []
    assert _found("another ordinary question", [install.warehouse]) != []
    assert tree_state(install.home).keys() - hermes_before.keys() <= {"state.db-wal", "state.db-shm"}


def _purge(install, **config) -> dict:
    """The purge job, in process, as its config says."""
    job = install.definitions().resolve_job_def("purge_job")
    result = job.execute_in_process(
        instance=helpers.instance(), raise_on_error=False, run_config={"ops": {"purge_scope": {"config": config}}}
    )
    assert result.success, [e.message for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return result.output_for_node("purge_scope")


def test_purge_also_scrubs_what_a_killed_run_left_staged(install, tmp_path):
    """Protects "purge removes a scope's rows everywhere" against a run killed after it
    staged its days (kill -9 between staging and writing leaves `.staging/` files, each the
    whole content of a day, for hours): the purge job removes the scope's rows from those
    staged files as well as from every partition, so the marker is found nowhere under
    the warehouse; the next run succeeds and cleans up nothing it needs."""
    scopes = _store(install, tmp_path / "scopes")
    install.run(DAY1, DAY2).ok()
    with install.writer() as w:  # the scope gets one more message: a run will stage it
        w.msg("client-2", "user", f"one more {PURGED}")

    def killed_run():
        helpers.forget_instance()
        real_flock = fcntl.flock

        def stop_at_first_lock(fd, operation):  # every day is staged by now; nothing written
            if operation == fcntl.LOCK_EX:
                forking.emit("staged")
                forking.park()
            return real_flock(fd, operation)

        fcntl.flock = stop_at_first_lock
        install.run(DAY1, DAY2)

    install.definitions()
    child = forking.fork(killed_run)
    assert child.wait_event("staged", timeout=60)
    child.kill9()
    staging = install.warehouse / ".staging"
    assert _found(PURGED, [staging]), "the killed run left nothing staged (the test proves nothing)"

    install.write_policy([(f"{Path.home()}/.hermes/channels/telegram", "ignore"), (scopes["client"], "ignore")])
    summary = _purge(install, scope=scopes["client"])
    assert sum(summary["rows_removed"].values()) > 0
    assert _found(PURGED, [install.warehouse]) == []
    install.run(DAY1, DAY2).ok()
    assert _found(PURGED, [install.warehouse]) == []
    assert _found("another ordinary question", [install.warehouse]) != []


def test_purge_of_a_channel_scope_given_with_a_tilde(install):
    """Protects the purge job's documented input `~/.hermes/channels/<source>`: the `~` is
    the user's home, as in the scope paths written for channel sessions, so the purge
    removes that channel's rows (it used to match nothing and report success). A relative
    scope is refused with a clear error instead of purging nothing."""
    with install.writer() as w:
        write_scenario(w, 2)
    install.run(DAY1, DAY2).ok()
    telegram = lambda: [r for r in install.state().rows[GATEWAY].values() if r["entrypoint"] == "telegram"]  # noqa: E731
    assert telegram()
    summary = _purge(install, scope="~/.hermes/channels/telegram")
    assert summary["rows_removed"][GATEWAY] > 0
    assert telegram() == []
    job = install.definitions().resolve_job_def("purge_job")
    result = job.execute_in_process(
        instance=helpers.instance(),
        raise_on_error=False,
        run_config={"ops": {"purge_scope": {"config": {"scope": "relative/dir"}}}},
    )
    assert not result.success
    assert any(
        "not an absolute path" in str(e.event_specific_data.error.cause or e.event_specific_data.error)
        for e in result.all_events
        if e.event_type_value == "STEP_FAILURE"
    )
