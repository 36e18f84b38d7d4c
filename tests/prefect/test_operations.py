"""Prefect under real operations: runs executed as a worker executes them
(``python -m prefect.engine`` for a flow run created from a deployment in a
work pool), cancellation through ``prefect flow-run cancel`` on a served
deployment, and ``with_options``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import flows_for_tests as ff
import pytest
from prefect_helpers import HERE, deployment_in_pool, entered, wait_until

from lease_integrations import LeaseLock, connect

BIN = Path(sys.executable).parent
ENGINE_WAIT = 240.0


def _engine_run(deployment_id: Any, env: dict[str, str], log: Path,
                parameters: dict[str, Any] | None = None) -> tuple[Any, str]:
    """Create a flow run of the deployment and execute it the way every worker
    does: ``python -m prefect.engine`` with the run's id in the environment.
    Returns the run as the API reports it afterwards, and the process output."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.create_flow_run_from_deployment(deployment_id, parameters=parameters or {})
    with open(log, "wb") as out:
        subprocess.run([str(BIN / "python"), "-m", "prefect.engine"], cwd=str(HERE),
                       env={**env, "PREFECT__FLOW_RUN_ID": str(run.id)}, stdout=out,
                       stderr=subprocess.STDOUT, timeout=ENGINE_WAIT, check=False)
    with get_client(sync_client=True) as client:
        return client.read_flow_run(run.id), log.read_text(errors="replace")


def _deployment_exists(name: str) -> bool:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(name)
        except ObjectNotFound:
            return False
    return True


def _run_logs(flow_run_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        return list(client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))))


@pytest.mark.timeout(1200)  # five engine runs, each a fresh Prefect process
def test_worker_run_skips_quietly_and_remote_pools_refuse_the_default(
        child_env: dict[str, str], coord: Path, lease_url: str, tmp_path: Path) -> None:
    env = {**os.environ, **child_env}
    _, process_deployment = deployment_in_pool("process", ff.deployed,
                                                 "flows_for_tests.py:deployed")
    # A skipped run: Cancelled, one INFO line naming the holder, no ERROR anywhere.
    with LeaseLock(connect(lease_url), "deployed", ttl=30.0).hold() as held:
        skipped, out = _engine_run(process_deployment, env, tmp_path / "skip.log")
    assert skipped.state.is_cancelled(), (skipped.state, out)
    assert held.holder in (skipped.state.message or "")
    assert "ERROR" not in out and "Traceback" not in out, out
    logs = _run_logs(skipped.id)
    assert [log for log in logs if log.level >= 40] == []
    naming = [log.message for log in logs if held.holder in log.message and log.level >= 20]
    assert len([m for m in naming if m.startswith("Skipping this run")]) == 1, naming
    assert not list(coord.glob("deployed-*.json"))

    # A kubernetes pool's runs start in separate containers: no store chosen, no run.
    _, remote_deployment = deployment_in_pool("kubernetes", ff.deployed,
                                                "flows_for_tests.py:deployed")
    no_store = {k: v for k, v in env.items() if k != "LEASE_STORE_URL"}
    refused, out = _engine_run(remote_deployment, no_store, tmp_path / "refused.log",
                               {"label": "refused"})
    assert refused.state.is_failed(), (refused.state, out)
    assert "no lease store is configured" in (refused.state.message or "") + out
    assert "LEASE_STORE_URL=" in out and "store=" in out
    assert not list(coord.glob("deployed-*.json"))
    # An explicitly chosen SQLite URL is respected, and the log names it.
    chosen, out = _engine_run(remote_deployment, env, tmp_path / "chosen.log",
                              {"label": "chosen"})
    assert chosen.state.is_completed(), (chosen.state, out)
    assert f"(store: {lease_url} from $LEASE_STORE_URL)" in out
    assert len(list(coord.glob("deployed-*.json"))) == 1


@pytest.mark.timeout(900)
def test_cancelling_a_served_run_releases_its_lease_within_seconds(
        child_env: dict[str, str], coord: Path, lease_url: str, tmp_path: Path) -> None:
    """Cancelling through the API (what ``prefect flow-run cancel`` does: set
    the run's state to Cancelling): the runner sends SIGTERM, the lease is
    released (not left to expire: its ttl is 60 s). Prints the time from the
    cancel request to the release."""
    from prefect.deployments import run_deployment

    env = {**os.environ, **child_env, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    with open(tmp_path / "serve.log", "wb") as log:
        server = subprocess.Popen([sys.executable, str(HERE / "serve_flows.py")], env=env,
                                  stdout=log, stderr=subprocess.STDOUT, cwd=str(HERE))
    try:
        wait_until(lambda: _deployment_exists("cancellable/cancel"), ENGINE_WAIT,
                   "serve() to register the deployment")
        run = run_deployment("cancellable/cancel", parameters={"label": "c"}, timeout=0)
        wait_until(lambda: entered(coord), ENGINE_WAIT, "the served run to hold its lease")
        store = connect(lease_url)
        record = store.get("cancellable")
        assert record is not None and record.held
        from prefect.client.orchestration import get_client
        from prefect.states import Cancelling

        with get_client(sync_client=True) as client:
            started = time.monotonic()
            client.set_flow_run_state(run.id, Cancelling())  # as the CLI does
        after = wait_until(lambda: (r := store.get("cancellable")) and not r.held and r,
                           60.0, "the cancelled run to release its lease")
        elapsed = time.monotonic() - started
        print(f"cancel -> release: {elapsed:.2f} s (ttl 60 s)")
        assert after.state == "released" and after.token == record.token
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def test_with_options_re_derives_the_lease_plan(prefect_api: str, lease_url: str) -> None:
    renamed = ff.named_by_flow.with_options(name="renamed-flow")
    assert renamed.name == "renamed-flow"
    assert renamed() == "renamed-flow"  # the default key follows the new name
    assert ff.named_by_flow() == "named-by-flow"  # the original is unchanged

    tuned = ff.tenant_billing.with_options(key="tuned-{tenant}", ttl=7.0, on_busy="fail",
                                           retries=0, name="tuned-billing")
    plan = tuned.lease_plan
    assert (plan.key.template, plan.ttl, plan.on_busy) == ("tuned-{tenant}", 7.0, "fail")
    assert tuned.retries == 0 and tuned.name == "tuned-billing"
    assert ff.tenant_billing.lease_plan.key.template == "billing-{tenant}"
    with LeaseLock(connect(lease_url), "tuned-acme", ttl=10.0).hold():
        state = tuned(tenant="acme", return_state=True)
    assert state.is_failed() and "tuned-acme" in (state.message or "")
