"""The deferrable wait: a trigger that fires when a lease looks free.

A task waiting hours for a nightly job's lease should not pin a worker slot;
the triggerer watches the store instead. The trigger only *observes* (it
never acquires: a lease taken in the triggerer would be held by a process that
runs no code and renews nothing). When it fires, the task resumes on a worker
and tries to acquire; if another waiter won the race, it defers again.

It never fires sooner than ``settle`` seconds after it started. The worker that
deferred exits, and its executor reports that exit as "success"; if the
scheduler drains that report only after the resumed try is already running,
Airflow fails the resumed try as a "state mismatch" (apache/airflow#72716, open
in 3.3; the scheduled/queued variants were fixed in 3.2/3.3). A lease freed a
second after the deferral would hit exactly that window; holding the event back
gives the scheduler ``settle`` seconds to drain the stale report first. The
trigger starts after the deferral is recorded, so the triggerer's own
monotonic clock measures it: no clocks of two hosts are compared.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from lease_integrations import connect

from .connections import resolve_store_url_async


class LeaseReleasedTrigger(BaseTrigger):  # type: ignore[misc]
    """Fires ``{"key": ..., "free": True, "deadline": ...}`` once the lease on ``lease_key`` is
    released or has expired by the store's clock.

    Resolves the store from the Connection in the triggerer itself, so no
    password travels in the trigger's stored arguments."""

    def __init__(self, lease_key: str, lease_conn_id: str, poll_interval: float = 5.0,
                 deadline: str | None = None, settle: float = 0.0) -> None:
        super().__init__()
        self.settle = float(settle)
        self.deadline = deadline  # echoed back, so repeated deferrals share one wait_timeout
        self.lease_key = lease_key
        self.lease_conn_id = lease_conn_id
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"lease_key": self.lease_key, "lease_conn_id": self.lease_conn_id,
             "poll_interval": self.poll_interval, "deadline": self.deadline,
             "settle": self.settle},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settled_at = time.monotonic() + self.settle
        url = await resolve_store_url_async(self.lease_conn_id)
        store = await asyncio.to_thread(connect, url)
        try:
            while True:
                record = await asyncio.to_thread(store.get, self.lease_key)
                unsettled = settled_at - time.monotonic()
                if (record is None or not record.held) and unsettled > 0:
                    await asyncio.sleep(unsettled)  # then look again: it may be taken by now
                    continue
                if record is None or not record.held:
                    self.log.info("lease %s is free (token %s)", self.lease_key,
                                  record.token if record else None)
                    yield TriggerEvent({"key": self.lease_key, "free": True,
                                        "deadline": self.deadline})
                    return
                # Wake at expiry at the latest; a notifying store wakes us on release.
                delay = min(self.poll_interval, max(0.05, record.expires_in or 0.0))
                await asyncio.to_thread(store.wait_for_release, self.lease_key, delay)
        finally:
            await asyncio.to_thread(store.close)
