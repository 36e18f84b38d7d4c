"""The deployment path: runs created from a deployment and executed by
Prefect's runner (``serve()``) or by the flow engine directly, as a worker
does. Neither goes through ``Flow.__call__``, so passing these proves the
lease is taken inside the flow function. A deployed run that loses its lease
is ended with its task runs and ends Crashed, never Completed."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import flows_for_tests as ff
import pytest
from prefect_helpers import (
    HERE,
    break_when_working,
    deployment_in_pool,
    last_work,
    run_states,
    ticks,
    wait_until,
)

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, connect

#: The defaults a @leased_flow's lock gets from its ttl: heartbeat ttl/3,
#: margin ttl/5, grace margin/4.
HEARTBEAT, GRACE = ff.TTL / 3, ff.TTL / 5 / 4
ENGINE_WAIT = 240.0


def _deployment_id(name: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        try:
            return client.read_deployment_by_name(name).id
        except Exception:
            return None


@contextmanager
def _serving(child_env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """serve_flows.py in a process of its own (Prefect's runner), until the block ends."""
    env = {**os.environ, **child_env, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, str(HERE / "serve_flows.py")], env=env,
                                  stdout=out, stderr=subprocess.STDOUT, cwd=str(HERE))
    try:
        yield server
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def test_served_deployment_runs_take_the_lease(
    child_env: dict[str, str], coord: Path, lease_url: str, tmp_path: Path
) -> None:
    from prefect.deployments import run_deployment

    with _serving(child_env, tmp_path / "serve.log") as server:
        deployment_id = wait_until(lambda: _deployment_id("deployed/leased"), 120,
                                   "serve() to register the deployment")
        lock = LeaseLock(connect(lease_url), "deployed", ttl=5.0)
        with lock.hold() as held:
            busy = run_deployment("deployed/leased", parameters={"label": "busy"},
                                  timeout=120, poll_interval=0.5)
        assert busy.state is not None and busy.state.is_cancelled(), (
            busy.state, (tmp_path / "serve.log").read_text()[-4000:])
        assert held.holder in (busy.state.message or "")
        assert not list(coord.glob("deployed-*.json"))

        free = run_deployment("deployed/leased", parameters={"label": "free"},
                              timeout=120, poll_interval=0.5)
        assert free.state is not None and free.state.is_completed(), free.state
        (record_file,) = coord.glob("deployed-*.json")
        record = json.loads(record_file.read_text())
        assert record["label"] == "free"
        assert record["token"] > held.token
        assert record["meta"]["deployment_id"] == str(deployment_id)
        assert record["meta"]["flow_run_id"] == str(free.id)
        assert record["meta"]["pid"] != os.getpid() and record["meta"]["pid"] != server.pid
        # Runs start in a fresh process whose main thread runs the flow: that
        # process is what fail-stop ends on loss, and nothing else with it.
        assert record["thread"] == "MainThread"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _assert_deployed_run_stopped(coord: Path, record: dict[str, Any], run_id: Any,
                                 what: str) -> Any:
    """All four task runs stopped within one heartbeat + grace of the loss,
    the run's process is gone, and the run ended Crashed, never Completed,
    with our stop hook's report among its states. Returns the final state."""
    tasks = {f"task{i}" for i in range(4)}
    state = wait_until(lambda: (s := run_states(run_id)[0]) is not None and s.is_final() and s,
                       60, "the run to reach a final state")
    lost, last = last_work(coord, what, HEARTBEAT + GRACE)
    assert last <= lost + HEARTBEAT + GRACE, (last - lost, ticks(coord)[-5:])
    assert {who for _, who in ticks(coord)} == tasks
    assert not list(coord.glob("exited-*")), "the body ran to its end"
    wait_until(lambda: not _alive(record["pid"]), 10, "the run's process to be gone")
    count = len(ticks(coord))
    time.sleep(GRACE + 0.5)
    assert len(ticks(coord)) == count, "work went on after the process ended"
    _, history = run_states(run_id)
    print(f"{what}: final state {state.type.value}: {state.message}")
    assert state.is_crashed() or state.is_failed(), state
    assert not [s for s in history if s.is_completed()], history
    assert [s for s in history if s.is_crashed() and "was lost" in (s.message or "")], history
    return state


@pytest.mark.timeout(900)
def test_served_run_that_loses_its_lease_is_ended_with_its_tasks_and_crashes(
    child_env: dict[str, str], coord: Path, lease_url: str, tmp_path: Path
) -> None:
    """Issue 23, table 1, deployed: ``fan_out`` (four thread-pool task runs)
    started by serve()'s runner, its lease broken from outside."""
    from prefect.deployments import run_deployment

    with _serving(child_env, tmp_path / "serve.log"):
        wait_until(lambda: _deployment_id("fan-out/loss"), ENGINE_WAIT,
                   "serve() to register the deployment")
        run = run_deployment("fan-out/loss", timeout=0)
        record = break_when_working(coord, lease_url, "fan-out", {f"task{i}" for i in range(4)})
        assert record["run"] == str(run.id)
        state = _assert_deployed_run_stopped(coord, record, run.id, "served deployment")
        assert state.is_crashed(), state
        wait_until(lambda: f"status code: {LEASE_LOST_EXIT_STATUS}" in
                   (tmp_path / "serve.log").read_text(errors="replace"), 30,
                   "the runner to log the run's exit status")


