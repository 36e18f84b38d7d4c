"""Fixtures for the console tests: the real ``leasectl`` script run as a
subprocess, against SQLite (a file in tmp_path) and Redis (a real server)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The console script the package installs; ``-m`` only where it is missing.
SCRIPT = Path(sys.executable).parent / "leasectl"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "lease_integrations.cli"]


@dataclass
class Result:
    code: int
    out: str
    err: str


Leasectl = Callable[..., Result]


def run_leasectl(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run leasectl with a clean environment: no inherited LEASE_STORE_URL
    unless the test sets one."""
    full_env = {k: v for k, v in os.environ.items() if k != "LEASE_STORE_URL"}
    full_env.update(env or {})
    proc = subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120,
                          env=full_env, stdin=subprocess.DEVNULL)
    return Result(proc.returncode, proc.stdout, proc.stderr)


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
