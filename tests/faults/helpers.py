"""The fault suite's tools: an installation, run outcomes, and the four checks.

Every fault case makes the same four checks:

(a) the run fails with a clear, typed error (``error_kind`` of SPEC §9), or the
    sensor skips cleanly: :func:`assert_failed_with`;
(b) no partition file changed or torn: :func:`assert_untouched`,
    :func:`assert_sound`;
(c) nothing previously captured is lost: :func:`assert_nothing_lost`;
(d) the next run after the fault heals succeeds: :meth:`Install.run` + ``.ok()``.

Runs are real Dagster runs of the project's definitions (the implicit asset
job, every asset and check, in process), against stores written by the real
Hermes writer. Nothing here is a double of the code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import structlog

from hermes_assets.lib.basics import errors, schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.host_layout import PART_FILE
from hermes_assets.lib.warehouse.read_marks import READ_AT_FILE
from tests.defs.harness import RANGE_END, RANGE_START, Capture, new_capture, step_output_metadata
from tests.sensor.harness import SensorDriver
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter, openai_call
from tests.support.hosts import HOST_FILES

DATASETS = (GATEWAY, SESSIONS, MESSAGES)
DAY1, DAY2, DAY3, DAY4 = "2026-06-01", "2026-06-02", "2026-06-03", "2026-06-04"

_instance: dg.DagsterInstance | None = None


def instance() -> dg.DagsterInstance:
    """One ephemeral Dagster instance for the suite (building one costs ~1 s of migrations)."""
    global _instance
    if _instance is None:
        _instance = dg.DagsterInstance.ephemeral()
    return _instance


def forget_instance() -> None:
    """In a forked child: build an instance of its own rather than use the parent's copy."""
    global _instance
    _instance = None


# --------------------------------------------------------------------------
# run outcomes
# --------------------------------------------------------------------------

_KINDS = {
    cls.__name__: cls.error_kind
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.HermesAssetsError)
}


@dataclass
class Failure:
    """One failed step: the error our code raised (under Dagster's wrapper)."""

    step: str
    cls_name: str
    message: str

    @property
    def error_kind(self) -> str | None:
        return _KINDS.get(self.cls_name)


@dataclass
class Outcome:
    result: object
    seconds: float

    @property
    def success(self) -> bool:
        return self.result.success

    @property
    def failures(self) -> list[Failure]:
        out = []
        for event in self.result.all_events:
            if event.event_type_value != "STEP_FAILURE":
                continue
            err = event.event_specific_data.error
            # Dagster wraps user errors (DagsterExecutionStepExecutionError): the cause is ours
            while err.cause is not None and (err.cls_name.startswith("Dagster") or err.cls_name == "Failure"):
                err = err.cause
            out.append(Failure(event.step_key, err.cls_name, err.message))
        return out

    def ok(self) -> Outcome:
        assert self.success, "run failed: " + "; ".join(f"{f.step}: {f.message[:400]}" for f in self.failures)
        return self

    def metadata(self, step: str) -> dict:
        """Merged output metadata of one step (e.g. ``hermes_capture.project_rows``)."""
        merged: dict = {}
        for md in step_output_metadata(self.result, step):
            merged.update(md)
        return merged

    def materializations(self) -> dict[tuple[str, str], dict]:
        out = {}
        for event in self.result.get_asset_materialization_events():
            mat = event.event_specific_data.materialization
            out[(mat.asset_key.to_user_string(), mat.partition)] = {
                k: getattr(v, "value", v) for k, v in mat.metadata.items()
            }
        return out


def assert_failed_with(outcome: Outcome, error_kind: str, *, path: str | None = None) -> list[Failure]:
    """(a) The run failed, every failed step with the typed error ``error_kind`` naming ``path``."""
    assert not outcome.success, "the run succeeded despite the fault"
    failures = outcome.failures
    assert failures, "the run failed without a step failure"
    for f in failures:
        assert f.error_kind == error_kind, (
            f"{f.step}: {f.cls_name} ({f.error_kind}) instead of {error_kind}: {f.message}"
        )
        if path is not None:
            assert path in f.message, f"{f.step}: the error does not name {path}: {f.message}"
    return failures


# --------------------------------------------------------------------------
# the warehouse: files and rows
# --------------------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class WarehouseState:
    """Every partition file (relative path -> sha256) and every row, by key."""

    files: dict[str, str]
    rows: dict[str, dict[object, dict]] = field(default_factory=dict)

    def keys(self, dataset: str) -> set:
        return set(self.rows.get(dataset, {}))


def row_key(dataset: str, row: dict):
    """A row's key (SPEC §6): part_id; (store, session_id, id, generation); (store, id, generation)."""
    if dataset == GATEWAY:
        return row["part_id"]
    if dataset == MESSAGES:
        return row["store"], row["session_id"], row["id"], row["generation"]
    return row["store"], row["id"], row["generation"]


