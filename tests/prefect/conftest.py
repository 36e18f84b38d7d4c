"""Prefect fixtures: one temporary Prefect server for the session (Prefect's
own ``prefect_test_harness``), shared with child processes through
``PREFECT_API_URL`` so every run, in whatever process, reports to it and
the tests read final states back from it.

Leases live in a SQLite file per test, which the test process and its
children share (``LEASE_STORE_URL``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # flows_for_tests, for the test process too


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
    """A child process running one flow (run_flow.py) or any script."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, out: Path | None) -> None:
        self.log = log
        self.out = out
        with open(log, "wb") as sink:
            self.proc = subprocess.Popen(args, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                         cwd=str(HERE))

    def result(self, timeout: float = 90.0) -> dict[str, Any]:
        assert self.out is not None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"child did not finish; log:\n{self.output()}") from None
        if not self.out.exists():
            raise AssertionError(f"child exited {self.proc.returncode} without a result; "
                                 f"log:\n{self.output()}")
        data: dict[str, Any] = json.loads(self.out.read_text())
        return data

    def done(self) -> bool:
        return self.out is not None and self.out.exists()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def child_env(prefect_api: str, coord: Path, lease_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PREFECT_API_URL=prefect_api, LEASE_TEST_DIR=str(coord), LEASE_STORE_URL=lease_url,
               PYTHONDONTWRITEBYTECODE="1", DO_NOT_TRACK="1")
    return env


@pytest.fixture
def spawn(child_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """Start ``flows_for_tests.<flow>(**params)`` in a child process."""
    children: list[Child] = []

    def start(flow: str, **params: Any) -> Child:
        n = len(children)
        out = tmp_path / f"result-{n}-{flow}.json"
        args = [sys.executable, str(HERE / "run_flow.py"), flow, json.dumps(params), str(out)]
        child = Child(args, child_env, tmp_path / f"child-{n}-{flow}.log", out)
        children.append(child)
        return child

    yield start
    for child in children:
        child.stop(signal.SIGKILL)


def entered(coord: Path) -> list[dict[str, Any]]:
    """The records of every body that got in, in no particular order."""
    return [json.loads(p.read_text()) for p in sorted(coord.glob("entered-*.json"))]


def release(coord: Path) -> None:
    (coord / "release").write_text("")
