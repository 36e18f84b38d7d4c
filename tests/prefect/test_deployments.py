"""The deployment path: runs created from a deployment and executed by
Prefect's runner (``serve()``) or by the flow engine directly, as a worker
does. Neither goes through ``Flow.__call__``, so passing these proves the
lease is taken inside the flow function."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import flows_for_tests as ff
import pytest
from prefect_helpers import HERE, wait_until

from lease_integrations import LeaseLock, connect


def _deployment_id(name: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        try:
            return client.read_deployment_by_name(name).id
        except Exception:
            return None


def test_served_deployment_runs_take_the_lease(
    child_env: dict[str, str], coord: Path, lease_url: str, tmp_path: Path
) -> None:
    from prefect.deployments import run_deployment

    env = {**os.environ, **child_env, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen([sys.executable, str(HERE / "serve_flows.py")], env=env,
                              stdout=log, stderr=subprocess.STDOUT, cwd=str(HERE))
    try:
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
        assert record["token"] == held.token + 1
        assert record["meta"]["deployment_id"] == str(deployment_id)
        assert record["meta"]["flow_run_id"] == str(free.id)
        assert record["meta"]["pid"] != os.getpid() and record["meta"]["pid"] != server.pid
        # Runs start in a fresh process whose main thread runs the flow: the
        # loss interrupt there is a signal (see lease_integrations/prefect/flow.py).
        assert record["thread"] == "MainThread"
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        log.close()


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
