"""Prefect fixtures: one temporary Prefect server for the session (Prefect's
own ``prefect_test_harness``), shared with child processes through
``PREFECT_API_URL`` so every run, in whatever process, reports to it and
the tests read final states back from it.

Leases live in a SQLite file per test, which the test process and its
children share (``LEASE_STORE_URL``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # flows_for_tests and helpers, for this process

from prefect_helpers import ROOT, Child

# Before Prefect is imported: a quieter test server that starts faster
# (no UI, no telemetry, no scheduling services these tests do not use).
for _name, _value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_UI_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_FOREMAN_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_ENABLED": "false",
}.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        url = PREFECT_API_URL.value()
        assert url, "the Prefect test harness did not set an API URL"
        yield url


@pytest.fixture
def coord(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The directory bodies and the test coordinate through."""
    d = tmp_path / "coord"
    d.mkdir()
    monkeypatch.setenv("LEASE_TEST_DIR", str(d))
    return d


@pytest.fixture
def lease_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite://{tmp_path}/leases.db"
    monkeypatch.setenv("LEASE_STORE_URL", url)
    return url


@pytest.fixture(scope="session")
def forkserver(prefect_api: str) -> Any:
    """A forkserver that has imported Prefect and the test flows, with the
    test server's API URL in its environment (Prefect reads its settings
    at import)."""
    import multiprocessing

    os.environ["PREFECT_API_URL"] = prefect_api
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["run_flow"])
    return ctx


@pytest.fixture
def child_env(prefect_api: str, coord: Path, lease_url: str) -> dict[str, str]:
    # Processes the tests start (serve(), the engine, the runs they start in
    # turn) import lease_integrations from this checkout, not from wherever the
    # environment's editable install points (another worktree).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {"PREFECT_API_URL": prefect_api, "LEASE_TEST_DIR": str(coord),
            "LEASE_STORE_URL": lease_url, "PYTHONPATH": path}


@pytest.fixture
def spawn(forkserver: Any, child_env: dict[str, str], tmp_path: Path
          ) -> Iterator[Callable[..., Child]]:
    """Start ``flows_for_tests.<flow>(**params)`` in a child process."""
    children: list[Child] = []

    def start(flow: str, **params: Any) -> Child:
        n = len(children)
        child = Child(forkserver, flow, params, child_env, tmp_path / f"child-{n}-{flow}.log",
                      tmp_path / f"result-{n}-{flow}.json")
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()


