"""The store protocol: the strict cut between "where a lease lives" and "how a
lease is used".

Below the cut a store speaks plain primitives (key, holder, token, ttl, meta)
and returns plain records; it judges expiry on its own clock and makes every
write one atomic conditional operation. Above the cut, ``LeaseLock`` owns
waiting, heartbeats, trust windows and policies. Keeping the cut strict is what
lets one conformance suite prove every store equal.
"""

from __future__ import annotations

import builtins
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .record import AcquireResult, LeaseRecord

EventKind = Literal["acquired", "released", "broken", "lost"]

#: How many history events a store keeps per key before trimming the oldest.
HISTORY_LIMIT = 100


@dataclass(frozen=True)
class LeaseEvent:
    """One line of a key's history, as the store recorded it (its clock)."""

    key: str
    kind: EventKind
    token: int
    holder: str | None
    at: datetime
    detail: dict[str, Any] = field(default_factory=dict)


class LeaseStore(ABC):
    """Base class of every store. A store file is one subclass and its queries.

    Every method may raise ``StoreUnavailable`` (with the masked URL) when the
    store cannot be reached; none may hang without bound.
    """

    #: The URL with any password masked; safe to print and log.
    url: str = ""
    #: True when ``wait_for_release`` is woken by the store on release
    #: (pub/sub, LISTEN/NOTIFY, a condition variable) rather than polling.
    notifies: bool = False

    @abstractmethod
    def acquire(
        self, key: str, holder: str, ttl: float, meta: Mapping[str, Any]
    ) -> AcquireResult:
        """One atomic conditional write. Grants iff there is no record, the
        record was released, or it expired by the store's clock; then the new
        token is the key's last token + 1. On busy, returns the current record."""

    @abstractmethod
    def renew(self, key: str, holder: str, token: int, ttl: float) -> bool:
        """Extend to now + ttl iff holder and token match and the lease has not
        expired. False means the lease is gone for good: never resurrected."""

    @abstractmethod
    def release(self, key: str, holder: str, token: int) -> bool:
        """Clear the holder iff holder and token match; keep the token counter.
        Wakes waiters where the store can notify."""

    @abstractmethod
    def get(self, key: str) -> LeaseRecord | None:
        """The key's record in whatever state (held, expired, released), or
        None when the key was never acquired."""

    @abstractmethod
    def list(self, prefix: str = "") -> builtins.list[LeaseRecord]:
        """Every record whose key starts with ``prefix``, sorted by key."""

    @abstractmethod
    def force_release(self, key: str, by: str) -> LeaseRecord | None:
        """The operator's break: clear the holder whoever it is, keep the
        counter, record who broke it. Returns the record as it was before,
        or None when there was no record. The only path that touches another
        holder's lease."""

    @abstractmethod
    def history(self, key: str, limit: int = 50) -> builtins.list[LeaseEvent]:
        """The key's most recent events, oldest first (at most ``limit``)."""

    @abstractmethod
    def record_event(
        self, key: str, kind: EventKind, holder: str | None, token: int,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append an event the holder observed (a lost lease). Best effort."""

    def wait_for_release(self, key: str, timeout: float) -> bool:
        """Block until the key may have been released, or ``timeout`` passes.

        Returns True when woken by a notification. The default polls (sleeps);
        stores with a notification channel override it. Callers always retry
        ``acquire`` afterwards, so a spurious wake-up is harmless."""
        if timeout > 0:
            time.sleep(timeout)
        return False

    def close(self) -> None:  # noqa: B027 - optional hook, stores without resources skip it
        """Release connections. Idempotent."""

    def __enter__(self) -> LeaseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
