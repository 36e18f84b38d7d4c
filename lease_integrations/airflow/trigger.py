"""The deferrable wait: a trigger that fires when a lease looks free.

A task waiting hours for a nightly job's lease should not pin a worker slot;
the triggerer watches the store instead. The trigger only *observes* (it
never acquires: a lease taken in the triggerer would be held by a process that
runs no code and renews nothing). When it fires, the task resumes on a worker
and tries to acquire; if another waiter won the race, it defers again.
"""

from __future__ import annotations

import asyncio
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
                 deadline: str | None = None) -> None:
        super().__init__()
        self.deadline = deadline  # echoed back, so repeated deferrals share one wait_timeout
        self.lease_key = lease_key
        self.lease_conn_id = lease_conn_id
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"lease_key": self.lease_key, "lease_conn_id": self.lease_conn_id,
             "poll_interval": self.poll_interval, "deadline": self.deadline},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        url = await resolve_store_url_async(self.lease_conn_id)
        store = await asyncio.to_thread(connect, url)
        try:
            while True:
                record = await asyncio.to_thread(store.get, self.lease_key)
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
