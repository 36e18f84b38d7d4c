"""Single-runner jobs for Airflow and Prefect: a lease lock with a fencing token.

    from lease_integrations import connect, LeaseLock

    store = connect("sqlite:///var/lib/jobs/leases.db")
    with LeaseLock(store, "nightly-billing", ttl=30.0).hold() as lease:
        ...  # lease.token fences your writes
"""

from .core import (
    LEASE_LOST_EXIT_STATUS,
    ConfigurationError,
    Lease,
    LeaseBusy,
    LeaseError,
    LeaseEvent,
    LeaseLock,
    LeaseLost,
    LeaseRecord,
    LeaseStore,
    StaleToken,
    StoreUnavailable,
)
from .core.fencing import SqlFence
from .stores import check_url, connect

__version__ = "0.1.0"

__all__ = [
    "LEASE_LOST_EXIT_STATUS",
    "ConfigurationError",
    "Lease",
    "LeaseBusy",
    "LeaseError",
    "LeaseEvent",
    "LeaseLock",
    "LeaseLost",
    "LeaseRecord",
    "LeaseStore",
    "SqlFence",
    "StaleToken",
    "StoreUnavailable",
    "__version__",
    "check_url",
    "connect",
]
