"""Helpers for the Prefect tests: bounded polling, child processes running
flows, and reading what the bodies recorded (see flows_for_tests)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
#: The checkout these tests belong to.
ROOT = HERE.resolve().parents[1]


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

    def wait(self, timeout: float = 90.0) -> int | None:
        """The child's exit status, once it has ended (None if it has not)."""
        self.proc.join(timeout)
        code: int | None = self.proc.exitcode
        return code

    def done(self) -> bool:
        return self.out.exists()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(30)


def entered(coord: Path) -> list[dict[str, Any]]:
    """The records of every body that got in, in no particular order."""
    return [json.loads(p.read_text()) for p in sorted(coord.glob("entered-*.json"))]


def release(coord: Path) -> None:
    (coord / "release").write_text("")


def ticks(coord: Path) -> list[tuple[float, str]]:
    """The work log: (wall-clock time, who) per tick, from every thread."""
    path = coord / "ticks"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(float(at), who) for at, who in (line.split() for line in lines if line.strip())]


def lost_at(coord: Path) -> float:
    """When the body's on_lost callback ran: the moment the loss was known."""
    return float((coord / "lost").read_text())


def break_when_working(coord: Path, url: str, key: str, workers: set[str]) -> dict[str, Any]:
    """Once a body holds the lease ``key`` and every one of ``workers`` ticks,
    break the lease as an operator would (``leasectl break``). Returns the
    body's entry record."""
    from lease_integrations import connect

    (record,) = wait_until(lambda: entered(coord), 240, "the body to hold the lease")
    assert record["library"] == str(ROOT), "the run imported another checkout's code"
    wait_until(lambda: workers <= {who for _, who in ticks(coord)}, 60,
               f"{sorted(workers)} to work")
    broken = connect(url).force_release(key, by="test-operator")
    assert broken is not None and broken.token == record["token"], broken
    return record


def last_work(coord: Path, what: str, bound: float) -> tuple[float, float]:
    """(when the loss was known, the last sign of work), printed for the record."""
    lost = lost_at(coord)
    last = max(at for at, _ in ticks(coord))
    print(f"\n{what}: last work {last - lost:+.3f} s after the loss was known "
          f"(bound: heartbeat + grace = {bound:.2f} s)")
    return lost, last


def run_states(flow_run_id: Any) -> tuple[Any, list[Any]]:
    """A flow run's current state and every state it has had, from the API."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        return run.state, list(client.read_flow_run_states(flow_run_id))


def deployment_in_pool(pool_type: str, flow: Any, entrypoint: str) -> tuple[str, Any]:
    """A work pool of ``pool_type`` and a deployment of ``flow`` in it (through
    the API, as ``prefect deploy`` would make it; no worker of that type is
    needed: the test runs what the worker would run)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    pool = f"{pool_type}-{uuid.uuid4().hex[:8]}"
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=pool, type=pool_type))
        flow_id = client.create_flow(flow)
        deployment_id = client.create_deployment(
            flow_id=flow_id, name=f"d-{pool}", entrypoint=entrypoint, path=str(HERE),
            work_pool_name=pool)
    return pool, deployment_id
