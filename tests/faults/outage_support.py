"""What the three outage test files share: a holder whose loss callback
notes when it fired, bounded polls, and the "still held" check."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

import pytest

from lease_integrations import Lease, LeaseLock, LeaseStore


def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.01)


def renew_failures(caplog: pytest.LogCaptureFixture, key: str) -> int:
    return sum(1 for r in caplog.records
               if getattr(r, "lease_event", None) == "renew_failed"
               and getattr(r, "lease_key", None) == key)


class Holder:
    """A held lease with a loss callback that notes the wall-clock instant."""

    def __init__(self, store: LeaseStore, key: str, ttl: float, margin: float) -> None:
        self.lock = LeaseLock(store, key, ttl=ttl, heartbeat=1.0, margin=margin,
                              on_lost="check")
        self.lease: Lease = self.lock.acquire()
        self.lost_at: datetime | None = None
        self.lost_event = threading.Event()
        self.lease.on_lost(self._lost)

    def _lost(self, _lease: Lease) -> None:
        self.lost_at = datetime.now(timezone.utc)
        self.lost_event.set()

    def wait_for_renewal(self, timeout: float = 15.0) -> float:
        before = self.lease.trusted_until
        until(lambda: self.lease.trusted_until > before, timeout, "a renewal")
        return self.lease.trusted_until


def assert_still_held(holder: Holder, rival: LeaseStore, key: str) -> None:
    assert not holder.lease.lost and not holder.lost_event.is_set()
    holder.lease.check()
    record = rival.get(key)
    assert record is not None and record.state == "held"
    assert (record.holder, record.token) == (holder.lease.holder, holder.lease.token)
    assert not rival.acquire(key, "rival", "rival", 30, {}).granted

