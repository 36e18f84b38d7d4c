"""Shared fixtures: every store the project supports, on real servers that the
test run starts itself (see tests/servers/)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from lease_integrations import LeaseStore, connect

pytest_plugins = ["servers.redis_server", "servers.redis_topologies", "servers.postgres_server",
                  "servers.mongo_server", "servers.s3_server"]

#: "redis-cluster" is three Redis masters (servers/redis_topologies.py): the
#: conformance suite runs on it; the race test adds it in tests/race/conftest.py.
#: "s3" is a bucket on moto's S3 server (servers/s3_server.py); the race test
#: adds it too (the safety suites' TCP proxy does not speak HTTP).
ALL_STORES = ("memory", "sqlite", "redis", "redis-cluster", "postgres", "mongo", "s3")
#: Stores that more than one process can share (the memory store cannot).
SHARED_STORES = ("sqlite", "redis", "postgres", "mongo")


def store_url_for(request: pytest.FixtureRequest, kind: str, tmp_path: os.PathLike[str]) -> str:
    if kind == "memory":
        return f"memory://test-{uuid.uuid4().hex}"
    if kind == "sqlite":
        return f"sqlite://{tmp_path}/leases.db"
    url: str = request.getfixturevalue(f"{kind.replace('-', '_')}_url")
    return url


@pytest.fixture(params=ALL_STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    return store_url_for(request, request.param, tmp_path)


@pytest.fixture(params=SHARED_STORES)
def shared_store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    return store_url_for(request, request.param, tmp_path)


@pytest.fixture
def store(store_url: str) -> Iterator[LeaseStore]:
    s = connect(store_url)
    yield s
    s.close()


@pytest.fixture
def key() -> str:
    """A key no other test uses, so tests can share one server."""
    return f"test-{uuid.uuid4().hex[:12]}"
