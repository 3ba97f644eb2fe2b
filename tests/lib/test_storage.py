"""lib/warehouse/storage.py: one interface over a local folder and pyarrow.fs, held to the same behaviour.

Each test runs against a plain path (:class:`LocalStorage`) and the same disk as a
``file://`` URI (:class:`ArrowStorage`, the code path of object stores); real files
in ``tmp_path``, real pyarrow.
"""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest

from hermes_assets.lib.storage import arrow_storage, local_files, local_storage
from hermes_assets.lib.storage.arrow_storage import ArrowStorage, open_storage
from hermes_assets.lib.storage.local_files import FileModes
from hermes_assets.lib.storage.local_storage import LocalStorage
from tests.support.processes import dead_pid, zombie

KINDS = ("local", "file")


def make(kind: str, tmp_path, modes: FileModes = local_storage.PRIVATE) -> local_storage.Storage:
    root = tmp_path / "wh"
    if kind == "local":
        return open_storage(str(root), modes=modes)
    return open_storage(root.as_uri(), spool=str(tmp_path / "spool"), modes=modes)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_path_is_local_and_a_uri_goes_through_pyarrow(tmp_path):
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    assert isinstance(open_storage("~/wh"), LocalStorage)
    assert isinstance(open_storage("C:\\wh"), LocalStorage)  # a drive letter is not a scheme
    s3 = open_storage("s3://bucket/prefix?region=us-east-1")
    assert isinstance(s3, ArrowStorage) and not s3.local and not s3.cheap_listing
    assert s3.root == "bucket/prefix" and s3.location("bucket/prefix/x") == "s3://bucket/prefix/x"
    local_uri = open_storage((tmp_path / "wh").as_uri())
    assert isinstance(local_uri, ArrowStorage) and local_uri.local
    assert local_uri.location(local_uri.join(local_uri.root, "x")) == str(tmp_path / "wh" / "x")


@pytest.mark.parametrize("kind", KINDS)
def test_put_replaces_a_file_whole_with_private_modes(kind, tmp_path):
    st = make(kind, tmp_path)
    path = st.join(st.root, "ds", "day=2026-06-01", "part-0.parquet")
    with st.lock("ds/day=2026-06-01"):  # as a write does: on disk the lock creates the day's folder
        st.put(path, pa.py_buffer(b"first"))
        st.put(path, pa.py_buffer(b"second version"))
    assert st.read_bytes(path).to_pybytes() == b"second version"
    assert mode(path) == 0o600 and mode(os.path.dirname(path)) == 0o700
    # nothing but the file (and, on disk, the lock): no temp file left beside it
    left = {"part-0.parquet", ".lock"} if kind == "local" else {"part-0.parquet"}
    assert set(os.listdir(os.path.dirname(path))) == left
    assert st.exists(path) and not st.exists(path + ".nope")
    assert st.read_bytes(path + ".nope") is None
    with st.open_input(path) as f:
        assert f.size() == len(b"second version")
    with pytest.raises(FileNotFoundError):
        st.open_input(path + ".nope")
    st.delete(path)
    assert not st.exists(path)


@pytest.mark.parametrize("kind", KINDS)
def test_the_group_modes_are_given_whatever_the_umask(kind, tmp_path):
    st = make(kind, tmp_path, FileModes.named("group"))
    path = st.join(st.root, "ds", "day=2026-06-01", "part-0.parquet")
    old = os.umask(0o077)
    try:
        with st.lock("ds/day=2026-06-01"):
            st.put(path, pa.py_buffer(b"x"))
    finally:
        os.umask(old)
    assert mode(path) == 0o640 and mode(os.path.dirname(path)) == 0o750
    os.chmod(path, 0o666)
    st.fix_modes(os.path.dirname(path))
    assert mode(path) == 0o640


@pytest.mark.parametrize("kind", KINDS)
def test_folders_holding_names_only_folders_with_the_file(kind, tmp_path):
    st = make(kind, tmp_path)
    base = tmp_path / "wh" / "ds"
    for day, name in (("day=1", "part-0.parquet"), ("day=2", ".lock"), ("day=3", "part-0.parquet")):
        (base / day).mkdir(parents=True)
        (base / day / name).write_bytes(b"")
    assert sorted(st.folders_holding(st.join(st.root, "ds"), "part-0.parquet")) == ["day=1", "day=3"]
    assert st.folders_holding(st.join(st.root, "nothing"), "part-0.parquet") == []


