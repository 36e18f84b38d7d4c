"""The Prefect face's fail-stop hook: before a lost lease ends the process,
the flow run is reported Crashed with the reason, so the Prefect API never
shows a run that was stopped as Running (a run called in-process, with no
worker watching its exit status, would stay Running for ever). The flow runs
that called it in this process (a ``@leased_flow`` used as a subflow) end
with the process too, and are reported Crashed after it. Last, the hook waits
for the ``lost`` event (``events``), sent meanwhile, to be out."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from typing import Any

from lease_integrations import Lease

from .events import LeaseEvents

log = logging.getLogger("lease_integrations")


def crash_reporter(lease: Lease, flow_run_id: str | None, events: LeaseEvents,
                   ) -> Callable[[], None]:
    """A stop hook that sets the run's state to Crashed, then waits for the
    ``lost`` event to be sent. Made on the run's thread: the hook runs on
    fail-stop's, with the run's Prefect settings (API URL, an ephemeral
    server's address) carried over in its context."""
    context = contextvars.copy_context()

    def report() -> None:
        if flow_run_id is not None:
            try:
                context.run(_report, flow_run_id, lease)
            finally:
                events.wait_sent()

    return report


def _report(flow_run_id: str, lease: Lease) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    message = (f"lease {lease.key!r} (token {lease.token}) was lost: {lease.lost_reason}; "
               "the process was stopped")
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, Crashed(message=message), force=True)
        log.info("reported flow run %s Crashed: %s", flow_run_id, message)
        for parent_id in _in_process_parents(client, flow_run_id):
            client.set_flow_run_state(
                parent_id, Crashed(message=f"subflow run {flow_run_id}: {message}"), force=True)
            log.info("reported flow run %s (a caller of %s) Crashed", parent_id, flow_run_id)


def _in_process_parents(client: Any, flow_run_id: str) -> Iterator[Any]:
    """The flow runs above ``flow_run_id`` that this process runs: the parent
    of each run that is a subflow called in-process. A run with a deployment
    of its own (the process's root, or one ``run_deployment`` started) ends
    the walk: its caller, if any, runs in another process and goes on."""
    run = client.read_flow_run(flow_run_id)
    seen = {run.id}
    while run.deployment_id is None and run.parent_task_run_id is not None:
        parent_id = client.read_task_run(run.parent_task_run_id).flow_run_id
        if parent_id is None or parent_id in seen:
            return
        seen.add(parent_id)
        run = client.read_flow_run(parent_id)
        if run.state is not None and run.state.is_final():
            return
        yield run.id
