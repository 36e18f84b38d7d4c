"""The race test also runs on a three-master Redis Cluster (the fault suites
in tests/safety do not: their TCP proxy stands in front of one server).

Overrides tests/conftest.py's ``shared_store_url`` for this directory: its
SHARED_STORES plus "redis-cluster" (this file cannot import that conftest: both
are modules named ``conftest``)."""

from __future__ import annotations

import os

import pytest

RACE_STORES = ("sqlite", "redis", "postgres", "mongo", "redis-cluster", "s3")


@pytest.fixture(params=RACE_STORES)
def shared_store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/leases.db"
    url: str = request.getfixturevalue(f"{request.param.replace('-', '_')}_url")
    return url
