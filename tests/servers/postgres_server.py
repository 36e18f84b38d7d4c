"""Session fixture ``postgres_url``: a throwaway PostgreSQL cluster made with
``initdb`` in a temp dir and served on a free 127.0.0.1 port, stopped (by PID)
at the end of the session.

Binaries come from ``$LEASE_TEST_PG_BIN`` or the newest
``/usr/lib/postgresql/*/bin``. PostgreSQL refuses to run as root (CI does),
so then the cluster belongs to ``nobody``. ``PgServer`` also stops, pauses
and restarts the server on the same port for the fault tests.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

USER, PASSWORD, DATABASE = "lease_user", "s3cret-pw", "leases_test"
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pg_bin() -> Path | None:
    env = os.environ.get("LEASE_TEST_PG_BIN")
    if env:
        return Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                   key=lambda p: [int(x) for x in Path(p).parent.name.split(".") if x.isdigit()])
    return Path(found[-1]) if found else None


class PgServer:
    """One PostgreSQL cluster; ``start``/``stop``/``pause`` keep the port."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="lease-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._run_as: dict[str, Any] = {}
        if os.getuid() == 0:  # initdb and postgres refuse to run as root
            nobody = pwd.getpwnam("nobody")
            os.chown(self.root, nobody.pw_uid, nobody.pw_gid)
            self._run_as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        self.url = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"
        self.admin_conninfo = f"host={self.root} port={self.port} user=postgres dbname=postgres"

    def init(self) -> None:
        subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
             "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, timeout=120, cwd=self.root, **self._run_as)

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-k", str(self.root), "-c", "listen_addresses=127.0.0.1",
                 "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=200"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                start_new_session=True, **self._run_as)
        try:
            self.wait_ready()
        except BaseException:
            self.stop("immediate")
            raise

    def wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {self.log.read_text()[-2000:]}")
            try:
                psycopg.connect(self.admin_conninfo, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"postgres did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.05)

    def create_user_and_db(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_conninfo, autocommit=True) as conn:
            conn.execute(f"CREATE USER {USER} PASSWORD '{PASSWORD}'")
            conn.execute(f"CREATE DATABASE {DATABASE} OWNER {USER}")

    def stop(self, mode: str = "fast") -> None:
        """Stop by PID: SIGINT is pg_ctl's "fast", SIGQUIT its "immediate"."""
        if self.proc is None:
            return
        sig = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        self.resume()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def processes(self) -> list[int]:
        """The postmaster and its children (backends call setsid(), so they
        are not in the postmaster's process group)."""
        if self.proc is None:
            return []
        pids = [self.proc.pid]
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:
                pids.append(int(Path(stat).parent.name))
        return pids

    def pause(self) -> None:
        """SIGSTOP the postmaster and every backend: the server hangs, as a
        frozen VM would, with its connections still open."""
        for pid in self.processes():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self.processes():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _unavailable(message: str) -> None:
    if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _running_cluster() -> Iterator[PgServer]:
    bindir = pg_bin()
    if bindir is None or not (bindir / "initdb").exists():
        _unavailable("no PostgreSQL binaries (set LEASE_TEST_PG_BIN)")
    assert bindir is not None
    server = PgServer(bindir)
    try:
        server.init()
        server.start()
        server.create_user_and_db()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    yield from _running_cluster()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PgServer) -> str:
    return postgres_server.url


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PgServer]:
    """A cluster of the module's own, for tests that stop, pause or restart it
    (each test leaves it running)."""
    yield from _running_cluster()