@pytest.mark.parametrize("kind", KINDS)
def test_put_file_puts_a_finished_file_in_place_and_keeps_it(kind, tmp_path):
    st = make(kind, tmp_path)
    source = tmp_path / "staged.parquet"
    source.write_bytes(b"encoded once")
    os.chmod(source, 0o644)
    path = st.join(st.root, "ds", "day=2026-06-01", "part-0.parquet")
    with st.lock("ds/day=2026-06-01"):
        st.put_file(path, str(source))
    assert st.read_bytes(path).to_pybytes() == b"encoded once" and source.exists()
    assert mode(path) == 0o600
    if kind == "local":  # no copy: the staged file itself, linked into the day's folder
        assert os.path.samefile(source, path)


@pytest.mark.parametrize("kind", KINDS)
def test_a_pin_holds_while_the_file_is_the_one_read_and_breaks_when_it_is_replaced(kind, tmp_path):
    st = make(kind, tmp_path)
    path = st.join(st.root, "ds", "day=2026-06-01", "part-0.parquet")
    with st.lock("ds/day=2026-06-01"):
        st.put(path, pa.py_buffer(b"v1"))
    (tmp_path / "pins").mkdir()
    data, pin = st.read_pinned(path, str(tmp_path / "pins" / "a.pin"))
    assert data.to_pybytes() == b"v1" and st.still_current(path, pin)
    with st.lock("ds/day=2026-06-01"):
        st.put(path, pa.py_buffer(b"v1"))  # the same bytes, written again: another file
    assert not st.still_current(path, pin)
    st.delete(path)
    assert not st.still_current(path, pin)
    assert st.read_pinned(path, str(tmp_path / "pins" / "b.pin")) is None  # no file


def test_an_object_store_cannot_pin_and_opens_no_client_to_say_so(tmp_path):
    s3 = open_storage("s3://bucket/prefix?endpoint_override=127.0.0.1:1")
    assert s3.read_pinned("bucket/prefix/x", str(tmp_path / "x.pin")) is None
    assert s3._fs is None


def test_a_pin_across_filesystems_is_refused_not_faked(tmp_path, monkeypatch):
    st = make("local", tmp_path)
    path = st.join(st.root, "f")
    os.makedirs(st.root)
    st.put(path, pa.py_buffer(b"x"))

    def no_links(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    assert st.read_pinned(path, str(tmp_path / "x.pin")) is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_day_lock_is_exclusive(kind, tmp_path):
    st = make(kind, tmp_path)
    order: list[str] = []
    held = threading.Event()

    def first():
        with st.lock("ds/day=2026-06-01"):
            held.set()
            time.sleep(0.3)
            order.append("first out")

    t = threading.Thread(target=first)
    t.start()
    held.wait()
    with st.lock("ds/day=2026-06-01"):
        order.append("second in")
    t.join()
    assert order == ["first out", "second in"]


def test_a_uri_storage_travels_to_a_worker_without_its_client(tmp_path):
    st = make("file", tmp_path)
    _ = st.fs  # opened here
    copy = pickle.loads(pickle.dumps(st))
    assert copy._fs is None and copy.root == st.root and copy.uri == st.uri
    assert isinstance(pickle.loads(pickle.dumps(make("local", tmp_path))), LocalStorage)


def test_s3_uploads_are_one_request_unless_the_uri_says_otherwise():
    assert arrow_storage._with_one_request_uploads("s3://b/p") == "s3://b/p?allow_delayed_open=true"
    assert arrow_storage._with_one_request_uploads("s3://b/p?region=x") == "s3://b/p?region=x&allow_delayed_open=true"
    assert arrow_storage._with_one_request_uploads("s3://b/p?allow_delayed_open=false").endswith("=false")
    assert arrow_storage._with_one_request_uploads("gs://b/p") == "gs://b/p"


def test_a_default_spool_of_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(arrow_storage.tempfile, "gettempdir", lambda: str(tmp_path))
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tmp_path / f"hermes_assets-spool-{os.getuid()}")
    st = open_storage("s3://bucket/prefix")
    with pytest.raises(PermissionError, match="HERMES_ASSETS_SPOOL"):
        st.make_spool_dirs(os.path.join(st.spool, "locks"))


