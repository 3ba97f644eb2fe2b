"""Fault 1: the read-only guarantee (SPEC §1 "Read-only, always", spec R5).

We never write, checkpoint or touch anything under the Hermes home; the only
files that may appear are SQLite's own ``-wal``/``-shm`` beside a store. And a
store in a folder we cannot write (a read-only mount, another user's home) is
still read, through the fallbacks of SPEC §1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from hermes_assets.defs.resources import CaptureRuntime, HermesStores, HermesWarehouse, UsagePolicy
from tests.faults import forking
from tests.faults.helpers import (
    DAY1,
    DAY2,
    GATEWAY,
    MESSAGES,
    REPO,
    HermesProcess,
    Outcome,
    captured_files,
    tree_state,
    warehouse_state,
    write_scenario,
)
from tests.faults.hermes_process import UNCOMMITTED
from tests.support.hermes_writer import HermesWriter
from tests.support.skips import unavailable

SQLITE_OWN = ("-wal", "-shm")


def _hermes_home(install) -> list[Path]:
    """A Hermes home as Hermes leaves it: the store, a profile's store, and the other files
    Hermes keeps there (config, secrets, memories, logs, a gateway session index)."""
    with install.writer() as w:
        write_scenario(w, 2)
    profile = install.home / "profiles" / "work"
    with HermesWriter(profile / "state.db", home=profile) as w:
        w.msg(w.session("work-1", "cli", cwd="/work/client"), "user", "profile store")
    for rel, text in {
        "config.yaml": "model: anthropic/claude-sonnet-4.6\n",
        ".env": "OPENROUTER_API_KEY=sk-not-a-real-key\n",
        "SOUL.md": "# Hermes\n",
        "memories/MEMORY.md": "- the user prefers short answers\n",
        "sessions/sessions.json": '{"telegram:42": "tg-0"}\n',
        "logs/agent.log": "2026-06-01 started\n",
        "profiles/work/config.yaml": "model: openai/gpt-5\n",
    }.items():
        (install.home / rel).parent.mkdir(parents=True, exist_ok=True)
        (install.home / rel).write_text(text)
    return [install.store, profile / "state.db"]


def _assert_only_sqlite_sidecars_moved(before: dict, after: dict, stores: list[Path], home: Path) -> None:
    own = {str(Path(str(db) + s).relative_to(home)) for db in stores for s in SQLITE_OWN}
    appeared = set(after) - set(before)
    assert appeared <= own, f"files appeared under the Hermes home: {sorted(appeared - own)}"
    assert not set(before) - set(after), f"files vanished: {sorted(set(before) - set(after))}"
    for rel in appeared:
        if rel.endswith("-wal"):
            assert after[rel][1] == 0, f"{rel}: our read wrote WAL frames"
    for rel, state in before.items():
        if rel.endswith("-shm"):  # SQLite's shared-memory index: every reader marks it
            assert after[rel][3] == state[3]
            continue
        assert after[rel] == state, f"{rel} changed: {state} -> {after[rel]}"


@pytest.mark.parametrize("hermes", ["stopped", "running"])
def test_backfill_and_ticks_leave_every_hermes_file_as_it_was(install, hermes):
    """Protects R5: a full backfill, a sensor-style one-day run and sensor ticks over a
    Hermes home (a store, a profile's store, config, secrets, memories, logs) leave every
    file's bytes, size, mtime and mode as they were, with Hermes stopped (checkpointed
    files) and running (an open SessionDB in another process, committed rows only in its
    WAL). The only files that may appear are SQLite's own -wal/-shm, and an appearing -wal
    is empty. With Hermes running its WAL-only row is captured: the reads are real."""
    stores = _hermes_home(install)
    running = HermesProcess("idle", install.store) if hermes == "running" else None
    try:
        if running:
            assert os.path.getsize(str(install.store) + "-wal") > 0
        before = tree_state(install.home)
        install.run(DAY1, DAY2).ok()
        assert install.sensor.tick().days == [DAY1, DAY2]
        assert install.sensor.tick().run_requests == []
        install.run(DAY2).ok()
        install.sensor.tick()
        after = tree_state(install.home)
        _assert_only_sqlite_sidecars_moved(before, after, stores, install.home)
        texts = {r["content"] for r in warehouse_state(install.warehouse).rows[MESSAGES].values()}
        assert ("written by a running Hermes" in texts) == bool(running)
    finally:
        if running:
            running.finish()


def _syscalls_on(trace_dir: Path, home: Path) -> list[str]:
    lines = []
    for path in sorted(trace_dir.glob("trace.*")):
        lines += [line for line in path.read_text(errors="replace").splitlines() if str(home) in line]
    return lines


_WRITE_FLAGS = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND")
_MUTATING = re.compile(
    r"^(unlink|unlinkat|rename|renameat2?|mkdir|mkdirat|rmdir|chmod|fchmod|fchmodat|chown|"
    r"fchownat|utimensat|truncate|link|linkat|symlink|symlinkat)\("
)
_FD_WRITE = re.compile(r"^(write|pwrite64|pwritev2?|writev|ftruncate|fallocate)\(\d+<([^>]*)>")
#: SQLite running as root gives a -wal/-shm it creates the db file's owner (robust_fchown)
_FD_CHOWN = re.compile(r"^fchown\(\d+<([^>]*)>")


@pytest.mark.e2e
def test_every_syscall_on_the_hermes_home_is_a_read(install, tmp_path):
    """Protects R5 at the system-call level (the checksums above cannot see a write that
    is later undone): a separate process runs a backfill and two sensor ticks under
    strace. On anything under the Hermes home it opens files read-only, except SQLite's
    own -wal/-shm (opened read-write by SQLite, never truncated); it writes only into
    -shm (the readers' marks in the shared-memory index), never into the db or the -wal;
    it never unlinks, renames, truncates, chmods or touches a file there (SQLite running as
    root gives the -wal/-shm it creates the db's owner: the one fchown allowed)."""
    if not shutil.which("strace"):
        unavailable("strace is not installed")
    stores = _hermes_home(install)
    trace_dir = tmp_path / "strace"
    trace_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "DAGSTER_"))}
    env.update(install.environ(), HERMES_ASSETS_LOG_FORMAT="json", PYTHONUNBUFFERED="1")
    cmd = [
        "strace",
        "-f",
        "-ff",
        "-y",
        "-qq",
        "-o",
        str(trace_dir / "trace"),
        "-e",
        "trace=open,openat,creat,truncate,ftruncate,fallocate,write,pwrite64,pwritev,pwritev2,writev,"
        "unlink,unlinkat,rename,renameat,renameat2,mkdir,mkdirat,rmdir,chmod,fchmod,fchmodat,"
        "chown,fchown,fchownat,utimensat,link,linkat,symlink,symlinkat",
        sys.executable,
        "-m",
        "tests.faults.run_script",
        f"run:{DAY1}:{DAY2}",
        "tick",
        "tick",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    if proc.returncode != 0 and "ptrace" in proc.stderr:
        unavailable(f"strace cannot trace here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    steps = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"step"')]
    assert [s.get("success", True) for s in steps] == [True, True, True]
    assert steps[1]["days"] == [DAY1, DAY2]

    calls = _syscalls_on(trace_dir, install.home)
    assert any("state.db" in c and "openat(" in c for c in calls), "the trace saw no read of the store at all"
    own = tuple(str(db) + s for db in stores for s in SQLITE_OWN)
    shm = tuple(str(db) + "-shm" for db in stores)
    bad = []
    for call in calls:
        if call.startswith(("openat(", "open(", "creat(")):
            target = call.split('"')[1]
            if _WRITE_FLAGS.search(call.split(")", 1)[0]) and (target not in own or "O_TRUNC" in call):
                bad.append(call)
        elif _MUTATING.match(call):
            bad.append(call)
        elif _FD_CHOWN.match(call):
            if not _FD_CHOWN.match(call).group(1).endswith(own):
                bad.append(call)
        else:
            m = _FD_WRITE.match(call)
            if m and not m.group(2).endswith(shm):
                bad.append(call)
    assert not bad, "writes under the Hermes home:\n" + "\n".join(bad[:20])


# --------------------------------------------------------------------------
# a store in a folder we cannot write, read as an unprivileged user
# --------------------------------------------------------------------------


@pytest.fixture
def ro_base():
    """A folder under /tmp that uid 65534 can traverse (pytest's tmp_path is 0700)."""
    base = Path(tempfile.mkdtemp(prefix="hermes-ro-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                os.chmod(path, 0o755)
        shutil.rmtree(base, ignore_errors=True)


def _ro_store(base: Path, case: str) -> Path:
    """``base/home/state.db`` as the case needs it (the folder still writable)."""
    home = base / "home"
    if case == "wal_frames":  # Hermes died (or the folder was snapshotted) with rows only in its WAL
        src = base / "live"
        w = HermesWriter(src / "state.db", home=src)
        write_scenario(w, 2)
        home.mkdir()
        shutil.copyfile(src / "state.db", home / "state.db")
        shutil.copyfile(src / "state.db-wal", home / "state.db-wal")
        w.close()
        shutil.rmtree(src)
        assert os.path.getsize(home / "state.db-wal") > 0
        return home / "state.db"
    with HermesWriter(home / "state.db", home=home) as w:
        write_scenario(w, 2)
    if case == "hot_journal":  # Hermes on a network filesystem (DELETE journal), killed mid-write
        conn = sqlite3.connect(home / "state.db")
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
        conn.close()
        HermesProcess("hot-journal", home / "state.db").kill9()
        assert os.path.getsize(home / "state.db-journal") > 0
    return home / "state.db"


def _make_read_only(home: Path) -> None:
    for path in home.iterdir():
        os.chmod(path, 0o444)
    os.chmod(home, 0o555)


def _defs(install, home: Path, warehouse: Path, base: Path) -> dg.Definitions:
    # One worker: the forked child runs as uid 65534, which cannot start a fresh interpreter
    # here (Python lives under root's 0700 home); a real user's Python is theirs to read.
    return install.defs(
        hermes=HermesStores(hermes_home=str(home), busy_timeout_ms=400),
        warehouse=HermesWarehouse(root=str(warehouse)),
        usage_policy=UsagePolicy(list_path=str(base / "no-policy-list.json"), user_home="/home/hermes-user"),
        capture_runtime=CaptureRuntime(workers=1),
    )


def _root_run(install, home: Path, warehouse: Path, base: Path) -> Outcome:
    return install.run(DAY1, DAY2, defs=_defs(install, home, warehouse, base))


def _run_in_child(defs: dg.Definitions) -> dict:
    """One backfill of DAY1..DAY2, in this (forked, unprivileged) process."""
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=dg.DagsterInstance.ephemeral(),
        tags={"dagster/asset_partition_range_start": DAY1, "dagster/asset_partition_range_end": DAY2},
        raise_on_error=False,
    )
    outcome = Outcome(result, 0.0)
    return {
        "uid": os.getuid(),
        "success": result.success,
        "failures": [[f.cls_name, f.error_kind, f.message] for f in outcome.failures],
    }


@pytest.mark.parametrize("case", ["no_wal", "wal_frames", "hot_journal"])
def test_store_in_a_read_only_folder_is_read_by_an_unprivileged_user(install, ro_base, case):
    """Protects SPEC §1's read-only-directory fallback, as a real unprivileged user (a
    forked child with uid 65534: root ignores permission bits). The store sits in a 0555
    folder with no -shm, so a mode=ro open cannot create one (SQLITE_READONLY_DIRECTORY):
    - no -wal: read with immutable=1;
    - a non-empty -wal: db + wal copied to a temp dir and the copy read (the WAL-only rows
      are captured);
    - a hot rollback journal (a writer killed mid-transaction): store_busy, never a read
      around it (nothing written), and after Hermes rolls it back the next run succeeds
      with none of the interrupted write's data.
    In every case the partition files are byte-identical to what root captures from the
    same store in a writable folder, and nothing in the read-only folder changes."""
    db = _ro_store(ro_base, case)
    home = db.parent
    reference, mine = ro_base / "warehouse-root", ro_base / "warehouse-nobody"
    mine.mkdir()
    os.chown(mine, forking.NOBODY, forking.NOBODY)
    # root's run in the writable folder: the reference (and it imports every module the child needs)
    root_run = _root_run(install, home, reference, ro_base)
    Path(str(db) + "-shm").unlink(missing_ok=True)  # root's read made these; the case has none
    if case == "no_wal":
        Path(str(db) + "-wal").unlink(missing_ok=True)
    _make_read_only(home)
    before = tree_state(home)
    defs = _defs(install, home, mine, ro_base)

    child = forking.fork(lambda: _run_in_child(defs), nobody=True).result()
    assert child["ok"], child.get("traceback")
    outcome = child["value"]
    assert outcome["uid"] == forking.NOBODY
    assert tree_state(home) == before, "the read-only folder changed"

    if case != "hot_journal":
        assert root_run.success and outcome["success"], outcome["failures"]
        ref, got = warehouse_state(reference), warehouse_state(mine)
        assert got.files == ref.files and len(captured_files(got)) == 6
        if case == "wal_frames":
            assert len(got.rows[MESSAGES]) == 14  # every row of the scenario, all only in the WAL copy
        return

    # a hot journal: store_busy for root and for the unprivileged reader alike, nothing written
    assert not root_run.success and not outcome["success"]
    assert {f[1] for f in outcome["failures"]} == {"store_busy"}, outcome["failures"]
    assert all("hot rollback journal" in f[2] for f in outcome["failures"])
    assert not list(mine.rglob("*.parquet")) and not list(reference.rglob("*.parquet"))
    # heal: the folder is writable again and Hermes opens the store (rolling the journal back)
    os.chmod(home, 0o755)
    os.chmod(db, 0o644)
    conn = sqlite3.connect(db)
    conn.execute("SELECT count(*) FROM sessions").fetchone()
    conn.close()
    assert not Path(str(db) + "-journal").exists()
    _root_run(install, home, reference, ro_base).ok()  # the reference, now that there is one
    _make_read_only(home)
    child = forking.fork(lambda: _run_in_child(defs), nobody=True).result()
    assert child["ok"] and child["value"]["success"], child
    got = warehouse_state(mine)
    assert got.files == warehouse_state(reference).files and len(captured_files(got)) == 6
    assert len(got.rows[MESSAGES]) == 14
    texts = [r["content_text"] or "" for r in got.rows[GATEWAY].values()]
    assert not any(UNCOMMITTED in t for t in texts)
