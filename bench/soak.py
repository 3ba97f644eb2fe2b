#!/usr/bin/env python3
"""A soak of the capture under faults. Not a test, not in CI: it needs root
(the warehouse is a small tmpfs it fills up and remounts read-only) and ~12 minutes.

A real ``dagster dev`` (webserver + daemon, the repo's ``dagster.yaml``, a 5 s
sensor) watches a Hermes store that a live Hermes writes (two processes of
``tools/live_writer.py`` through ``SessionDB``, with rewinds, compactions,
``/retry`` deletes, titles, archives, reopens; one more process records
auxiliary usage). One fault every 30-60 s, in turn:

  kill_run_worker   kill -9 of a run worker (``dagster api execute_run``)
  kill_daemon       kill -9 of the daemon; ``dagster dev`` goes down with it and is started again
  stop_writer       SIGSTOP of a Hermes writer holding the store's write lock (BEGIN IMMEDIATE)
  disk_full         the warehouse's filesystem filled to the last byte
  read_only         the warehouse remounted read-only

Then the writers stop, and a TAIL fault: the warehouse is full when Hermes
writes for the last time, so the capture of that write fails and nothing more
is written. The fault clears; the warehouse must equal Hermes's reading within
3 minutes, with nobody acting. Finally, once quiet, the warehouse is compared
with the store (sessions, messages, usage by model) and the analytics with a
recomputation from the datasets, and the figures are printed: faults, runs,
failures (each matched to a fault), lag from commit to warehouse (p50/p95),
staging folders left, the verdict.

Two more cases (``--case``) watch a folder of stores (``HERMES_STATE_DB``) with
``HERMES_ASSETS_START_DATE`` unset, so the partitions start where the history did when
Dagster started, and history older than that comes while it runs:

  empty-store   Dagster starts on an empty store; Hermes's clock then begins ~2 minutes
                before midnight of the previous UTC day (its first sessions are dated
                that day, a day before the first partition)
  added-store   a second store, with older history (the small fixture's 14 days), is
                moved into the folder of stores after the first fault

Their figures split the lag: ``lag_older_*`` for the days older than the first partition
(``lag_added_*``: from the store's arrival to its days' capture) against ``lag_other_*``,
with how many of those captures came before any restart of ``dagster dev``.

    sudo .venv/bin/python bench/soak.py                     # 9 minutes of faults, then the tail
    sudo .venv/bin/python bench/soak.py --minutes 4 --json  # last line: flat JSON
    sudo .venv/bin/python bench/soak.py --case empty-store  # older history while Dagster runs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PY = sys.executable
DAGSTER = str(Path(PY).with_name("dagster"))
FAULTS = ("kill_run_worker", "stop_writer", "disk_full", "kill_daemon", "read_only")
WAREHOUSE_MB = 48
TAIL_DEADLINE_S = 180


def live_writer() -> Path:
    """The project's live Hermes writer (tools/README.md)."""
    return REPO / "tools" / "live_writer.py"


def small_fixture() -> Path:
    return REPO / "tests" / "fixtures" / "small" / "state.db"


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------


