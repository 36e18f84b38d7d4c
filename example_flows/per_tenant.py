"""One lease per tenant: different tenants never block each other, a tenant
never runs twice at once.

``key="billing-{tenant}"`` is filled from the flow's parameters for each run
(defaults included), so a ``tenant_billing(tenant="acme")`` run and a
``tenant_billing(tenant="globex")`` run started at the same time (two
deployment runs, two processes) both proceed, while a second
``tenant="acme"`` run waits for the first (``on_busy="wait"``) for up to
ten minutes, then fails naming the holder.

``bill_everyone`` below is a plain synchronous flow, so it calls its
subflows one after the other: here the tenants are billed in turn, each
under its own lease. To bill them concurrently from one parent, make both
flows ``async def`` and ``await asyncio.gather(...)`` the subflow calls
(Prefect runs sync subflows sequentially).
"""

from __future__ import annotations

from prefect import flow

from lease_integrations.prefect import current_lease, leased_flow


@leased_flow(key="billing-{tenant}", ttl=60, on_busy="wait", wait_timeout=600)
def tenant_billing(tenant: str, month: str = "current") -> str:
    lease = current_lease()
    return f"billed {tenant} for {month} under {lease.key} token {lease.token}"


@flow
def bill_everyone(tenants: list[str]) -> list[str]:
    """Each tenant in turn (a sync flow runs its subflows one after the
    other), each subflow run under its own tenant's lease."""
    return [tenant_billing(tenant=t) for t in tenants]


if __name__ == "__main__":
    print(bill_everyone(["acme", "globex"]))
