"""Refuse the embedded per-host store for flow runs from remote work pools.

With no ``store=`` and no ``$LEASE_STORE_URL`` a run uses a SQLite file in its
own state directory. Runs of a served flow or a ``process`` work pool start as
processes on the worker's host and share that file; runs from a docker,
kubernetes, ECS, Cloud Run (...) pool each start in a fresh container with a
file of its own, so two of them would both "hold" the lease. Such a run fails
before its body runs, with the ways to choose a store.
"""

from __future__ import annotations

from lease_integrations import ConfigurationError
from lease_integrations.core.config import ENV_URL

#: Work pool types whose runs start as processes on the worker's own host.
LOCAL_POOL_TYPES = frozenset({"process"})


def run_work_pool() -> tuple[str, str] | None:
    """(name, type) of the work pool the running flow run came from, or None
    for runs not from a pool (``serve()``, a direct call, a test)."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    from .context import active_flow_run_id

    ctx = FlowRunContext.get()
    flow_run = ctx.flow_run if ctx is not None else None
    run_id = active_flow_run_id()
    if flow_run is None and run_id is None:
        return None
    with get_client(sync_client=True) as client:
        if flow_run is None:
            flow_run = client.read_flow_run(run_id)  # type: ignore[arg-type]
        name = getattr(flow_run, "work_pool_name", None)
        if not name:
            return None
        return name, str(client.read_work_pool(name).type)


def refuse_per_host_default() -> None:
    """Raise ``ConfigurationError`` if this run would use the embedded default
    while its pool's runs may start on different hosts."""
    pool = run_work_pool()
    if pool is None or pool[1] in LOCAL_POOL_TYPES:
        return
    name, kind = pool
    raise ConfigurationError(
        f"no lease store is configured (no store=, no ${ENV_URL}), and this flow run comes "
        f"from work pool {name!r} of type {kind!r}, whose runs start in separate containers or "
        "hosts: the embedded per-host SQLite default would give no exclusion there. Choose a "
        "store every run reaches: @leased_flow(store='redis://lease-redis:6379/0') or "
        "store='block:<LeaseStoreBlock name>', or set "
        f"{ENV_URL}=redis://lease-redis:6379/0 in the pool's job variables (env). A SQLite "
        f"file is accepted when named explicitly (store='sqlite:////shared/path/leases.db')."
    )
