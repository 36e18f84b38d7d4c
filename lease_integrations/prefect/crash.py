"""The Prefect face's fail-stop hook: before a lost lease ends the process,
the flow run is reported Crashed with the reason, so the Prefect API never
shows a run that was stopped as Running (a run called in-process, with no
worker watching its exit status, would stay Running for ever)."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable

from lease_integrations import Lease

log = logging.getLogger("lease_integrations")


def crash_reporter(lease: Lease, flow_run_id: str | None) -> Callable[[], None]:
    """A stop hook that sets the run's state to Crashed. Made on the run's
    thread: the hook runs on fail-stop's, with the run's Prefect settings
    (API URL, an ephemeral server's address) carried over in its context."""
    context = contextvars.copy_context()

    def report() -> None:
        if flow_run_id is not None:
            context.run(_report, flow_run_id, lease)

    return report


def _report(flow_run_id: str, lease: Lease) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    message = (f"lease {lease.key!r} (token {lease.token}) was lost: {lease.lost_reason}; "
               "the process was stopped")
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, Crashed(message=message), force=True)
    log.info("reported flow run %s Crashed: %s", flow_run_id, message)
