"""Session fixture ``mongo_url``: mongoeco's MongoDB-wire server (not mongod:
none can be installed here, see docs/development.md) on a free 127.0.0.1 port, run by
``tests/servers/mongo_wire_server.py`` under the Python 3.13 of .venv-mongo
(or ``$LEASE_TEST_MONGO_PYTHON``), stopped by PID at the end of the session.

The session's server keeps its data in memory (mongoeco's MemoryEngine: the
race test runs three times faster than on its SQLiteEngine). Tests that stop
and restart a server use ``private_mongo``, whose data lives in a SQLite file,
so the token counter must survive the restart.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("mongo_wire_server.py")
START_TIMEOUT = 60.0
USER, PASSWORD = "lease_user", "m0ngo-pw"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def mongo_python() -> Path | None:
    env = os.environ.get("LEASE_TEST_MONGO_PYTHON")
    path = Path(env) if env else ROOT / ".venv-mongo" / "bin" / "python"
    return path if path.exists() else None


class MongoWireServer:
    """One wire server; ``stop``/``start`` keep the port, and the data when
    ``persistent`` (a SQLite file)."""

    def __init__(self, python: Path, *, persistent: bool = True) -> None:
        self.python = python
        self.persistent = persistent
        self.root = Path(tempfile.mkdtemp(prefix="lease-mongo-"))
        self.db_path = self.root / "mongo.sqlite"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        # SCRAM-SHA-256 named: the wire server does not advertise its mechanisms,
        # and pymongo's fallback (SCRAM-SHA-1) fails against it.
        self.url = (f"mongodb://{USER}:{PASSWORD}@127.0.0.1:{self.port}/leases_test"
                    "?authSource=admin&authMechanism=SCRAM-SHA-256")

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.python), str(SCRIPT), str(self.port),
                 *([str(self.db_path)] if self.persistent else [])],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True,
                env={**os.environ, "LEASE_TEST_MONGO_AUTH": f"{USER}:{PASSWORD}"})
        try:
            self.wait_ready()
        except BaseException:
            self.stop(kill=True)
            raise

    def wait_ready(self) -> None:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"MongoDB-wire server exited: {self.log.read_text()[-2000:]}")
            client: MongoClient[dict[str, object]] = MongoClient(
                self.url, serverSelectionTimeoutMS=500, connectTimeoutMS=500)
            try:
                client.admin.command("ping")
                return
            except PyMongoError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"MongoDB-wire server did not start: {self.log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)
            finally:
                client.close()

    def stop(self, *, kill: bool = False) -> None:
        """Stop by PID: SIGTERM closes cleanly, SIGKILL as a crash would."""
        if self.proc is None:
            return
        self.resume()
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the server hangs with its connections open."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _unavailable(message: str) -> None:
    if os.environ.get("LEASE_TEST_REQUIRE_ALL") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _running_server(*, persistent: bool) -> Iterator[MongoWireServer]:
    python = mongo_python()
    if python is None:
        _unavailable("no MongoDB-wire server: build .venv-mongo (./run setup) "
                     "or set LEASE_TEST_MONGO_PYTHON")
    assert python is not None
    server = MongoWireServer(python, persistent=persistent)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def mongo_server() -> Iterator[MongoWireServer]:
    yield from _running_server(persistent=False)


@pytest.fixture(scope="session")
def mongo_url(mongo_server: MongoWireServer) -> str:
    return mongo_server.url


@pytest.fixture(scope="module")
def private_mongo() -> Iterator[MongoWireServer]:
    """A MongoDB-wire server of the module's own, for tests that stop, pause or
    restart it (each leaves it running; its SQLite file keeps the data)."""
    yield from _running_server(persistent=True)
