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
    LeaseLost,
    LeaseRecord,
    LeaseStore,
    StaleToken,
    StoreUnavailable,
)
from .core.fencing import SqlFence
from .core.version import __version__
from .lock import LeaseLock
from .stores import check_url, connect

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
