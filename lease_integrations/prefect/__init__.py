"""Prefect integration: single-runner flows with one decorator.

    from lease_integrations.prefect import leased_flow, current_lease

    @leased_flow(key="nightly-billing", ttl=60, on_busy="skip")
    def nightly_billing():
        token = current_lease().token   # fence your writes with it

Each run emits Prefect events for its lease (``lease-integrations.lease.acquired``,
``.busy``, ``.lost``, ``.released``; ``lease_integrations.prefect.events``).

Needs ``prefect>=3.4`` (``pip install -e '<checkout>[prefect]'``), each minor tested as
installed with its release's dependencies; Prefect 3.4 resolved fresh needs ``fastapi<0.121``
pinned beside it (docs/development.md, support matrix).
"""

from .block import LeaseStoreBlock
from .context import NoCurrentLease, current_lease
from .flow import leased_flow
from .leased import leased

__all__ = ["LeaseStoreBlock", "NoCurrentLease", "current_lease", "leased", "leased_flow"]