class _MoveHook:
    """A pyarrow filesystem whose next rename first runs ``before`` (another writer's whole put)."""

    def __init__(self, fs, before):
        self._fs, self._before = fs, before

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def move(self, src, dest):
        before, self._before = self._before, None
        if before is not None:
            before()
        return self._fs.move(src, dest)


@pytest.mark.parametrize("kind", KINDS)
def test_two_hosts_replacing_one_file_of_a_shared_folder_never_share_a_temp_file(kind, tmp_path, monkeypatch):
    """Hosts sharing a folder replace its shared files (a day's analytics) with no lock between
    them: each writes its own temp file (its host, pid and a random part in the name) and never
    removes the other's, so both replaces succeed and the file is one whole version."""
    root = tmp_path / "wh"

    def host(label: str) -> local_storage.Storage:
        uri = str(root) if kind == "local" else root.as_uri()
        return open_storage(uri, spool=str(tmp_path / f"spool-{label}"), owner=label)

    alpha, beta = host("alpha"), host("beta")
    path = alpha.join(alpha.root, "ds", "day=2026-06-01", "part-0.parquet")
    os.makedirs(os.path.dirname(path) if kind == "local" else alpha.location(path).rpartition("/")[0])
    first, second = b"alpha's whole file, the longer of the two", b"beta's file"

    def beta_writes_meanwhile():
        beta.put(path, pa.py_buffer(second))

    # alpha's temp file is complete; beta replaces the file before alpha's rename
    if kind == "local":
        real, hook = os.replace, [beta_writes_meanwhile]

        def replace(src, dst, *args, **kwargs):
            if hook and str(src).endswith(".tmp"):
                hook.pop()()
            return real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", replace)
    else:
        alpha._fs = _MoveHook(alpha.fs, beta_writes_meanwhile)
    alpha.put(path, pa.py_buffer(first))
    assert alpha.read_bytes(path).to_pybytes() == first  # alpha renamed last: its file, whole
    folder = os.path.dirname(alpha.location(path))
    assert [n for n in os.listdir(folder) if n.endswith(".tmp")] == []

    names = {local_storage.local_files.temp_name(path, "alpha") for _ in range(3)}
    assert len(names) == 3 and all(".alpha." in n for n in names)
    # a temp file of another host (its pid dead here, which says nothing of it) stays through this
    # host's writes, and so does a live writer's of this host; its own dead writers' ones go
    pid = dead_pid()
    others = [
        f"{folder}/.part-0.parquet.beta.{pid}.0a.tmp",
        f"{folder}/.part-0.parquet.alpha.x.{pid}.0a.tmp",
        f"{folder}/.part-0.parquet.alpha.{os.getppid()}.0a.tmp",
    ]
    dead = f"{folder}/.part-0.parquet.alpha.{pid}.0a.tmp"
    for leftover in (*others, dead):
        with open(leftover, "wb") as f:
            f.write(b"half")
    monkeypatch.undo()
    alpha.put(path, pa.py_buffer(second))
    assert all(os.path.exists(p) for p in others) and not os.path.exists(dead)


@pytest.mark.slow
def test_a_replace_removes_only_the_temp_files_of_this_hosts_dead_writers(tmp_path):
    """``atomic_write`` needs no lock around it to be safe for another writer of the same host:
    it removes a temp file of its target only when the pid in its name is no live process here
    (reaped, or a zombie), so a writer still running (another process, another thread of this
    one) keeps its temp file until its own rename."""
    folder = tmp_path / "day"
    folder.mkdir()
    path = str(folder / "part-0.parquet")
    child = zombie()
    try:
        live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            temps = {
                "reaped": f".part-0.parquet.alpha.{dead_pid()}.0a.tmp",
                "zombie": f".part-0.parquet.alpha.{child.pid}.0b.tmp",
                "live": f".part-0.parquet.alpha.{live.pid}.0c.tmp",
                "this process": f".part-0.parquet.alpha.{os.getpid()}.0d.tmp",
                "another file's": f".part-0.parquet.tmp.alpha.{dead_pid()}.0e.tmp",
            }
            for name in temps.values():
                (folder / name).write_bytes(b"half")
            local_files.atomic_write(path, pa.py_buffer(b"whole"), owner="alpha")
            left = {what for what, name in temps.items() if (folder / name).exists()}
            assert left == {"live", "this process", "another file's"}
            assert (folder / "part-0.parquet").read_bytes() == b"whole"
        finally:
            live.kill()
            live.wait()
    finally:
        child.wait()