@pytest.mark.timeout(900)
def test_worker_command_run_that_loses_its_lease_exits_75_and_crashes(
    child_env: dict[str, str], coord: Path, lease_url: str, tmp_path: Path
) -> None:
    """What a process worker runs for a deployment's flow run (``python -m
    prefect.engine``): the process exits with LEASE_LOST_EXIT_STATUS, and, with
    no runner watching here, the Crashed state can only come from our stop hook."""
    from prefect.client.orchestration import get_client

    _, deployment_id = deployment_in_pool("process", ff.fan_out, "flows_for_tests.py:fan_out")
    with get_client(sync_client=True) as client:
        run = client.create_flow_run_from_deployment(deployment_id)
    with open(tmp_path / "engine.log", "wb") as out:
        engine = subprocess.Popen([sys.executable, "-m", "prefect.engine"], cwd=str(HERE),
                                  env={**os.environ, **child_env,
                                       "PREFECT__FLOW_RUN_ID": str(run.id)},
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        record = break_when_working(coord, lease_url, "fan-out", {f"task{i}" for i in range(4)})
        assert record["run"] == str(run.id) and record["pid"] == engine.pid
        assert engine.wait(ENGINE_WAIT) == LEASE_LOST_EXIT_STATUS, (
            (tmp_path / "engine.log").read_text(errors="replace")[-4000:])
        state = _assert_deployed_run_stopped(coord, record, run.id, "worker command")
        assert state.is_crashed() and "was lost" in (state.message or ""), state
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait(10)


@pytest.mark.parametrize("flow_name", ["deployed", "deployed_async"])
def test_engine_run_of_a_created_flow_run_takes_the_lease(
    prefect_api: str, coord: Path, lease_url: str, flow_name: str
) -> None:
    """What a worker does: create the run through the API, then hand it to
    the flow engine, which calls ``flow.fn`` directly."""
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow

    flow = getattr(ff, flow_name)

    def engine(run: Any) -> Any:
        outcome = run_flow(flow, flow_run=run, return_type="state")
        return asyncio.run(outcome) if inspect.isawaitable(outcome) else outcome

    with get_client(sync_client=True) as client:
        busy_run = client.create_flow_run(flow, parameters={"label": "engine-busy"})
        free_run = client.create_flow_run(flow, parameters={"label": "engine-free"})
    lock = LeaseLock(connect(lease_url), "deployed", ttl=5.0)
    with lock.hold() as held:
        busy = engine(busy_run)
    assert busy.is_cancelled() and held.holder in (busy.message or "")
    free = engine(free_run)
    assert free.is_completed()
    (record_file,) = coord.glob("deployed-*.json")
    assert json.loads(record_file.read_text())["meta"]["flow_run_id"] == str(free_run.id)


@pytest.mark.timeout(900)
def test_a_served_run_supersedes_another_which_ends_cancelled_with_exit_75(
    child_env: dict[str, str], coord: Path, lease_url: str, tmp_path: Path
) -> None:
    """``fenced_writer`` (``on_busy="supersede"``) served: a second deployment
    run replaces the first; the runner sees the first exit 75 after it was
    reported Cancelled, and its Crashed proposal does not undo that."""
    from prefect.deployments import run_deployment

    def bodies() -> dict[str, Any]:
        return {r["run"]: r for r in (json.loads(p.read_text())
                                      for p in coord.glob("body-*.json"))}

    with _serving(child_env, tmp_path / "serve.log"):
        wait_until(lambda: _deployment_id("fenced-writer/supersede"), ENGINE_WAIT,
                   "serve() to register the deployment")
        first = run_deployment("fenced-writer/supersede", parameters={"region": "eu"},
                               timeout=0)
        wait_until(lambda: str(first.id) in bodies(), ENGINE_WAIT, "the first run's body")
        second = run_deployment("fenced-writer/supersede", parameters={"region": "eu"},
                                timeout=0)
        new = wait_until(lambda: bodies().get(str(second.id)), ENGINE_WAIT,
                         "the second run's body")
        assert new["others_running"] == [] and new["token"] > bodies()[str(first.id)]["token"]
        (coord / "release").write_text("")
        done = wait_until(lambda: (s := run_states(second.id)[0]) is not None and s.is_final()
                          and s, 120, "the second run to end")
        assert done.is_completed(), done
        wait_until(lambda: f"status code: {LEASE_LOST_EXIT_STATUS}" in
                   (tmp_path / "serve.log").read_text(errors="replace"), 60,
                   "the runner to log the first run's exit status")
        state, history = run_states(first.id)
        assert state is not None and state.is_cancelled(), (state, history)
        assert f"superseded by flow run {new['meta']['flow_run_name']!r} ({second.id}" in (
            state.message or ""), state.message
        assert not [s for s in history if s.is_completed()], history