def pids_in_group(pgid: int, *words: str, parent: str = "") -> list[int]:
    """Processes of the process group ``pgid`` (ours) whose command line holds every word (and whose
    parent's holds ``parent``): never another user's or another session's processes."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getpgid(pid) != pgid:
                continue
            cmd = _cmdline(pid)
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if all(w in cmd for w in words) and parent in _cmdline(ppid):
                out.append(pid)
        except (OSError, ValueError):
            continue
    return out


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")


def kill_group(proc: subprocess.Popen | None, grace_s: float = 15) -> None:
    if proc is None:
        return
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue


class Dagster:
    """``dagster dev`` in its own process group; restartable."""

    def __init__(self, env: dict, logs: Path):
        self.env, self.logs, self.proc, self.starts = env, logs, None, 0
        self.started_at: list[float] = []  # each start (a restart loads the definitions afresh)

    def start(self) -> None:
        self.starts += 1
        self.started_at.append(time.time())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = open(self.logs / f"dagster-dev.{self.starts}.log", "ab")
        self.proc = subprocess.Popen(
            [DAGSTER, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"dagster dev exited with {self.proc.returncode} (see {out.name})")
            time.sleep(1)
        raise SystemExit("dagster dev did not come up in 180 s")

    def stop(self) -> None:
        kill_group(self.proc)


# --------------------------------------------------------------------------
# the warehouse's filesystem
# --------------------------------------------------------------------------


class Disk:
    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={WAREHOUSE_MB}m,mode=0700", "tmpfs", str(path)], check=True
        )
        self.ballast = path / "ballast.fill"

    def fill(self) -> None:
        """Write until the filesystem is full, to the last page (unbuffered: nothing left to flush)."""
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 4096, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError:
                    continue
        finally:
            os.close(fd)

    def free(self) -> None:
        self.ballast.unlink(missing_ok=True)

    def remount(self, mode: str) -> None:
        for _ in range(50):
            if subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"remount {mode} of {self.path} failed")

    def close(self) -> None:
        self.remount("rw")
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


# --------------------------------------------------------------------------
# Hermes
# --------------------------------------------------------------------------

AUX_WRITER = r"""
import os, random, sys, time
os.environ["HERMES_HOME"] = sys.argv[2]
import hermes_state
from pathlib import Path
db = hermes_state.SessionDB(db_path=Path(sys.argv[1]))
rng, stop = random.Random(7), time.time() + float(sys.argv[3])
log = open(sys.argv[4], "a")
while time.time() < stop:
    time.sleep(rng.uniform(4, 9))
    rows = db._conn.execute("SELECT id FROM sessions ORDER BY started_at DESC LIMIT 20").fetchall()
    if rows:
        sid = rng.choice(rows)[0]
        db.record_auxiliary_usage(sid, rng.choice(["title_generation", "compression", "vision"]),
                                  model="aux/model", input_tokens=rng.randint(10, 900), output_tokens=rng.randint(1, 90),
                                  estimated_cost_usd=0.0001)
        log.write(f'{{"op": "record_auxiliary_usage", "session_id": "{sid}", "t": {time.time()}}}\n')
        log.flush()
db.close()
"""

LOCK_HOLDER = r"""
import os, sys, time
os.environ["HERMES_HOME"] = sys.argv[2]
import hermes_state
from pathlib import Path
db = hermes_state.SessionDB(db_path=Path(sys.argv[1]))
db._conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[3]))
db._conn.execute("ROLLBACK")
db.close()
"""


def empty_store(db: Path, home: Path) -> None:
    """A store as Hermes creates it, before its first session (its own schema, no row)."""
    db.parent.mkdir(parents=True, exist_ok=True)
    os.environ["HERMES_HOME"] = str(home)
    import hermes_state

    hermes_state.SessionDB(db_path=db).close()


def hermes_reading(db: Path) -> dict:
    """The store as Hermes keeps it (plain SQL, no project code)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sessions = {
            r[0]: (r[1], None if r[2] is None else int(r[2] * 1000 + 0.5), *r[3:])
            for r in conn.execute(
                "SELECT id, title, ended_at, message_count, input_tokens, output_tokens, archived FROM sessions"
            )
        }
        messages = {
            (r[0], r[1]): r[2:] for r in conn.execute("SELECT session_id, id, role, active, compacted FROM messages")
        }
        usage = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT session_id, count(*), sum(input_tokens), sum(output_tokens) FROM session_model_usage GROUP BY 1"
            )
        }
        return {"sessions": sessions, "messages": messages, "usage": usage}
    finally:
        conn.close()


