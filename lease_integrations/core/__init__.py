"""The lease core: records, the store protocol, the lock, heartbeat and fencing.
Knows nothing of any particular store or orchestrator."""

from .errors import (
    ConfigurationError,
    LeaseBusy,
    LeaseError,
    LeaseLost,
    StaleToken,
    StoreUnavailable,
)
from .lease import Lease
from .lock import LeaseLock
from .record import AcquireResult, LeaseRecord
from .store import LeaseEvent, LeaseStore

__all__ = [
    "AcquireResult",
    "ConfigurationError",
    "Lease",
    "LeaseBusy",
    "LeaseError",
    "LeaseEvent",
    "LeaseLock",
    "LeaseLost",
    "LeaseRecord",
    "LeaseStore",
    "StaleToken",
    "StoreUnavailable",
]