def test_a_storage_gives_a_folder_its_modes_once_while_it_is_there(tmp_path, monkeypatch):
    """The day's lock, the write and the modes of one file each ask for the day's folders: a local
    storage gives a folder its modes the first time, not again while it is there; a folder made
    again (removed meanwhile) gets them again; and the next storage (the next step) gives every
    folder its modes once more, closing what was opened since."""
    st = make("local", tmp_path)
    day = os.path.join(st.root, "ds", "day=2026-06-01")
    chmods: list[str] = []
    chmod_dir = local_files.chmod_dir
    monkeypatch.setattr(
        local_files, "chmod_dir", lambda folder, modes: (chmods.append(folder), chmod_dir(folder, modes))
    )
    path = os.path.join(day, "part-0.parquet")
    for i in range(3):
        with st.lock("ds/day=2026-06-01"):
            read = st.read_versioned(path)
            assert st.put_if(path, pa.py_buffer(b"x" * (i + 1)), None if read is None else read[1])
            st.fix_modes(day)
    assert st.read_bytes(path).to_pybytes() == b"xxx" and mode(path) == 0o600
    # once each (the day's, the dataset's and the root), not for each way a write asks, nor per write
    assert (chmods.count(day), chmods.count(os.path.dirname(day)), chmods.count(st.root)) == (1, 1, 1)
    with st.lock("ds/day=2026-06-02"):  # another day: its own folder, not those above it again
        pass
    assert chmods[-1] == os.path.join(st.root, "ds", "day=2026-06-02") and chmods.count(st.root) == 1
    os.chmod(day, 0o755)
    os.unlink(os.path.join(day, "part-0.parquet"))
    os.unlink(os.path.join(day, local_storage.LOCK_FILE))
    os.rmdir(day)
    chmods.clear()
    with st.lock("ds/day=2026-06-01"):  # made again: given its modes again
        pass
    assert day in chmods and mode(day) == 0o700
    os.chmod(day, 0o755)
    with st.lock("ds/day=2026-06-01"):  # still there: left as it is by this storage
        pass
    assert mode(day) == 0o755
    with make("local", tmp_path).lock("ds/day=2026-06-01"):  # the next step's storage closes it
        pass
    assert mode(day) == 0o700


@pytest.mark.parametrize("kind", KINDS)
def test_files_under_lists_only_the_files_named(kind, tmp_path):
    st = make(kind, tmp_path)
    base = st.join(st.root, "ds")
    for rel in ("day=1/host=a/part-0.parquet", "day=1/host=a/.read_at", "day=1/.lock", "day=2/part-0.parquet"):
        path = st.join(base, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"x")
    everything = {f.path for f in st.files_under(base, depth=3)}
    assert everything == {"day=1/host=a/part-0.parquet", "day=1/host=a/.read_at", "day=1/.lock", "day=2/part-0.parquet"}
    named = st.files_under(base, depth=3, name="part-0.parquet")
    assert {f.path for f in named} == {"day=1/host=a/part-0.parquet", "day=2/part-0.parquet"}
    assert all(f.size == 1 and f.mtime_ns for f in named)
    assert st.files_under(base, depth=2, name="part-0.parquet")[0].path == "day=2/part-0.parquet"


