"""The keeper's trigger: renews a DAG run's lease from the triggerer.

A run whose tasks sit an hour in a queue must keep its lease, but a task that
only sleeps and renews would pin a worker slot all that time. The triggerer
runs thousands of these loops on one event loop instead. It renews as the run's
holder (holder id and token from the acquire task's XCom) on the heartbeat
schedule, and it ends in one of two ways:

- ``released``: the run's release task (the teardown) gave the lease back:
  the renewal is refused and the store's history shows *our* holder released
  *our* token. This is the normal end, and the teardown's release is the
  signal, so there is no second channel to keep consistent.
- ``lost``: a renewal was refused for any other reason (broken from outside,
  expired, taken over), or the store stayed unreachable until the trust window
  (start of the last successful renewal + ttl - margin) closed.

Between renewals it reads the record every ``poll_interval`` (or is woken by a
notifying store), so the end of the run is seen within about a second rather
than at the next renewal. It ends the keeper task itself (``TaskSuccessEvent``
or ``TaskFailedEvent``), so not even the end takes a worker slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TaskFailedEvent, TaskSuccessEvent, TriggerEvent

from lease_integrations import LeaseStore, connect

from .connections import resolve_store_url_async

#: How many of the key's latest events to search for our own release.
HISTORY_DEPTH = 50


class DagRunLeaseKeeperTrigger(BaseTrigger):  # type: ignore[misc]
    """Ends the keeper task: success once the run released its lease, failure
    once the lease is lost. ``outcome`` holds (status, reason, renewals)."""

    def __init__(self, lease_key: str, holder: str, token: int, ttl: float, heartbeat: float,
                 lease_conn_id: str, store_url: str | None = None,
                 poll_interval: float = 1.0, secret: str = "") -> None:
        super().__init__()
        self.lease_key = lease_key
        self.holder = holder
        self.secret = secret  # the owner secret renewals present; never logged
        self.token = int(token)
        self.ttl = float(ttl)
        self.heartbeat = float(heartbeat)
        self.lease_conn_id = lease_conn_id
        self.store_url = store_url  # set only when it carries no password
        self.poll_interval = float(poll_interval)
        self.outcome: tuple[str, str, int] | None = None

    def __repr__(self) -> str:  # BaseTrigger's repr would print the secret
        return (f"<{type(self).__name__} lease_key={self.lease_key!r} holder={self.holder!r} "
                f"token={self.token}>")

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"lease_key": self.lease_key, "holder": self.holder, "token": self.token,
             "ttl": self.ttl, "heartbeat": self.heartbeat, "lease_conn_id": self.lease_conn_id,
             "store_url": self.store_url, "poll_interval": self.poll_interval,
             "secret": self.secret},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        url = self.store_url or await resolve_store_url_async(self.lease_conn_id)
        store = await asyncio.to_thread(connect, url)
        try:
            status, reason, renewals = await self._keep(store)
        finally:
            await asyncio.to_thread(store.close)
        self.outcome = (status, reason, renewals)
        if status == "released":
            self.log.info("run lease %s (token %s) released by the run after %d renewals: %s",
                          self.lease_key, self.token, renewals, reason)
            yield TaskSuccessEvent()
        else:
            self.log.error("run lease %s (token %s) lost after %d renewals: %s", self.lease_key,
                           self.token, renewals, reason)
            yield TaskFailedEvent()

    async def _keep(self, store: LeaseStore) -> tuple[str, str, int]:
        margin = self.ttl / 10
        # Until the first renewal succeeds we only know the acquire task got it
        # no earlier than now - (time in queue): count from now, the renewal says the rest.
        trusted_until = time.monotonic() + self.ttl - margin
        retry = max(0.05, min(1.0, self.heartbeat / 4))
        renewals = 0
        self.log.info("keeping run lease %s (token %s) every %.1f s", self.lease_key, self.token,
                      self.heartbeat)
        while True:
            started = time.monotonic()
            try:
                renewed = await asyncio.wait_for(
                    asyncio.to_thread(store.renew, self.lease_key, self.secret, self.token,
                                      self.ttl),
                    timeout=max(0.05, min(self.heartbeat, trusted_until - started)),
                )
            except Exception as exc:  # transient (or a timeout): retry until trust runs out
                if time.monotonic() >= trusted_until:
                    return "lost", (f"store unreachable until the trust window closed "
                                    f"(last error: {exc!r})"), renewals
                self.log.warning("renewing run lease %s failed (%r); retrying", self.lease_key, exc)
                await asyncio.sleep(retry)
                continue
            if not renewed:
                return (*await asyncio.to_thread(self._why_refused, store), renewals)
            renewals += 1
            trusted_until = started + self.ttl - margin
            if await self._gone_before(store, started + self.heartbeat):
                return (*await asyncio.to_thread(self._why_refused, store), renewals)

    async def _gone_before(self, store: LeaseStore, due: float) -> bool:
        """Watch the record until the next renewal is due; True as soon as it is
        no longer ours (released by the teardown, broken, taken). A failed read
        is left to the next renewal, which owns the trust window."""
        while (left := due - time.monotonic()) > 0:
            wait = min(self.poll_interval, left)
            if store.notifies:
                await asyncio.to_thread(store.wait_for_release, self.lease_key, wait)
            else:
                await asyncio.sleep(wait)
            try:
                record = await asyncio.to_thread(store.get, self.lease_key)
            except Exception:
                continue
            if record is None or record.holder != self.holder or record.token != self.token:
                return True
        return False

    def _why_refused(self, store: LeaseStore) -> tuple[str, str]:
        """A refused renewal is the end either way; the history says which end."""
        for event in reversed(store.history(self.lease_key, limit=HISTORY_DEPTH)):
            if event.token != self.token:
                continue
            if event.kind == "released" and event.holder == self.holder:
                return "released", "the run's release task gave it back"
            if event.kind == "broken":
                by = event.detail.get("by", "someone")
                return "lost", f"broken from outside by {by}"
            if event.kind == "acquired":
                break
        record = store.get(self.lease_key)
        if record is not None and record.token != self.token:
            return "lost", f"taken over with token {record.token} by {record.holder}"
        return "lost", "expired before it could be renewed"
