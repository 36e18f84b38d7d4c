"""One lease per tenant: tenants run side by side, a tenant never twice.

``key="billing-{tenant}"`` is filled from the flow's parameters for each run
(defaults included), so ``tenant_billing(tenant="acme")`` and
``tenant_billing(tenant="globex")`` run together while a second
``tenant="acme"`` run waits for the first (``on_busy="wait"``) for up to
ten minutes, then fails naming the holder.
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
    """Fan out: each subflow run takes its own tenant's lease."""
    return [tenant_billing(tenant=t) for t in tenants]


if __name__ == "__main__":
    print(bill_everyone(["acme", "globex"]))
