"""``LeaseLock``: everything above the store cut: waiting, heartbeats, trust
windows and the loss policy. Stores only answer single atomic operations."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from . import metrics
from .backoff import Backoff
from .errors import ConfigurationError, LeaseBusy, LeaseError, LeaseLost
from .heartbeat import get_heartbeat
from .interrupt import Interrupter, interrupter_for_current_thread
from .lease import Lease
from .record import AcquireResult
from .store import LeaseStore
from .validation import (
    ON_LOST_POLICIES,
    validate_heartbeat,
    validate_key,
    validate_policy,
    validate_ttl,
    validate_wait,
)

log = logging.getLogger("lease_integrations")

#: A notifying store is still polled this often, in case a notification is lost.
NOTIFIED_POLL_CAP = 2.0


@functools.lru_cache(maxsize=1)
def _hostname() -> str:
    return socket.gethostname()


def new_holder_id() -> str:
    """The public holder name: readable (host and pid), shown everywhere. It
    proves nothing: renew and release need the owner secret (``new_secret``)."""
    return f"{_hostname()}:{os.getpid()}"


def new_secret() -> str:
    """A fresh owner secret (128 random bits) for one acquire; never logged."""
    return secrets.token_hex(16)


def default_meta() -> dict[str, Any]:
    return {"host": _hostname(), "pid": os.getpid()}


class LeaseLock:
    """A named lease on a store, for one job.

    ``ttl`` is how long the store keeps the lease without a renewal; the
    heartbeat renews every ``heartbeat`` seconds (ttl/3 by default), and the
    holder stops trusting the lease ``margin`` seconds (ttl/10 by default)
    before the store could expire it.
    """

    def __init__(
        self,
        store: LeaseStore,
        key: str,
        ttl: float = 30.0,
        *,
        heartbeat: float | None = None,
        margin: float | None = None,
        on_lost: str = "interrupt",
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(store, LeaseStore):
            raise ConfigurationError(
                f"store must be a LeaseStore (use lease_integrations.connect(url)), "
                f"got {type(store).__name__}"
            )
        self.store = store
        self.key = validate_key(key)
        self.ttl = validate_ttl(ttl)
        self.heartbeat = validate_heartbeat(heartbeat, self.ttl)
        self.margin = self._validate_margin(margin)
        self.on_lost = validate_policy(on_lost, ON_LOST_POLICIES, "on_lost")
        self.meta = dict(meta or {})
        self._interrupters: dict[int, Interrupter] = {}
        self._mutex = threading.Lock()

    def _validate_margin(self, margin: float | None) -> float:
        if margin is None:
            return self.ttl / 10
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin < 0:
            raise ConfigurationError(f"margin must be a non-negative number of seconds, got {margin!r}")
        if self.heartbeat + margin >= self.ttl:
            raise ConfigurationError(
                f"margin={margin!r} leaves no room to renew: heartbeat ({self.heartbeat:g} s) "
                f"+ margin must be shorter than ttl ({self.ttl:g} s)"
            )
        return float(margin)

    def __repr__(self) -> str:
        return f"<LeaseLock key={self.key!r} ttl={self.ttl:g} store={self.store.url}>"

    # -- sync -------------------------------------------------------------------
    def acquire(self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None) -> Lease:
        """Take the lease. ``wait=0`` raises ``LeaseBusy`` at once if it is
        held, ``wait=None`` waits forever, ``wait=5.0`` waits up to 5 s."""
        limit = validate_wait(wait)
        holder, full_meta = self._identity(meta)
        secret = new_secret()
        deadline = None if limit is None else time.monotonic() + limit
        backoff = Backoff()
        while True:
            started = time.monotonic()
            result = self.store.acquire(self.key, holder, secret, self.ttl, full_meta)
            if result.granted:
                return self._start(result, started, interrupt=self.on_lost == "interrupt",
                                   secret=secret)
            delay = self._next_wait(result, backoff, deadline)
            if delay is None:
                raise self._busy(result)
            self.store.wait_for_release(self.key, delay)

    def release(self, lease: Lease) -> bool:
        """Give the lease back. Only touches the store's record if it still
        carries this lease's holder and token; True when it did."""
        get_heartbeat().remove(lease)
        self._disarm(lease)
        if lease.released:
            return False
        try:
            released = self.store.release(lease.key, lease.secret, lease.token)
        finally:
            lease.mark_released()
        metrics.released(lease)
        log.info(
            "released lease %s (token %s)%s", lease.key, lease.token,
            "" if released else " (the store no longer had it)",
            extra={"lease_event": "release", "lease_key": lease.key,
                   "lease_token": lease.token, "lease_holder": lease.holder},
        )
        return released

    @contextmanager
    def hold(self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None) -> Iterator[Lease]:
        """Run a block under the lease. If the lease is lost the block ends with
        ``LeaseLost`` (at once under ``on_lost="interrupt"``, else at the next
        ``lease.check()`` or at the latest when the block ends): a block that
        lost its lease never ends as a success."""
        lease = self.acquire(wait, meta=meta)
        try:
            yield lease
        except BaseException:
            self._release_quietly(lease)
            raise
        self._release_quietly(lease)
        lease.check()  # a block that finished after losing its lease did not succeed

    # -- async -------------------------------------------------------------------
    async def acquire_async(
        self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None
    ) -> Lease:
        """``acquire`` for asyncio code: store calls run in a worker thread so
        the event loop keeps running while we wait."""
        limit = validate_wait(wait)
        holder, full_meta = self._identity(meta)
        secret = new_secret()
        deadline = None if limit is None else time.monotonic() + limit
        backoff = Backoff()
        while True:
            started = time.monotonic()
            result = await self._acquire_attempt_async(holder, secret, full_meta)
            if result.granted:
                return self._start(result, started, interrupt=False, secret=secret)
            delay = self._next_wait(result, backoff, deadline)
            if delay is None:
                raise self._busy(result)
            if self.store.notifies:
                await asyncio.to_thread(self.store.wait_for_release, self.key, delay)
            else:
                await asyncio.sleep(delay)

    async def _acquire_attempt_async(self, holder: str, secret: str,
                                     meta: dict[str, Any]) -> AcquireResult:
        attempt = asyncio.ensure_future(
            asyncio.to_thread(self.store.acquire, self.key, holder, secret, self.ttl, meta)
        )
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            # Cancelled while the store may be granting: give back what we got.
            attempt.add_done_callback(functools.partial(self._release_orphan, secret))
            raise

    def _release_orphan(self, secret: str, attempt: asyncio.Future[AcquireResult]) -> None:
        if attempt.cancelled() or attempt.exception() is not None:
            return
        record = attempt.result().record
        if attempt.result().granted and record is not None and record.holder is not None:
            try:
                self.store.release(record.key, secret, record.token)
            except Exception:
                log.warning("could not release orphaned lease %s; it expires after its ttl",
                            record.key, exc_info=True)

    async def release_async(self, lease: Lease) -> bool:
        return await asyncio.to_thread(self.release, lease)

    @asynccontextmanager
    async def hold_async(
        self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None
    ) -> AsyncIterator[Lease]:
        """``hold`` for asyncio code. Under ``on_lost="interrupt"`` the task
        running the block is cancelled on loss and the block ends with
        ``LeaseLost``."""
        lease = await self.acquire_async(wait, meta=meta)
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        cancelled_by_us = False
        inside = True

        def cancel() -> None:
            nonlocal cancelled_by_us
            if inside and task is not None and not task.done():
                cancelled_by_us = True
                task.cancel(f"lease {lease.key!r} lost")

        if self.on_lost == "interrupt":
            def cancel_from_heartbeat(_lease: Lease) -> None:
                loop.call_soon_threadsafe(cancel)

            lease.on_lost(cancel_from_heartbeat)
        try:
            yield lease
        except asyncio.CancelledError:
            inside = False
            await self._release_quietly_async(lease)
            if cancelled_by_us:
                if task is not None and sys.version_info >= (3, 11):
                    task.uncancel()
                raise LeaseLost(lease.key, lease.token, lease.lost_reason or "") from None
            raise
        except BaseException:
            inside = False
            await self._release_quietly_async(lease)
            raise
        inside = False
        await self._release_quietly_async(lease)
        lease.check()

    # -- shared steps ----------------------------------------------------------
    def _identity(self, meta: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
        full = default_meta()
        full.update(self.meta)
        if meta:
            full.update(meta)
        return new_holder_id(), full

    def _next_wait(
        self, result: AcquireResult, backoff: Backoff, deadline: float | None
    ) -> float | None:
        """How long to wait before the next attempt, or None to give up."""
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return None
        delay = backoff.next_delay()
        expires_in = result.record.expires_in if result.record else None
        if self.store.notifies:
            # Woken on release; otherwise try again when the lease would expire.
            delay = min(NOTIFIED_POLL_CAP, max(delay, expires_in or 0.0))
        elif expires_in is not None and expires_in > 0:
            delay = min(delay, expires_in + 0.001)
        return delay if remaining is None else min(delay, remaining)

    def _busy(self, result: AcquireResult) -> LeaseBusy:
        busy = LeaseBusy(self.key, result.record)
        metrics.busy(self.key)
        log.info(str(busy), extra={"lease_event": "busy", "lease_key": self.key,
                                   "lease_holder": busy.holder, "lease_token": busy.token})
        return busy

    def _start(self, result: AcquireResult, started: float, *, interrupt: bool,
               secret: str) -> Lease:
        assert result.record is not None
        lease = Lease(result.record, ttl=self.ttl, margin=self.margin, attempt_started=started,
                      secret=secret)
        if interrupt:
            interrupter = interrupter_for_current_thread()
            with self._mutex:
                self._interrupters[id(lease)] = interrupter
            lease.on_lost(interrupter.fire)
        get_heartbeat().add(lease, self.store, self.heartbeat)
        metrics.acquired(lease, time.monotonic() - started)
        log.info(
            "acquired lease %s (token %s) as %s", lease.key, lease.token, lease.holder,
            extra={"lease_event": "acquire", "lease_key": lease.key,
                   "lease_token": lease.token, "lease_holder": lease.holder},
        )
        return lease

    def _disarm(self, lease: Lease) -> None:
        with self._mutex:
            interrupter = self._interrupters.pop(id(lease), None)
        if interrupter is not None:
            interrupter.disarm()

    def _release_quietly(self, lease: Lease) -> None:
        """Release on the way out of a block without masking the block's own
        outcome: if the store is unreachable, the ttl is the backstop."""
        while True:
            try:
                self.release(lease)
                return
            except LeaseLost:
                continue  # the interrupt landed inside release: finish releasing
            except LeaseError as exc:
                log.warning("could not release lease %s (token %s): %s; it expires after its ttl",
                            lease.key, lease.token, exc)
                return

    async def _release_quietly_async(self, lease: Lease) -> None:
        try:
            await asyncio.to_thread(self._release_quietly, lease)
        except asyncio.CancelledError:
            self._release_quietly(lease)
            raise
