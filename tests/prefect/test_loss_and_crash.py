"""A lease broken from outside (``force_release``, as ``leasectl break`` does)
while a flow runs. Under ``on_lost="exit"`` (the default) the process running
the flow ends with ``LEASE_LOST_EXIT_STATUS``, taking every thread with it
(the body, the task runs it submitted to the thread-pool runner), and the run
is reported Crashed to the Prefect API by the face's stop hook before it ends:
never Completed, never left Running. ``check`` stops nothing and the run ends
Failed; ``cancel`` cancels an async body and the run ends Failed. A SIGKILLed
holder's lease is taken by a later run once its ttl has passed.

Each run is a child process (the loss ends it) reporting to the test's Prefect
server. The evidence is the run's own work log (``ticks``, written by every
thread that works) and the time its ``on_lost`` callback ran (``lost``); each
test prints the time from the loss being known to the last sign of work."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import flows_for_tests as ff
import pytest
from prefect_helpers import (
    Child,
    break_when_working,
    entered,
    last_work,
    run_states,
    ticks,
    wait_until,
)

from lease_integrations import LEASE_LOST_EXIT_STATUS, connect

#: The defaults a @leased_flow's lock gets from its ttl: heartbeat ttl/3,
#: margin ttl/5, grace margin/4.
HEARTBEAT, GRACE = ff.TTL / 3, ff.TTL / 5 / 4


def _assert_ended_and_crashed(child: Child, coord: Path, run_id: str, what: str) -> None:
    """The process ended by fail-stop, all work stopped in time, nothing ran
    on, and the API shows the run Crashed by our stop hook, never Completed."""
    status = child.wait(60)
    assert status == LEASE_LOST_EXIT_STATUS, (status, child.output())
    assert not child.done(), "the flow call returned: the process was not ended"
    lost, last = last_work(coord, what, HEARTBEAT + GRACE)
    assert last <= lost + HEARTBEAT + GRACE, (last - lost, ticks(coord)[-5:])
    assert not list(coord.glob("exited-*")), "the body ran to its end"
    count = len(ticks(coord))
    time.sleep(GRACE + 0.5)
    assert len(ticks(coord)) == count, "work went on after the process ended"
    # In a process called directly nothing but our stop hook (no runner, no
    # worker watching the exit status) can set this state.
    state, history = _final_state(run_id)
    assert state is not None and state.is_crashed(), (state, child.output())
    assert "was lost" in (state.message or "") and "the process was stopped" in state.message
    assert not [s for s in history if s.is_completed()], history


def test_flow_with_four_thread_pool_tasks_is_ended_whole_and_reported_crashed(
        spawn: Any, coord: Path, lease_url: str) -> None:
    """Issue 23, table 1: the old interrupt reached the flow's thread only;
    its four task runs kept writing for 25 s and the flow ended when they did."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    child = spawn("fan_out")
    tasks = {f"task{i}" for i in range(4)}
    record = break_when_working(coord, lease_url, "fan-out", tasks)
    _assert_ended_and_crashed(child, coord, record["run"], "@leased_flow with 4 thread-pool tasks")
    assert {who for _, who in ticks(coord)} == tasks
    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[record["run"]])))
    assert len(task_runs) == 4
    assert not [run for run in task_runs if run.state is not None and run.state.is_completed()]


def test_a_leased_subflow_that_loses_its_lease_crashes_its_parent_run_too(
        spawn: Any, coord: Path, lease_url: str) -> None:
    """The process ends the parent flow run with its subflow: both are
    reported Crashed, neither is left Running."""

    child = spawn("calls_fan_out")
    record = break_when_working(coord, lease_url, "fan-out", {f"task{i}" for i in range(4)})
    _assert_ended_and_crashed(child, coord, record["run"], "@leased_flow as a subflow")
    _assert_parent_crashed(child, record["run"])


def test_a_slow_api_still_gets_the_parent_run_reported_crashed(
        spawn: Any, coord: Path, lease_url: str, child_env: dict[str, str]) -> None:
    """Every API call answered 0.25 s late, as on a loaded machine: the stop
    hooks have about 0.8 s (ttl 12), so the parent's report must not wait for
    a walk up the run tree made after the loss (four calls in a row, then the
    parent's: the process ended first, and the parent stayed Running)."""
    child_env["LEASE_TEST_SLOW_API"] = "0.25"
    child = spawn("calls_fan_out_long_ttl")
    record = break_when_working(coord, lease_url, "fan-out", {f"task{i}" for i in range(4)})
    assert child.wait(60) == LEASE_LOST_EXIT_STATUS, child.output()
    state, _ = _final_state(record["run"])
    assert state.is_crashed() and "was lost" in (state.message or ""), (state, child.output())
    _assert_parent_crashed(child, record["run"])


def _final_state(flow_run_id: Any) -> tuple[Any, list[Any]]:
    """The run's state once it is no longer Running, and its history. A
    report sent just before the process ended may still be on its way into
    the server's database: poll (bounded) rather than read once."""
    def final() -> Any:
        state, history = run_states(flow_run_id)
        return (state, history) if state is not None and not state.is_running() else None
    try:
        found: tuple[Any, list[Any]] = wait_until(final, 10, f"flow run {flow_run_id} to end")
    except AssertionError:
        return run_states(flow_run_id)  # still Running: the caller's assertion names it
    return found


