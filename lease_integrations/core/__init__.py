"""The lease core: the lease as data and rules (records, the store protocol,
the trust window and its timing rule, fencing guards, errors, config).
Knows nothing of any particular store or orchestrator, and starts no thread
or process: the lease's lifetime is ``lease_integrations.keeper``, the lock
``lease_integrations.lock``.

The names below are the core's public surface: the orchestrator glue in
``airflow/`` and ``prefect/`` imports only these, so one rule about leases
(what a valid key is, how a URL is masked) lives in one place.
"""

from .config import mask_url, resolve_url
from .errors import (
    LEASE_LOST_EXIT_STATUS,
    ConfigurationError,
    CorruptRecord,
    LeaseBusy,
    LeaseError,
    LeaseLost,
    StaleToken,
    StoreUnavailable,
)
from .lease import Lease
from .record import AcquireResult, LeaseRecord
from .store import EventList, LeaseEvent, LeaseStore, RecordList
from .text import printable
from .validation import (
    ON_BUSY_POLICIES,
    ON_LOST_POLICIES,
    validate_heartbeat,
    validate_key,
    validate_on_lost,
    validate_policy,
    validate_ttl,
    validate_wait,
)

__all__ = [
    "LEASE_LOST_EXIT_STATUS",
    "ON_BUSY_POLICIES",
    "ON_LOST_POLICIES",
    "AcquireResult",
    "ConfigurationError",
    "CorruptRecord",
    "EventList",
    "Lease",
    "LeaseBusy",
    "LeaseError",
    "LeaseEvent",
    "LeaseLost",
    "LeaseRecord",
    "LeaseStore",
    "RecordList",
    "StaleToken",
    "StoreUnavailable",
    "mask_url",
    "printable",
    "resolve_url",
    "validate_heartbeat",
    "validate_key",
    "validate_on_lost",
    "validate_policy",
    "validate_ttl",
    "validate_wait",
]
