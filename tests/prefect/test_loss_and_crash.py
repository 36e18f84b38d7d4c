"""A lease broken from outside while the body runs ends the run Failed (sync
flows in the main thread and in a worker thread, async flows); a SIGKILLed
holder's lease is taken by a later run once its TTL has passed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import flows_for_tests as ff
import pytest
from prefect_helpers import entered, wait_until

from lease_integrations import connect


def _break_when_entered(coord: Path, url: str, key: str) -> threading.Thread:
    def breaker() -> None:
        wait_until(lambda: entered(coord), 60, "the body to enter")
        connect(url).force_release(key, by="test-operator")

    thread = threading.Thread(target=breaker, daemon=True)
    thread.start()
    return thread


def _assert_failed_by_loss(state: Any, coord: Path) -> None:
    assert state.is_failed(), (state.type, state.message)
    assert "LeaseLost" in (state.message or "") or "was lost" in (state.message or "")
    assert not list(coord.glob("exited-*")), "the body ran on after its lease was broken"


@pytest.mark.usefixtures("prefect_api")
def test_sync_flow_in_main_thread_is_interrupted(coord: Path, lease_url: str) -> None:
    breaker = _break_when_entered(coord, lease_url, "long-sync")
    state = ff.long_sync(return_state=True)
    breaker.join(10)
    _assert_failed_by_loss(state, coord)


@pytest.mark.usefixtures("prefect_api")
def test_sync_flow_in_worker_thread_is_interrupted(coord: Path, lease_url: str) -> None:
    breaker = _break_when_entered(coord, lease_url, "long-sync")
    states: list[Any] = []
    runner = threading.Thread(target=lambda: states.append(ff.long_sync(return_state=True)))
    runner.start()
    runner.join(60)
    breaker.join(10)
    assert states, "the flow did not finish"
    _assert_failed_by_loss(states[0], coord)
    assert entered(coord)[0]["thread"] != "MainThread"


@pytest.mark.usefixtures("prefect_api")
def test_async_flow_is_cancelled_and_fails(coord: Path, lease_url: str) -> None:
    breaker = _break_when_entered(coord, lease_url, "long-async")
    state = asyncio.run(ff.long_async(return_state=True))
    breaker.join(10)
    _assert_failed_by_loss(state, coord)


def test_sigkilled_holder_is_taken_over_after_its_ttl(
    spawn: Any, coord: Path, lease_url: str
) -> None:
    victim = spawn("long_sync")
    (held,) = wait_until(lambda: entered(coord), 90, "the victim to hold the lease")
    victim.kill()  # SIGKILL: no release, no last renewal
    store = connect(lease_url)
    before = store.get("long-sync")
    assert before is not None and before.token == held["token"]
    assert before.holder == held["holder"]

    result = ff.long_sync_waiter()  # on_busy="wait": gets the lease once it expires
    assert result["token"] == held["token"] + 1
    assert result["holder"] != held["holder"]
    after = store.get("long-sync")
    assert after is not None and after.acquired_at is not None and before.expires_at is not None
    assert after.acquired_at >= before.expires_at, "taken over before the dead holder's ttl"


def test_loss_in_a_child_process_fails_the_run_on_the_server(
    spawn: Any, coord: Path, lease_url: str
) -> None:
    from prefect.client.orchestration import get_client

    child = spawn("long_sync")
    (held,) = wait_until(lambda: entered(coord), 90, "the child to hold the lease")
    broken = connect(lease_url).force_release("long-sync", by="test-operator")
    assert broken is not None and broken.holder == held["holder"]
    result = child.result()
    assert result["type"] == "FAILED" and "was lost" in result["message"], result
    assert not list(coord.glob("exited-*"))
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(result["flow_run_id"])
    assert run.state is not None and run.state.is_failed()


@pytest.mark.usefixtures("prefect_api")
@pytest.mark.parametrize(("flow", "key"), [(ff.swallowing_flow, "swallow-flow"),
                                           (ff.swallowing_leased_block, "swallow-block")])
def test_except_exception_in_the_body_cannot_swallow_the_loss(
        coord: Path, lease_url: str, flow: Any, key: str) -> None:
    breaker = _break_when_entered(coord, lease_url, key)
    state = flow(return_state=True)
    breaker.join(10)
    _assert_failed_by_loss(state, coord)
    assert not list(coord.glob("swallowed-*")), "except Exception caught the loss"
