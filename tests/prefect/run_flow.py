"""Run one flow of flows_for_tests in a child process and write its final state.

The test suite starts children through a multiprocessing *forkserver* that
has imported Prefect and these flows once (``run_in_child``): every child is
still its own process, with its own Prefect client, heartbeat and lease
holder id, but does not pay Prefect's import again (seconds per child on a
busy 2-core machine). ``python run_flow.py <flow> <params JSON> <out>``
does the same from a fresh interpreter.

Children report to the test's Prefect server (``$PREFECT_API_URL``, set
before the forkserver starts) and find the lease store through
``$LEASE_STORE_URL``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import flows_for_tests

# What a flow run imports on first use, imported once here so that forked
# children do not each pay for it (imports start no threads: fork stays safe).
for _module in ("prefect.artifacts", "prefect.client.orchestration", "prefect.deployments",
                "prefect.events.worker", "prefect.flow_engine", "prefect.logging.handlers",
                "prefect.results", "prefect.states", "prefect.task_engine",
                "lease_integrations.stores.sqlite"):
    importlib.import_module(_module)


def run(name: str, params: dict[str, Any], out: Path) -> None:
    """Run ``name`` (``name@thread``: from a thread other than the main one;
    ``name@scheduled:<seconds>``: a run created Scheduled that many seconds
    from now, then run by the engine, as a worker runs a scheduled run)."""
    name, _, where = name.partition("@")
    flow = getattr(flows_for_tests, name)
    if where.startswith("scheduled:"):
        state = _run_scheduled(flow, params, float(where.partition(":")[2]))
    elif flow.isasync:
        state = asyncio.run(flow(**params, return_state=True))
    elif where == "thread":
        states: list[Any] = []
        runner = threading.Thread(target=lambda: states.append(flow(**params, return_state=True)),
                                  name="flow-caller")
        runner.start()
        runner.join()
        (state,) = states
    else:
        state = flow(**params, return_state=True)
    record = {
        "type": state.type.value,
        "name": state.name,
        "message": state.message,
        "flow_run_id": str(state.state_details.flow_run_id),
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.rename(out)


def _run_scheduled(flow: Any, params: dict[str, Any], offset: float) -> Any:
    """Create the run Scheduled for now + ``offset`` s (its expected start),
    then run it in this process through the engine."""
    from datetime import datetime, timedelta, timezone

    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import Scheduled

    when = datetime.now(timezone.utc) + timedelta(seconds=offset)
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(flow, parameters=params,
                                          state=Scheduled(scheduled_time=when))
    return run_flow(flow, flow_run=flow_run, parameters=params, return_type="state")


def _slow_lost_event(delay: float) -> None:
    """Send a lease's ``lost`` event ``delay`` seconds late: then only a
    process that waits for it gets it out before fail-stop ends it."""
    from prefect.events.clients import PrefectEventsClient

    emit = PrefectEventsClient._emit

    async def slow(self: Any, event: Any) -> None:
        if event.event == "lease-integrations.lease.lost":
            await asyncio.sleep(delay)
        await emit(self, event)

    PrefectEventsClient._emit = slow  # type: ignore[method-assign]


def _slow_api(delay: float) -> None:
    """Answer every flow-run and task-run read and state write ``delay``
    seconds late, as a loaded API server does: what a lost lease's report
    must do in sequence then decides whether it lands in the ladder's time."""
    from prefect.client.orchestration import SyncPrefectClient

    def slowed(method: Any) -> Any:
        def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
            threading.Event().wait(delay)
            return method(self, *args, **kwargs)
        return slow

    for name in ("read_flow_run", "read_task_run", "set_flow_run_state"):
        setattr(SyncPrefectClient, name, slowed(getattr(SyncPrefectClient, name)))


def run_in_child(name: str, params: dict[str, Any], out: str, log: str, env: dict[str, str]) -> None:
    """Target of a forkserver child: its own output file and environment."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.update(env)
    if os.environ.get("LEASE_TEST_SLOW_LOST_EVENT"):
        _slow_lost_event(float(os.environ["LEASE_TEST_SLOW_LOST_EVENT"]))
    if os.environ.get("LEASE_TEST_SLOW_API"):
        _slow_api(float(os.environ["LEASE_TEST_SLOW_API"]))
    run(name, params, Path(out))
    # A forkserver child ends with os._exit, which skips the drain Prefect
    # registers for interpreter exit: drain here, as a run's own process would.
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=30, at_exit=False)


if __name__ == "__main__":
    run(sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3]))
