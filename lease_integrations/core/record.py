"""The lease record: the plain data a store keeps and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

LeaseState = Literal["held", "expired", "released"]


@dataclass(frozen=True)
class LeaseRecord:
    """A lease as the store saw it at ``observed_at`` (the store's own clock).

    ``holder`` is None once the lease was released (or broken); the record and
    its ``token`` are kept because the token counter must never go backwards.
    Expiry is judged against ``observed_at`` rather than the reader's clock,
    because only the store's clock decides who holds a lease.
    """

    key: str
    holder: str | None
    token: int
    acquired_at: datetime | None
    renewed_at: datetime | None
    expires_at: datetime | None
    observed_at: datetime
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> LeaseState:
        if self.holder is None or self.expires_at is None:
            return "released"
        if self.expires_at <= self.observed_at:
            return "expired"
        return "held"

    @property
    def held(self) -> bool:
        return self.state == "held"

    @property
    def expires_in(self) -> float | None:
        """Seconds until expiry by the store's clock (negative once expired)."""
        if self.holder is None or self.expires_at is None:
            return None
        return (self.expires_at - self.observed_at).total_seconds()


@dataclass(frozen=True)
class AcquireResult:
    """What one acquire attempt returns: the new lease on success, or the
    current record on ``busy`` (so the caller can name the holder without a
    second round trip)."""

    granted: bool
    record: LeaseRecord | None