def warehouse_reading(warehouse: Path) -> dict:
    import pyarrow.dataset as ds

    def rows(name: str, columns: list[str]) -> list[dict]:
        base = warehouse / name
        if not base.is_dir():
            return []
        # every host's files of a captured dataset, the one file of a day of the analytics
        files = [str(p) for p in (*base.glob("day=*/host=*/part-0.parquet"), *base.glob("day=*/part-0.parquet"))]
        return ds.dataset(files, format="parquet").to_table(columns=columns).to_pylist() if files else []

    sessions, usage = {}, {}
    for r in rows(
        "hermes_sessions",
        [
            "id",
            "title",
            "ended_at",
            "message_count",
            "input_tokens",
            "output_tokens",
            "archived",
            "usage_by_model",
            "source_deleted",
        ],
    ):
        if r["source_deleted"]:
            continue
        ended = round(r["ended_at"].timestamp() * 1000) if r["ended_at"] is not None else None
        sessions[r["id"]] = (
            r["title"],
            ended,
            r["message_count"],
            r["input_tokens"],
            r["output_tokens"],
            r["archived"],
        )
        entries = json.loads(r["usage_by_model"]) if r["usage_by_model"] else []
        if entries:
            usage[r["id"]] = (
                len(entries),
                sum(int(e.get("input_tokens") or 0) for e in entries),
                sum(int(e.get("output_tokens") or 0) for e in entries),
            )
    messages = {
        (r["session_id"], r["id"]): (r["role"], r["active"], r["compacted"])
        for r in rows("hermes_messages", ["session_id", "id", "role", "active", "compacted", "source_deleted"])
        if not r["source_deleted"]
    }
    return {"sessions": sessions, "messages": messages, "usage": usage}


def hermes_readings(dbs: list[Path]) -> dict:
    """Every store's reading together (session ids are unique across the stores of a soak)."""
    out: dict = {"sessions": {}, "messages": {}, "usage": {}}
    for db in dbs:
        for what, rows in hermes_reading(db).items():
            out[what].update(rows)
    return out


def differences(dbs: list[Path], warehouse: Path) -> list[str]:
    """What differs between Hermes's reading of every store and the warehouse (empty: equal)."""
    h, w = hermes_readings(dbs), warehouse_reading(warehouse)
    out = []
    for what in ("sessions", "messages", "usage"):
        a, b = h[what], w[what]
        missing = set(a) - set(b)
        extra = set(b) - set(a)
        changed = [k for k in set(a) & set(b) if _norm(a[k]) != _norm(b[k])]
        if missing or extra or changed:
            out.append(
                f"{what}: {len(missing)} missing, {len(extra)} extra, {len(changed)} stale "
                f"(e.g. {sorted(map(str, missing or extra or changed))[:3]})"
            )
    return out


def _norm(value):
    if isinstance(value, tuple):
        return tuple(_norm(v) for v in value)
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, bool):
        return int(value)
    return value


def analytics_differences(warehouse: Path) -> list[str]:
    """The analytics files against a recomputation from the datasets (SPEC §11)."""
    from hermes_assets.lib.analytics import daily
    from hermes_assets.lib.warehouse.datasets import Warehouse
    from hermes_assets.lib.warehouse.loading import DatasetDays

    wh = Warehouse(str(warehouse))
    days = Warehouse(str(warehouse)).days("hermes_sessions")
    inputs = {name: DatasetDays(wh, name, [], columns) for name, columns in daily.INPUTS.items()}
    out = []
    for day in days:
        tables = {name: d.read(day) for name, d in inputs.items()}
        for dataset in daily.ANALYTICS:
            want = daily.compute_day(dataset, day, tables).table
            have = wh.read(dataset, day)
            want_rows = sorted(map(str, want.to_pylist())) if want is not None and want.num_rows else []
            have_rows = sorted(map(str, have.to_pylist())) if have is not None else []
            if want_rows != have_rows:
                out.append(f"{dataset} {day}: {len(have_rows)} rows, recomputed {len(want_rows)} differ")
    return out


# --------------------------------------------------------------------------
# the soak
# --------------------------------------------------------------------------


