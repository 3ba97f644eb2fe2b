"""A throwaway PostgreSQL cluster on loopback, for tests of the Postgres instance storage.

Debian's server binaries (``/usr/lib/postgresql/<version>/bin``, package
``postgresql``, installed by ``.ci/run``) run ``initdb`` into a fresh folder
and ``pg_ctl start`` on a free port, listening on 127.0.0.1 only, trust
authentication, fsync off. PostgreSQL refuses to run as root: as root the
server runs as the ``postgres`` user (``runuser``), and the folder belongs to
it. :meth:`stop` stops the server (immediate mode) and removes the folder.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.skips import unavailable


def server_bin() -> Path | None:
    """The newest installed server's bin folder, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    def __init__(self, bin_dir: Path, database: str = "dagster"):
        self.bin = bin_dir
        self.port = _free_port()
        self.database = database
        # not under pytest's tmp dir: that one is private to root, and the server runs as postgres
        self.root = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
        self.data = self.root / "data"
        self.as_root = os.geteuid() == 0
        self.user = "postgres" if self.as_root else None

    @property
    def url(self) -> str:
        # the driver named explicitly: SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3, which
        # dagster-postgres does not install (it brings psycopg2)
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def start(self) -> PgCluster:
        os.chmod(self.root, 0o755)
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off -c full_page_writes=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", self.database)
        return self

    def query(self, sql: str) -> list[tuple]:
        import psycopg2

        conn = psycopg2.connect(self.url.replace("+psycopg2", ""))
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()

    def log_tail(self, n: int = 3000) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def pg_cluster():
    """A running throwaway cluster; skipped only off CI when the server is not installed."""
    bin_dir = server_bin()
    if bin_dir is None:
        unavailable("PostgreSQL server is not installed (apt-get install postgresql)")
    cluster = PgCluster(bin_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
