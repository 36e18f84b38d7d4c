"""The servers a benchmark run needs, started on free 127.0.0.1 ports and
stopped by PID when the run ends: the same classes the tests use
(``tests/servers/``), so benchmarks and tests run on identical setups."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from servers.mongo_server import MongoWireServer, mongo_python  # noqa: E402
from servers.postgres_server import PgServer, pg_bin  # noqa: E402
from servers.redis_server import RedisServer  # noqa: E402
from servers.redis_topologies import RedisClusterNodes  # noqa: E402

Log = Callable[[str], None]


@contextmanager
def _running(make: Callable[[Path], Any], prefix: str) -> Iterator[str]:
    """A server of the tests' kind in a fresh directory; yields its URL."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    server = make(directory)
    try:
        server.start()
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def redis_server() -> AbstractContextManager[str]:
    return _running(RedisServer, "lease-bench-redis-")


def redis_cluster() -> AbstractContextManager[str]:
    """Three primaries, every slot assigned: the tests' cluster; yields its URL."""
    return _running(RedisClusterNodes, "lease-bench-cluster-")


@contextmanager
def postgres_server() -> Iterator[str]:
    bindir = pg_bin()
    if bindir is None or not (bindir / "initdb").exists():
        raise RuntimeError("no PostgreSQL binaries (set LEASE_TEST_PG_BIN)")
    server = PgServer(bindir)
    try:
        server.init()
        server.start()
        server.create_user_and_db()
        yield server.url
    finally:
        server.cleanup()


@contextmanager
def mongo_server() -> Iterator[str]:
    python = mongo_python()
    if python is None:
        raise RuntimeError("no MongoDB-wire server: build .venv-mongo (./run setup)")
    server = MongoWireServer(python)
    try:
        server.start()
        yield server.url
    finally:
        server.cleanup()


STARTERS = {"redis": redis_server, "postgres": postgres_server, "mongo": mongo_server}


def start(stack: ExitStack, kinds: list[str], log: Log) -> tuple[dict[str, str], dict[str, str]]:
    """Start each server kind; returns (urls, errors). A server that cannot
    start skips its sections with the reason in the report, not the run."""
    urls: dict[str, str] = {}
    errors: dict[str, str] = {}
    for kind in kinds:
        try:
            urls[kind] = stack.enter_context(STARTERS[kind]())
            log(f"started {kind} at {urls[kind].split('@')[-1]}")
        except Exception as exc:
            errors[kind] = f"{type(exc).__name__}: {exc}"
            log(f"could not start {kind}: {errors[kind]}")
    return urls, errors


def sqlite_url(stack: ExitStack) -> str:
    directory = tempfile.mkdtemp(prefix="lease-bench-sqlite-")
    stack.callback(shutil.rmtree, directory, True)
    return f"sqlite://{os.path.join(directory, 'leases.db')}"