def _assert_parent_crashed(child: Child, subflow_id: str) -> None:
    """The plain flow that called the leased subflow in the same process is
    reported Crashed too, never left Running or Completed."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        subflow = client.read_flow_run(subflow_id)
        assert subflow.parent_task_run_id is not None
        parent_id = client.read_task_run(subflow.parent_task_run_id).flow_run_id
    assert parent_id is not None
    state, history = _final_state(parent_id)
    assert state is not None and state.is_crashed(), (state, child.output())
    assert "was lost" in (state.message or ""), state
    assert not [s for s in history if s.is_completed()], history


@pytest.mark.parametrize(("flow", "key"), [
    ("long_sync", "long-sync"),                     # the main thread, in time.sleep
    ("long_sync@thread", "long-sync"),              # called from another thread
    ("long_async", "long-async"),                   # an async flow on its event loop
    ("swallowing_flow", "swallow-flow"),            # `except Exception: continue`
    ("swallowing_leased_block", "swallow-block"),   # leased() inside a plain @flow
])
def test_lost_lease_ends_the_run_process_and_reports_it_crashed(
        spawn: Any, coord: Path, lease_url: str, flow: str, key: str) -> None:
    child = spawn(flow)
    record = break_when_working(coord, lease_url, key, {"body"})
    _assert_ended_and_crashed(child, coord, record["run"], flow)
    assert not list(coord.glob("swallowed-*")), "except Exception caught the loss"
    assert (record["thread"] == "MainThread") == (flow != "long_sync@thread")


def test_check_policy_stops_nothing_and_the_run_fails(
        spawn: Any, coord: Path, lease_url: str) -> None:
    """``on_lost="check"``: the tasks work on (here 2.5 s past the loss, then
    they return), the process is not ended, and the run ends Failed."""
    child = spawn("fan_out_checked", stop_after_loss=2.5)
    record = break_when_working(coord, lease_url, "fan-out", {f"task{i}" for i in range(4)})
    result = child.result()
    assert child.wait() == 0, child.output()
    lost, last = last_work(coord, "on_lost='check'", HEARTBEAT + GRACE)
    assert last > lost + HEARTBEAT + GRACE, "work was stopped under on_lost='check'"
    assert list(coord.glob("exited-*")), "the body did not run to its end"
    assert result["type"] == "FAILED" and "was lost" in result["message"], result
    state, history = run_states(record["run"])
    assert state is not None and state.is_failed(), state
    assert not [s for s in history if s.is_completed() or s.is_crashed()], history


def test_cancel_policy_cancels_an_async_body_and_the_run_fails(
        spawn: Any, coord: Path, lease_url: str) -> None:
    """``on_lost="cancel"``: the body's task is cancelled at every await until
    it ends (it swallows the first cancel and meets the next); the process
    goes on and the run ends Failed."""
    child = spawn("cancelled_async")
    record = break_when_working(coord, lease_url, "cancelled-async", {"body"})
    result = child.result()
    assert child.wait() == 0, child.output()
    lost, last = last_work(coord, "on_lost='cancel' (async flow)", HEARTBEAT + GRACE)
    assert last <= lost + HEARTBEAT + GRACE, (last - lost, ticks(coord)[-5:])
    assert list(coord.glob("swallowed-*")), "the body never saw a cancel"
    assert not list(coord.glob("exited-*")), "the body ran to its end"
    assert result["type"] == "FAILED" and "was lost" in result["message"], result
    state, history = run_states(record["run"])
    assert state is not None and state.is_failed(), state
    assert not [s for s in history if s.is_completed()], history


def test_sigkilled_holder_is_taken_over_after_its_ttl_or_its_keepers_release(
    spawn: Any, coord: Path, lease_url: str
) -> None:
    """A holder killed outright (the OOM killer) is taken over when its lease
    expires, or sooner when its keeper, which saw the job die and ended what
    was left of it, gave the lease back: which of the two comes first depends
    on whether the keeper had started when the kill came. Never before both."""
    victim = spawn("long_sync")
    (held,) = wait_until(lambda: entered(coord), 90, "the victim to hold the lease")
    victim.kill()  # SIGKILL: no release, no last renewal
    store = connect(lease_url)
    before = store.get("long-sync")
    assert before is not None and before.token == held["token"]
    if before.holder is None:  # its keeper was quicker than this read: it gave the lease back
        assert [e for e in store.history("long-sync")
                if e.kind == "released" and e.token == held["token"]], before
    else:
        assert before.holder == held["holder"]

    result = ff.long_sync_waiter()  # on_busy="wait": gets the lease once it expires
    assert result["token"] > held["token"]
    assert result["holder"] != held["holder"]
    after = store.get("long-sync")
    assert after is not None and after.acquired_at is not None and before.expires_at is not None
    if after.acquired_at < before.expires_at:
        given_back = [e for e in store.history("long-sync")
                      if e.kind == "released" and e.token == held["token"]]
        assert given_back, "taken over before the dead holder's ttl, and nobody gave it back"
        assert given_back[0].at <= after.acquired_at
