"""Where the running code finds its lease: ``current_lease()``, in the flow
and in its tasks, and what a holder tells others about itself (meta).

Tasks may run in other threads. Prefect's thread-pool runner copies the
context into them, so a context variable reaches them; a registry keyed by
flow run id also covers runners that do not copy it. Tasks sent to other
processes (Dask, Ray) cannot share the lease object: pass
``current_lease().token`` to them as a parameter for fencing.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from lease_integrations import Lease, LeaseError

_current: ContextVar[Lease | None] = ContextVar("lease_integrations_current_lease", default=None)
_by_flow_run: dict[str, list[Lease]] = {}
_registry_lock = threading.Lock()


class NoCurrentLease(LeaseError, LookupError):
    """``current_lease()`` was called where no lease is held: outside a
    ``@leased_flow`` run and outside a ``leased()`` block."""


def current_lease() -> Lease:
    """The lease held for the running flow (or the innermost ``leased()``
    block): ``current_lease().token`` is the fencing token for writes."""
    lease = _current.get()
    if lease is not None:
        return lease
    run_id = active_flow_run_id()
    if run_id is not None:
        with _registry_lock:
            held = _by_flow_run.get(run_id)
            if held:
                return held[-1]
    raise NoCurrentLease(
        "current_lease() found no lease: call it inside a @leased_flow run (or its tasks) "
        "or inside a leased() block"
    )


@contextmanager
def bound(lease: Lease, flow_run_id: str | None) -> Iterator[None]:
    """Make ``lease`` the current lease for the enclosed code."""
    token = _current.set(lease)
    if flow_run_id is not None:
        with _registry_lock:
            _by_flow_run.setdefault(flow_run_id, []).append(lease)
    try:
        yield
    finally:
        if flow_run_id is not None:
            with _registry_lock:
                stack = _by_flow_run.get(flow_run_id, [])
                if lease in stack:
                    stack.remove(lease)
                if not stack:
                    _by_flow_run.pop(flow_run_id, None)
        _current.reset(token)


def run_meta() -> dict[str, Any]:
    """The holder's description of itself, stored with the lease: whoever
    finds the lease busy (a second run, an operator with ``leasectl``) can
    tell which flow run holds it."""
    from prefect.context import FlowRunContext, TaskRunContext

    meta: dict[str, Any] = {"host": socket.gethostname()}
    flow_ctx = FlowRunContext.get()
    if flow_ctx is not None and flow_ctx.flow_run is not None:
        run = flow_ctx.flow_run
        meta["flow_run_id"] = str(run.id)
        meta["flow_run_name"] = run.name
        if run.deployment_id is not None:
            meta["deployment_id"] = str(run.deployment_id)
    if flow_ctx is not None and flow_ctx.flow is not None:
        meta["flow_name"] = flow_ctx.flow.name
    task_ctx = TaskRunContext.get()
    if task_ctx is not None:
        meta["task_run_id"] = str(task_ctx.task_run.id)
        meta["task_name"] = task_ctx.task.name
        meta.setdefault("flow_run_id", str(task_ctx.task_run.flow_run_id))
    return meta


def active_flow_run_id() -> str | None:
    from prefect.context import FlowRunContext, TaskRunContext

    task_ctx = TaskRunContext.get()
    if task_ctx is not None and task_ctx.task_run.flow_run_id is not None:
        return str(task_ctx.task_run.flow_run_id)
    flow_ctx = FlowRunContext.get()
    if flow_ctx is not None and flow_ctx.flow_run is not None:
        return str(flow_ctx.flow_run.id)
    return None