def test_a_flush_of_many_folders_syncs_them_several_at_a_time(tmp_path, monkeypatch):
    """Each folder synced once, on threads of their own, :data:`SYNC_THREADS` at a time (their waits
    on the disk shared); a folder removed since is skipped, and an error is raised once every
    folder was tried."""
    seen: list[tuple[str, str]] = []
    sync = local_files._fsync_dir_now

    def recorded(folder: str) -> None:
        seen.append((folder, threading.current_thread().name))
        sync(folder)

    monkeypatch.setattr(local_files, "_fsync_dir_now", recorded)
    folders = [tmp_path / f"day={i:02d}" for i in range(12)]
    syncs = local_files.FolderSyncs()
    for folder in folders:
        folder.mkdir()
        syncs.add(str(folder))
    syncs.add(str(tmp_path / "removed since"))
    assert syncs.flush() == 13 and syncs.flush() == 0
    assert sorted(f for f, _ in seen) == sorted(map(str, [*folders, tmp_path / "removed since"]))
    assert all(thread != threading.main_thread().name for _, thread in seen)
    # an error: raised, once every other folder was synced
    seen.clear()
    failing = str(folders[3])

    def failed(folder: str) -> None:
        if folder == failing:
            raise PermissionError(folder)
        recorded(folder)

    monkeypatch.setattr(local_files, "_fsync_dir_now", failed)
    for folder in folders:
        syncs.add(str(folder))
    with pytest.raises(PermissionError):
        syncs.flush()
    assert sorted(f for f, _ in seen) == sorted(str(f) for f in folders if str(f) != failing)


def test_a_flush_of_few_folders_tries_each_before_raising(tmp_path, monkeypatch):
    """Fewer folders than :data:`SYNC_THREADS`, synced one after the other: a failed sync is raised
    once the others were synced, as with many."""
    seen: list[str] = []
    folders = [str(tmp_path / name) for name in ("a", "b", "c")]

    def failed(folder: str) -> None:
        if folder == folders[0]:
            raise PermissionError(folder)
        seen.append(folder)

    monkeypatch.setattr(local_files, "_fsync_dir_now", failed)
    syncs = local_files.FolderSyncs()
    for folder in folders:
        syncs.add(folder)
    with pytest.raises(PermissionError):
        syncs.flush()
    assert seen == folders[1:]


def test_a_flush_on_one_thread_syncs_each_folder_on_the_callers_thread(tmp_path, monkeypatch):
    """``threads=1`` (a day's folders, synced on the thread that wrote them): each folder once, one
    after the other, none on a thread of its own."""
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(local_files, "_fsync_dir_now", lambda f: seen.append((f, threading.current_thread().name)))
    syncs = local_files.FolderSyncs()
    folders = [str(tmp_path / f"day={i:02d}") for i in range(6)]
    for folder in [*folders, folders[0]]:
        syncs.add(folder)
    assert syncs.flush(threads=1) == 6
    assert seen == [(folder, threading.current_thread().name) for folder in folders]


def test_folders_synced_together_once_each_when_the_block_flushes(tmp_path, monkeypatch):
    """A block that writes many files: each file's bytes synced before its rename (whole or not at
    all, as always), their folders synced once each when the block flushes or ends, on the
    threads that run with the block's syncs too; outside a block, at once."""
    synced: list[str] = []
    files_synced: list[int] = []
    monkeypatch.setattr(local_files, "_fsync_dir_now", synced.append)
    fsync = os.fsync
    monkeypatch.setattr(local_files.os, "fsync", lambda fd: (files_synced.append(fd), fsync(fd)))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    with local_files.folder_syncs_deferred() as syncs:
        local_files.atomic_write(str(a / "1"), pa.py_buffer(b"1"))
        local_files.atomic_write(str(a / "2"), pa.py_buffer(b"2"))
        assert local_files.create_exclusive(str(b / "1"), pa.py_buffer(b"3"))
        worker = threading.Thread(target=local_files.deferring_to, args=(syncs, local_files.delete, str(a / "2")))
        worker.start()
        worker.join()
        assert (a / "1").read_bytes() == b"1" and (b / "1").read_bytes() == b"3" and not (a / "2").exists()
        assert synced == [] and len(files_synced) == 3  # every file's bytes: at once
        assert syncs.flush() == 2 and synced == [str(a), str(b)]
        local_files.atomic_write(str(b / "2"), pa.py_buffer(b"4"))
        other = threading.Thread(target=local_files.fsync_dir, args=(str(a),))  # not the block's: at once
        other.start()
        other.join()
        assert synced == [str(a), str(b), str(a)]
    assert synced == [str(a), str(b), str(a), str(b)]  # the rest when the block ends
    local_files.fsync_dir(str(a))
    assert synced[-1] == str(a) and len(synced) == 5