def warehouse_state(root: Path) -> WarehouseState:
    root = Path(root)
    found = [*root.glob(f"*/day=*/{PART_FILE}"), *root.glob(f"*/{HOST_FILES}")]
    files = {str(p.relative_to(root)): sha256(p) for p in sorted(found)}
    rows: dict[str, dict] = {}
    for dataset in DATASETS:
        rows[dataset] = {}
        for path in sorted((root / dataset).glob(HOST_FILES)):
            for row in pq.read_table(path, schema=schemas.DATASETS[dataset].schema).to_pylist():
                row["_day"] = path.parent.parent.name[4:]
                rows[dataset][row_key(dataset, row)] = row
    return WarehouseState(files, rows)


def captured_files(state: WarehouseState) -> dict[str, str]:
    """The files of the three captured datasets (a run of every asset also writes the
    analytics layer's, which ``files`` holds too)."""
    return {rel: digest for rel, digest in state.files.items() if rel.split("/")[0] in DATASETS}


def is_flagged(dataset: str, row: dict) -> bool:
    if dataset == GATEWAY:
        attrs = json.loads(row["attributes"]) if row["attributes"] else {}
        return bool(attrs.get("hermes", {}).get("source_deleted"))
    return bool(row["source_deleted"])


def assert_untouched(root: Path, before: WarehouseState) -> None:
    """(b) Every partition file is byte for byte what it was; none appeared, none vanished."""
    after = warehouse_state(root)
    assert after.files == before.files, _diff(before.files, after.files)
    assert_sound(root)


def assert_sound(root: Path) -> None:
    """(b) No torn file: every partition file reads whole with its dataset's schema, and no
    temp file of a finished write is left in a partition folder (globs would skip it, but
    it is dead weight)."""
    root = Path(root)
    for dataset in DATASETS:
        for day in sorted((root / dataset).glob("day=*")):
            assert all(e.name.startswith("host=") for e in day.iterdir()), f"a day folder holds more than hosts: {day}"
        for folder in sorted((root / dataset).glob("day=*/host=*")):
            for entry in folder.iterdir():
                if entry.name == PART_FILE:
                    table = pq.read_table(entry, schema=schemas.DATASETS[dataset].schema)
                    assert table.num_rows > 0, f"{entry}: an empty partition file (a day with no rows has none)"
                else:
                    assert entry.name in (".lock", READ_AT_FILE), f"stray file in a partition folder: {entry}"


def assert_nothing_lost(before: WarehouseState, after: WarehouseState, *, datasets=DATASETS) -> None:
    """(c) Every row captured before is still there, with the same captured content."""
    for dataset in datasets:
        lost = before.keys(dataset) - after.keys(dataset)
        assert not lost, f"{dataset}: {len(lost)} captured rows lost: {sorted(map(str, lost))[:10]}"
        column = {GATEWAY: "content_text", MESSAGES: "content", SESSIONS: "title"}[dataset]
        changed = [k for k in before.keys(dataset) if before.rows[dataset][k][column] != after.rows[dataset][k][column]]
        assert not changed, f"{dataset}: {len(changed)} captured rows now hold other {column}: {changed[:5]}"


def _diff(a: dict, b: dict) -> str:
    changed = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    return f"changed {changed}, appeared {sorted(b.keys() - a.keys())}, vanished {sorted(a.keys() - b.keys())}"


def tree_state(root: Path) -> dict[str, tuple]:
    """relative path -> (sha256, size, mtime_ns, mode) of every file below ``root`` (symlinks not followed)."""
    root = Path(root)
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            out[str(path.relative_to(root))] = ("symlink", os.readlink(path), st.st_mtime_ns, st.st_mode)
        elif path.is_file():
            out[str(path.relative_to(root))] = (sha256(path), st.st_size, st.st_mtime_ns, st.st_mode)
        elif path.is_dir():
            out[str(path.relative_to(root)) + "/"] = ("dir", None, None, st.st_mode)
    return out


# --------------------------------------------------------------------------
# one installation
# --------------------------------------------------------------------------


class Install(Capture):
    """A Hermes home, a warehouse, a policy list path and a DAGSTER_HOME in a temp dir,
    set in the environment the way a user configures the project (SPEC §10)."""

    _defs: dg.Definitions | None = None
    _sensor: SensorDriver | None = None

    def definitions(self) -> dg.Definitions:
        """The project's definitions, loaded once per installation (after the environment is set)."""
        if self._defs is None:
            self._defs = self.defs()
        return self._defs

    def run(self, start: str = DAY1, end: str | None = None, *, defs: dg.Definitions | None = None, **tags) -> Outcome:
        """One run of every asset and check over ``start..end`` (a single-run backfill), in process."""
        job = (defs or self.definitions()).resolve_implicit_global_asset_job_def()
        t0 = time.monotonic()
        result = job.execute_in_process(
            instance=instance(),
            tags={RANGE_START: start, RANGE_END: end or start, **tags},
            raise_on_error=False,
        )
        return Outcome(result, time.monotonic() - t0)

    def writer(self, **kwargs) -> HermesWriter:
        return HermesWriter(self.store, home=self.home, **kwargs)

    @property
    def sensor(self) -> SensorDriver:
        if self._sensor is None:
            self._sensor = SensorDriver(
                self.home, busy_timeout_ms=int(os.environ.get("HERMES_ASSETS_BUSY_TIMEOUT_MS", "2000"))
            )
        return self._sensor

    def state(self) -> WarehouseState:
        return warehouse_state(self.warehouse)


