"""Fixtures for the console tests: the real ``leasectl`` script run as a
subprocess, against SQLite (a file in tmp_path) and Redis (a real server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Leasectl, run_leasectl


@pytest.fixture
def leasectl() -> Leasectl:
    return run_leasectl


@pytest.fixture(params=["sqlite", "redis"])
def cli_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL the console and the test (and its helper processes) share."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/leases.db"
    url: str = request.getfixturevalue("redis_url")
    return url