class Soak:
    def __init__(self, args):
        self.args = args
        self.root = Path(args.root or tempfile.mkdtemp(prefix="hermes-soak-"))
        self.home = self.root / "hermes-home"
        self.db = self.home / "state.db"
        self.folder = self.root / "stores"  # the folder of stores of the empty-store and added-store cases
        if args.case != "fixture":
            self.db = self.folder / "live" / "state.db"
        self.added: Path | None = None  # the store moved into the folder (added-store), once it is there
        self.t_added: float | None = None
        self.first_day: str | None = None  # the first partition when dagster dev first started
        self.clock_offset = 0.0
        self.logs = self.root / "logs"
        self.dagster_home = self.root / "dagster-home"
        for d in (self.home, self.logs, self.dagster_home):
            d.mkdir(parents=True, exist_ok=True)
        self.disk = Disk(self.root / "warehouse")
        self.warehouse = self.disk.path / "wh"
        config = (REPO / "dagster.yaml").read_text()
        if args.run_retries is not None:
            config += f"\nrun_retries:\n  enabled: true\n  max_retries: {args.run_retries}\n"
        (self.dagster_home / "dagster.yaml").write_text(config)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "DAGSTER_"))}
        env.update(
            {
                "DAGSTER_HOME": str(self.dagster_home),
                "HERMES_HOME": str(self.home),
                "HERMES_ASSETS_WAREHOUSE": str(self.warehouse),
                "HERMES_ASSETS_POLL_SECONDS": str(args.poll),
                "HERMES_ASSETS_LOG_FORMAT": "json",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if args.case == "fixture":
            shutil.copyfile(small_fixture(), self.db)
            env["HERMES_ASSETS_START_DATE"] = "2026-05-25"
        else:  # the partitions start where the history does: nothing yet
            env["HERMES_STATE_DB"] = str(self.folder)
            empty_store(self.db, self.home)
        self.env = env
        self.dagster = Dagster(env, self.logs)
        self.faults: list[dict] = []
        self.writers: list[subprocess.Popen] = []
        self.rng = random.Random(args.seed)

    def stores(self) -> list[Path]:
        return [self.db] + ([self.added] if self.added else [])

    def add_store(self) -> None:
        """added-store: a store with older history (the small fixture) moved into the folder whole."""
        staged = self.root / "restore" / "desktop"
        staged.mkdir(parents=True)
        shutil.copyfile(small_fixture(), staged / "state.db")
        self.t_added = time.time()
        staged.rename(self.folder / "desktop")
        self.added = self.folder / "desktop" / "state.db"
        log("added a store with older history:", self.added)

    # -- faults ------------------------------------------------------------------

    def fault(self, kind: str) -> dict:
        record = {"kind": kind, "start": time.time()}
        log("fault", kind)
        pgid = os.getpgid(self.dagster.proc.pid)
        if kind == "kill_run_worker":  # the code server starts each run in a spawned process
            workers = lambda: pids_in_group(pgid, "multiprocessing.spawn", parent="api grpc")  # noqa: E731
            deadline = time.time() + 30
            while time.time() < deadline and not workers():
                time.sleep(0.2)
            pids = workers()[:1]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            record["detail"] = f"killed run worker {pids}" if pids else "no run in 30 s"
        elif kind == "kill_daemon":
            pids = pids_in_group(pgid, "dagster._daemon", "run")
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            try:
                self.dagster.proc.wait(60)  # dagster dev goes down with its daemon
            except subprocess.TimeoutExpired:
                pass
            self.dagster.stop()
            self.dagster.start()
            record["detail"] = f"killed daemon {pids}, dagster dev restarted"
        elif kind == "stop_writer":
            holder = subprocess.Popen(
                [PY, "-c", LOCK_HOLDER, str(self.db), str(self.home), "60"],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            holder.stdout.readline()  # "locked": it holds the write lock
            os.kill(holder.pid, signal.SIGSTOP)
            # Hermes's writers wait ~16 s for the lock (15 tries of 1 s) before they give up
            time.sleep(self.rng.uniform(6, 12))
            os.kill(holder.pid, signal.SIGCONT)
            kill_group(holder, 2)
            record["detail"] = "a writer stopped 6-12 s inside BEGIN IMMEDIATE"
        elif kind == "disk_full":
            self.disk.fill()
            time.sleep(self.rng.uniform(10, 20))
            self.disk.free()
        elif kind == "read_only":
            self.disk.remount("ro")
            time.sleep(self.rng.uniform(10, 20))
            self.disk.remount("rw")
        record["end"] = time.time()
        self.faults.append(record)
        return record

    # -- run -----------------------------------------------------------------------

    def run(self) -> dict:
        args = self.args
        log("root", self.root, "case", args.case)
        if args.case != "fixture":  # no history yet: the first partition is today
            self.first_day = time.strftime("%Y-%m-%d", time.gmtime())
        self.dagster.start()
        log("dagster dev up; first capture of the fixture's days")
        self.wait_quiet(300)
        seconds = args.minutes * 60
        if args.case == "empty-store":  # Hermes's clock starts 2 minutes before the previous UTC midnight
            now = time.time()
            self.clock_offset = (now - now % 86400 - 120) - now
            log("Hermes's clock starts at", time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now + self.clock_offset)))
        self.writers = [
            subprocess.Popen(
                [
                    PY,
                    str(live_writer()),
                    str(self.db),
                    "--processes",
                    "2",
                    "--rate",
                    str(args.rate),
                    "--duration",
                    str(seconds),
                    "--mutate-prob",
                    "0.03",
                    "--seed",
                    str(args.seed),
                    "--log",
                    str(self.logs / "ops.jsonl"),
                    "--clock-offset",
                    str(self.clock_offset),
                ],
                env={**self.env, "HERMES_HOME": str(self.home)},
                stdout=open(self.logs / "writer.out", "wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            ),
            subprocess.Popen(
                [PY, "-c", AUX_WRITER, str(self.db), str(self.home), str(seconds), str(self.logs / "aux.jsonl")],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=open(self.logs / "aux.err", "wb"),
                start_new_session=True,
            ),
        ]
        t_end = time.time() + seconds
        i = 0
        while time.time() < t_end - 30:
            time.sleep(self.rng.uniform(30, 60))
            if time.time() >= t_end - 20:
                break
            self.fault(FAULTS[i % len(FAULTS)])
            i += 1
            if args.case == "added-store" and self.added is None:
                self.add_store()
        for w in self.writers:  # a writer that died on a lock it waited too long for leaves its parent waiting
            try:
                w.wait(max(5.0, t_end - time.time() + 30))
            except subprocess.TimeoutExpired:
                kill_group(w, 5)
        log("writers done; waiting for quiet before the tail fault")
        self.wait_quiet(300)
        tail = self.tail_fault()
        log("tail fault cleared; healed in", tail.get("healed_s"), "s")
        self.wait_quiet(300)
        time.sleep(3 * args.poll)  # the analytics follow the last capture
        self.wait_quiet(300)
        figures = self.figures(tail)
        self.dagster.stop()
        return figures

    def tail_fault(self) -> dict:
        """The last capture fails and nothing more is written; then the fault clears."""
        record = {"kind": "tail_disk_full", "start": time.time()}
        self.disk.fill()
        os.environ["HERMES_HOME"] = str(self.home)
        import hermes_state

        db = hermes_state.SessionDB(db_path=self.db)
        sid = db._conn.execute("SELECT id FROM sessions ORDER BY started_at DESC LIMIT 1").fetchone()[0]
        db.append_message(sid, "user", "the last words")
        db.append_message(sid, "assistant", "and the last reply")
        db.record_auxiliary_usage(sid, "title_generation", model="aux/model", input_tokens=77, output_tokens=7)
        db.end_session(sid, "cli_close")
        db.close()
        t_last = record["last_write"] = time.time()
        log("tail: last write done; waiting for its capture to fail")
        self.wait_for(lambda: self.runs_since(t_last, failed=True), 120)
        time.sleep(self.args.tail_hold)  # the fault lasts: the retries fail too
        record["failed_runs"] = len(self.runs_since(t_last, failed=True))
        self.disk.free()
        record["end"] = t_clear = time.time()
        log("tail: fault cleared after", record["failed_runs"], "failed runs")
        deadline = t_clear + TAIL_DEADLINE_S
        while time.time() < deadline:
            if not differences(self.stores(), self.warehouse):
                record["healed_s"] = round(time.time() - t_clear, 1)
                break
            time.sleep(2)
        else:
            record["healed_s"] = None
            record["left"] = differences(self.stores(), self.warehouse)
        self.faults.append(record)
        return record

    # -- the instance --------------------------------------------------------------

    def instance(self):
        import dagster as dg

        return dg.DagsterInstance.from_config(str(self.dagster_home))

    def runs(self) -> list:
        inst = self.instance()
        try:
            return list(inst.get_runs())
        finally:
            inst.dispose()

    def runs_since(self, t: float, failed: bool = False) -> list:
        import dagster as dg

        inst = self.instance()
        try:
            return [
                r.dagster_run
                for r in inst.get_run_records()
                if r.create_timestamp.timestamp() > t
                and (not failed or r.dagster_run.status == dg.DagsterRunStatus.FAILURE)
            ]
        finally:
            inst.dispose()

    def wait_quiet(self, timeout_s: float) -> None:
        """No run in progress, three sensor intervals in a row."""
        quiet = 0
        deadline = time.time() + timeout_s
        while time.time() < deadline and quiet < 3:
            busy = [r for r in self.runs() if not r.is_finished]
            quiet = 0 if busy else quiet + 1
            time.sleep(self.args.poll)

    @staticmethod
    def wait_for(check, timeout_s: float):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            got = check()
            if got:
                return got
            time.sleep(1)
        return None

    # -- figures -------------------------------------------------------------------

    def figures(self, tail: dict) -> dict:
        import dagster as dg

        inst = self.instance()
        try:
            records = list(inst.get_run_records())
            runs = [r.dagster_run for r in records]
            by_status: dict[str, int] = {}
            by_trigger: dict[str, int] = {}
            for run in runs:
                by_status[run.status.value] = by_status.get(run.status.value, 0) + 1
                trigger = run.tags.get("hermes/trigger", "other") + (
                    "+retry" if "dagster/retry_number" in run.tags else ""
                )
                by_trigger[trigger] = by_trigger.get(trigger, 0) + 1
            failures = []
            ok = sorted(
                (
                    r.end_time,
                    _days(r.dagster_run),
                    "dagster/retry_number" in r.dagster_run.tags,
                    r.dagster_run.tags.get("hermes/trigger"),
                )
                for r in records
                if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS and r.end_time
            )
            for rec in records:
                run = rec.dagster_run
                if run.status not in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
                    continue
                t = rec.end_time or rec.update_timestamp.timestamp()
                # a killed worker or daemon is noticed by run monitoring (30 s polls, 180 s start timeout)
                fault = next((f["kind"] for f in self.faults if f["start"] - 5 <= t <= f.get("end", t) + 240), None)
                # healed: the first later success of the same trigger covering its days (a retry or a new request)
                days, trigger = _days(run), run.tags.get("hermes/trigger")
                heal = next(
                    (
                        (end - t, retry)
                        for end, d, retry, trig in ok
                        if end > t and trig == trigger and days and days <= d
                    ),
                    (None, None),
                )
                failures.append(
                    {
                        "run": run.run_id[:8],
                        "trigger": trigger,
                        "fault": fault,
                        "at": round(t - self.faults[0]["start"], 1) if self.faults else None,
                        "healed_after_s": None if heal[0] is None else round(heal[0], 1),
                        "healed_by": None if heal[0] is None else ("dagster retry" if heal[1] else "new run"),
                    }
                )
            lags = self.lags(records)
            check = self.days_captured(inst)
        finally:
            inst.dispose()
        staging = self.warehouse / ".staging"
        left = sorted(p.name for p in staging.iterdir()) if staging.is_dir() else []
        diffs = differences(self.stores(), self.warehouse)
        adiffs = analytics_differences(self.warehouse)
        h = hermes_readings(self.stores())
        unexplained = [f for f in failures if f["fault"] is None]
        verdict = (
            not diffs
            and not adiffs
            and not left
            and tail.get("healed_s") is not None
            and tail["healed_s"] <= TAIL_DEADLINE_S
            and not unexplained
        )
        return {
            "faults": len(self.faults),
            "faults_by_kind": _count(f["kind"] for f in self.faults),
            "runs": len(runs),
            "runs_by_status": by_status,
            "runs_by_trigger": by_trigger,
            "runs_failed": len(failures),
            "failures_unexplained": unexplained,
            "heal_after_failure_s": _heal(failures),
            "lag_p50_s": lags.get("p50"),
            "lag_p95_s": lags.get("p95"),
            "lag_max_s": lags.get("max"),
            "lag_n": lags.get("n"),
            **{
                f"lag_{k}" + ("" if k.endswith("_n") or k.startswith("older_captured") else "_s"): v
                for k, v in lags.items()
                if k not in ("p50", "p95", "max", "n")
            },
            "case": self.args.case,
            "first_partition_at_start": self.first_day,
            "load_average": os.getloadavg(),
            "tail_failed_runs": tail.get("failed_runs"),
            "tail_healed_s": tail.get("healed_s"),
            "sessions": len(h["sessions"]),
            "messages": len(h["messages"]),
            "differences": diffs,
            "analytics_differences": adiffs,
            "staging_left": left,
            "days_captured_check": check,
            "dagster_dev_starts": self.dagster.starts,
            "run_retries": self.args.run_retries,
            "verdict": "PASS" if verdict else "FAIL",
            "faults_detail": [
                {
                    k: (round(v - self.faults[0]["start"], 1) if k in ("start", "end", "last_write") else v)
                    for k, v in f.items()
                }
                for f in self.faults
            ],
        }

    def days_captured(self, inst) -> list[str]:
        """The days_captured check's results, oldest first (the sensor reports each change, each run
        once)."""
        import dagster as dg

        key = dg.AssetCheckKey(dg.AssetKey("hermes_state"), "days_captured")
        history = inst.event_log_storage.get_asset_check_execution_history(key, limit=50)
        return [str(getattr(r.status, "value", r.status)) for r in reversed(history)]

    def lags(self, records) -> dict:
        """Commit -> warehouse of each appended message: the end of the first successful capture
        run that covers its session's day and whose plan started after the commit."""
        import dagster as dg

        ops = []
        for path in self.logs.glob("ops.jsonl*"):
            for line in path.read_text().splitlines():
                op = json.loads(line)
                if op["op"] == "append_message":
                    ops.append(op)
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        day_of = {
            sid: time.strftime("%Y-%m-%d", time.gmtime(t))
            for sid, t in conn.execute("SELECT id, started_at FROM sessions")
        }
        conn.close()
        inst = self.instance()
        captures = []
        try:
            for rec in records:
                run = rec.dagster_run
                if run.status != dg.DagsterRunStatus.SUCCESS or run.tags.get("hermes/trigger") != "sensor":
                    continue
                start = run.tags.get("dagster/asset_partition_range_start") or run.tags.get("dagster/partition")
                end = run.tags.get("dagster/asset_partition_range_end") or start
                plan = [s for s in inst.get_run_step_stats(run.run_id) if s.step_key.endswith(".plan")]
                if start and plan and plan[0].start_time and rec.end_time:
                    captures.append((plan[0].start_time, rec.end_time, start, end))
        finally:
            inst.dispose()
        captures.sort()
        # a restart of dagster dev loads the definitions afresh: captures after it prove nothing
        # about older history captured without one
        restart = self.dagster.started_at[1] if len(self.dagster.started_at) > 1 else float("inf")
        lags, older, other, older_before_restart = [], [], [], 0
        for op in ops:
            day = day_of.get(op["session_id"])
            hit = next((e for s, e, a, b in captures if s >= op["t"] and day and a <= day <= b), None)
            if hit is not None:
                lags.append(hit - op["t"])
                if self.first_day and day < self.first_day:
                    older.append(hit - op["t"])
                    older_before_restart += hit < restart
                else:
                    other.append(hit - op["t"])
        added = []
        if self.added is not None and self.t_added is not None:
            conn = sqlite3.connect(f"file:{self.added}?mode=ro", uri=True)
            added_days = {
                time.strftime("%Y-%m-%d", time.gmtime(t)) for (t,) in conn.execute("SELECT started_at FROM sessions")
            }
            conn.close()
            for day in sorted(added_days):
                hit = next((e for s, e, a, b in captures if s >= self.t_added and a <= day <= b), None)
                if hit is not None:
                    added.append(hit - self.t_added)
                    older_before_restart += hit < restart
        out = {
            **_spread("", lags),
            **_spread("older_", older),
            **_spread("added_", added),
            **_spread("other_", other),
        }
        if self.args.case != "fixture":
            out["older_captured_before_a_restart"] = older_before_restart
        return out

    def close(self) -> None:
        for w in self.writers:
            kill_group(w, 2)
        self.dagster.stop()
        self.disk.close()


def _days(run) -> set[str]:
    """The partitions a run covers (one, or a range's two ends and what lies between)."""
    from datetime import date, timedelta

    start = run.tags.get("dagster/asset_partition_range_start") or run.tags.get("dagster/partition")
    end = run.tags.get("dagster/asset_partition_range_end") or start
    if not start:
        return set()
    a, b = date.fromisoformat(start), date.fromisoformat(end)
    return {(a + timedelta(days=i)).isoformat() for i in range((b - a).days + 1)}


def _spread(prefix: str, lags: list[float]) -> dict:
    """p50/p95/max/n of some lags, their keys prefixed; nothing when there is none."""
    if not lags:
        return {}
    lags = sorted(lags)
    return {
        f"{prefix}p50": round(statistics.median(lags), 1),
        f"{prefix}p95": round(lags[int(0.95 * (len(lags) - 1))], 1),
        f"{prefix}max": round(lags[-1], 1),
        f"{prefix}n": len(lags),
    }


def _heal(failures: list[dict]) -> dict:
    """Failure -> the next success of the same days: p50/max, by what healed it."""
    out = {}
    for by in ("dagster retry", "new run"):
        times = sorted(f["healed_after_s"] for f in failures if f["healed_by"] == by)
        if times:
            out[by] = {"n": len(times), "p50": statistics.median(times), "max": times[-1]}
    out["never"] = sum(1 for f in failures if f["healed_after_s"] is None)
    return out


def _count(items) -> dict:
    out: dict = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=9, help="minutes of live writing and faults before the tail")
    ap.add_argument("--rate", type=float, default=5.5, help="operations per second of each of the 2 writers")
    ap.add_argument("--poll", type=int, default=5, help="HERMES_ASSETS_POLL_SECONDS")
    ap.add_argument(
        "--run-retries",
        type=int,
        default=None,
        help="enable Dagster's run retries with this max_retries (default: dagster.yaml as it is)",
    )
    ap.add_argument(
        "--tail-hold",
        type=float,
        default=20,
        help="seconds the tail fault lasts after the last capture failed (90: the day fails 3 times "
        "in a row, so the days_captured check fails, then heals)",
    )
    ap.add_argument(
        "--case",
        choices=("fixture", "empty-store", "added-store"),
        default="fixture",
        help="fixture: the small fixture's store, HERMES_ASSETS_START_DATE set; empty-store / added-store: "
        "history older than the first partition arrives while Dagster runs (see above)",
    )
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--root", help="work folder (default: a new temp folder)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the soak mounts a tmpfs for the warehouse: run it as root")
    soak = Soak(args)
    try:
        figures = soak.run()
    finally:
        soak.close()
    for key, value in figures.items():
        if key != "faults_detail":
            print(f"  {key:<24} {value}")
    for f in figures["faults_detail"]:
        print("   ", f)
    if args.json:
        print(json.dumps(figures, default=str))


if __name__ == "__main__":
    main()
