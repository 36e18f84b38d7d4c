"""A try whose lease another run superseded ends as Airflow users expect:
FAILED, with a line naming the run that replaced it, and never retried as
if it had crashed (a retry would only try to displace the newer run, or
wait behind it and redo stale work).

The fail-stop ladder stops the try as for any loss (its ``on_kill`` first);
this step, one of the ladder's stop hooks, then reads who replaced it (the
``superseded`` event the new holder recorded, else the loss reason) and
records the try FAILED through the running Airflow (``_compat``). Under
Airflow 3's scheduler the supervisor reads that state only from a task
process that exits 0, so the ladder is told to exit 0 (``exit_status``); a
try that could not be recorded ends with the loss's own status, as a crash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from lease_integrations import Lease, LeaseError, LeaseStore
from lease_integrations.keeper import exit_status

from ._compat import fail_try_without_retry

log = logging.getLogger("airflow.task")

#: What the store records as the breaker of a superseded lease (``keeper/supersede``).
SUPERSEDE_MARK = "supersede by "
#: How long the hook looks for the new holder's ``superseded`` event: it is
#: written just after the break the old holder may have noticed first.
EVENT_WAIT = 1.0


def superseded_by(lease: Lease, store: LeaseStore | None = None,
                  wait: float = EVENT_WAIT) -> str | None:
    """Who replaced ``lease`` ("run <run_id> of <dag_id> ..."), or None if it
    was not superseded (lost another way, or not lost)."""
    reason = lease.lost_reason or ""
    if not lease.lost or SUPERSEDE_MARK not in reason:
        return None
    holder = reason.split(SUPERSEDE_MARK, 1)[1].strip() or "?"
    event = _superseded_event(store, lease, wait) if store is not None else None
    if event is None:
        return f"holder {holder}"
    return describe(event.get("meta") or {}, str(event.get("by") or holder))


def describe(meta: Mapping[str, Any], holder: str) -> str:
    """A new holder as an Airflow user knows it: its run, DAG and task try."""
    run_id, dag_id = meta.get("run_id"), meta.get("dag_id")
    if not run_id:
        return f"holder {holder}"
    what = f"run {run_id}" + (f" of DAG {dag_id}" if dag_id else "")
    if meta.get("task_id"):
        what += f" (task {meta['task_id']}, try {meta.get('try_number', '?')})"
    return f"{what} on {holder}"


def _superseded_event(store: LeaseStore, lease: Lease, wait: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + wait
    while True:
        try:
            for event in store.history(lease.key, limit=20):
                if event.kind == "superseded" and event.token == lease.token:
                    return dict(event.detail)
        except LeaseError:
            return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def fail_superseded_try(context: Mapping[str, Any], held: Callable[[], Lease | None],
                        store: LeaseStore | None) -> Callable[[], None]:
    """The ladder's stop hook for a leased try: nothing unless the lease
    ``held()`` returns was superseded; then the log line naming the new run,
    the try recorded FAILED without retry, and the exit status to match."""

    def hook() -> None:
        lease = held()
        if lease is None:
            return
        by = superseded_by(lease, store)
        if by is None:
            return
        log.error("this try was superseded: lease %s (token %s) was taken over by %s; "
                  "the try fails without a retry", lease.key, lease.token, by)
        try:
            if fail_try_without_retry(context):
                exit_status(0)  # the supervisor reads the FAILED it was told only then
        except Exception:
            log.exception("could not record the superseded try as failed; it ends as a "
                          "lost lease does")

    return hook