def new_install(root: Path) -> Install:
    """The layout of :func:`tests.defs.harness.new_capture`, as an :class:`Install`."""
    return Install(**vars(new_capture(root)))


class FileProxy:
    """A file object standing in for the real one (test-side fault injection on ``write``)."""

    def __init__(self, f):
        self._f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._f, name)


# --------------------------------------------------------------------------
# scenario stores (real writer)
# --------------------------------------------------------------------------


def write_scenario(w: HermesWriter, days: int = 2, *, text: str = "") -> dict[str, list[str]]:
    """A few sessions on each of ``days`` UTC days from 2026-06-01, as Hermes writes them:
    a cli session with a tool call and its result (ended), a telegram chat, and an open tui
    session. Returns day -> sids. ``text`` pads message bodies (for bigger files)."""
    out: dict[str, list[str]] = {}
    for d in range(days):
        w.at(START_S + d * DAY_S)
        day = f"2026-06-{d + 1:02d}"
        cli = w.session(
            f"cli-{d}",
            "cli",
            cwd=f"/work/repo-{d}",
            model="anthropic/claude-sonnet-4.6",
            system_prompt="You are Hermes.",
        )
        w.msg(cli, "user", f"list the files {d} {text}")
        w.msg(
            cli,
            "assistant",
            "",
            tool_calls=[openai_call(f"call-{d}", "terminal", {"command": "ls"})],
            finish_reason="tool_calls",
        )
        w.msg(cli, "tool", f"README.md\nsrc/ {text}", tool_call_id=f"call-{d}", tool_name="terminal")
        w.msg(cli, "assistant", f"two entries {d} {text}", finish_reason="stop")
        w.update_token_counts(
            cli,
            input_tokens=120,
            output_tokens=30,
            model="anthropic/claude-sonnet-4.6",
            billing_provider="openrouter",
            billing_base_url="https://openrouter.ai/api/v1",
            api_call_count=1,
        )
        w.end(cli, "cli_close")
        chat = w.session(f"tg-{d}", "telegram")
        w.msg(chat, "user", f"ping {d} {text}")
        w.msg(chat, "assistant", f"pong {d} {text}", finish_reason="stop")
        tui = w.session(f"tui-{d}", "tui", cwd=f"/work/repo-{d}")
        w.msg(tui, "user", f"still open {d} {text}")
        out[day] = [cli, chat, tui]
    return out


def grow(w: HermesWriter, days: int = 2, *, text: str = "") -> None:
    """Hermes carries on: one more message in every open session, a new session per day."""
    for d in range(days):
        w.at(START_S + d * DAY_S + 3600)
        w.msg(f"tui-{d}", "assistant", f"an answer {d} {text}", finish_reason="stop")
        new = w.session(f"later-{d}", "cli", cwd=f"/work/repo-{d}")
        w.msg(new, "user", f"a later question {d} {text}")


def remove_sqlite_sidecars(db: Path) -> None:
    for suffix in ("-wal", "-shm", "-journal"):
        Path(str(db) + suffix).unlink(missing_ok=True)


def tick_failure(sensor: SensorDriver, path) -> str:
    """The ``error_kind`` a sensor tick reported for the store at ``path`` (SPEC D18).

    The tick itself does not fail: it requests nothing for that store, names it
    and its error kind in the skip reason and in a ``hermes.sensor.store_failed``
    error event, and keeps the store's cursor entry (callers check the cursor).
    """
    with structlog.testing.capture_logs() as logs:
        tick = sensor.tick()
    failed = [e for e in logs if e["event"] == "hermes.sensor.store_failed"]
    assert failed, f"the sensor tick did not report the fault: {tick.skip}"
    (event,) = failed
    assert event["path"] == str(path) and event["log_level"] == "error", event
    assert tick.run_requests == [], "a failed store's days were requested"
    assert f"{path} could not be read ({event['error_kind']})" in tick.skip, tick.skip
    return event["error_kind"]


# --------------------------------------------------------------------------
# a Hermes process (tests/faults/hermes_process.py)
# --------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


class HermesProcess:
    """``python -m tests.faults.hermes_process MODE DB``, started and waited for ``ready``."""

    def __init__(self, mode: str, db: Path):
        import subprocess
        import sys

        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.hermes_process", mode, str(db)],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.proc.kill()
            raise AssertionError(f"hermes process ({mode}) did not get ready: {line!r} {self.proc.stderr.read()!r}")

    def finish(self, timeout: float = 30) -> None:
        """Let it commit and exit (closes its stdin)."""
        self.proc.stdin.close()
        assert self.proc.wait(timeout) == 0, self.proc.stderr.read()

    def kill9(self) -> None:
        import signal

        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def __enter__(self) -> HermesProcess:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.kill9()
