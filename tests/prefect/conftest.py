"""Prefect fixtures: one temporary Prefect server for the session (Prefect's
own ``prefect_test_harness``), shared with child processes through
``PREFECT_API_URL`` so every run, in whatever process, reports to it and
the tests read final states back from it.

Leases live in a SQLite file per test, which the test process and its
children share (``LEASE_STORE_URL``)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # flows_for_tests, for the test process too

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


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
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


class Child:
    """One flow run in its own child process (forked by the forkserver)."""

    def __init__(self, ctx: Any, flow: str, params: dict[str, Any], env: dict[str, str],
                 log: Path, out: Path) -> None:
        import run_flow

        self.log = log
        self.out = out
        log.touch()
        self.proc = ctx.Process(target=run_flow.run_in_child,
                                args=(flow, params, str(out), str(log), env), daemon=True)
        self.proc.start()

    @property
    def pid(self) -> int:
        pid: int = self.proc.pid
        return pid

    def result(self, timeout: float = 90.0) -> dict[str, Any]:
        self.proc.join(timeout)
        if self.proc.is_alive():
            raise AssertionError(f"child did not finish; log:\n{self.output()}")
        if not self.out.exists():
            raise AssertionError(f"child exited {self.proc.exitcode} without a result; "
                                 f"log:\n{self.output()}")
        data: dict[str, Any] = json.loads(self.out.read_text())
        return data

    def done(self) -> bool:
        return self.out.exists()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(30)


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
    return {"PREFECT_API_URL": prefect_api, "LEASE_TEST_DIR": str(coord),
            "LEASE_STORE_URL": lease_url}


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


def entered(coord: Path) -> list[dict[str, Any]]:
    """The records of every body that got in, in no particular order."""
    return [json.loads(p.read_text()) for p in sorted(coord.glob("entered-*.json"))]


def release(coord: Path) -> None:
    (coord / "release").write_text("")
