"""``LeaseLock``: everything above the store cut: waiting, heartbeats, trust
windows and the loss policy. Stores only answer single atomic operations."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Literal

from . import interrupt, metrics
from .backoff import Backoff
from .errors import ConfigurationError, LeaseBusy, LeaseError, LeaseLost
from .heartbeat import get_heartbeat
from .lease import Lease
from .record import AcquireResult
from .store import LeaseStore
from .validation import (
    ON_LOST_POLICIES,
    validate_heartbeat,
    validate_key,
    validate_meta,
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
    return os.urandom(16).hex()  # what secrets.token_hex(16) does, two calls fewer


def default_meta() -> dict[str, Any]:
    return {"host": _hostname(), "pid": os.getpid()}


class LeaseLock:
    """A named lease on a store, for one job.

    ``ttl`` is how long the store keeps the lease without a renewal; the
    heartbeat renews every ``heartbeat`` seconds (ttl/3 by default), and the
    holder stops trusting the lease ``margin`` seconds (ttl/10 by default)
    before the store could expire it.
    """

    #: (pid, the lock's meta, the full validated meta): see ``_identity``.
    _meta_cache: tuple[int, dict[str, Any], dict[str, Any]] | None = None

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
        self.meta = validate_meta(meta)

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
        held, ``wait=None`` waits forever, ``wait=5.0`` waits up to 5 s.
        Arms no interrupt: only ``hold()`` protects a block."""
        return self._acquire(wait, meta, shield=False)

    def _acquire(self, wait: float | None, meta: Mapping[str, Any] | None, *,
                 shield: bool) -> Lease:
        """With ``shield``, each store attempt runs shielded and a granted
        lease is returned with the shield still up (the hold arms it)."""
        limit = validate_wait(wait)
        holder, full_meta = self._identity(meta)
        secret = new_secret()
        deadline = None if limit is None else time.monotonic() + limit
        backoff: Backoff | None = None  # made on the first busy answer only
        while True:
            started = time.monotonic()
            if shield:
                interrupt.shield_up()
            try:
                result = self.store.acquire(self.key, holder, secret, self.ttl, full_meta)
                if result.granted:  # registered on the heartbeat by the hold
                    return self._start(result, started, secret, register=not shield)
            except BaseException:
                if shield:
                    interrupt.lower()
                raise
            if shield:
                interrupt.lower()
            backoff = backoff or Backoff()
            delay = self._next_wait(result, backoff, deadline)
            if delay is None:
                raise self._busy(result)
            self.store.wait_for_release(self.key, delay)

    def release(self, lease: Lease) -> bool:
        """Give the lease back. Only touches the store's record if it still
        carries this lease's holder and token; True when it did."""
        get_heartbeat().remove(lease)
        if lease.released:
            return False
        try:
            released = self.store.release(lease.key, lease.secret, lease.token)
        finally:
            lease.mark_released()
        metrics.released(lease)
        if log.isEnabledFor(logging.INFO):  # the extra dict costs even when dropped
            log.info(
                "released lease %s (token %s)%s", lease.key, lease.token,
                "" if released else " (the store no longer had it)",
                extra={"lease_event": "release", "lease_key": lease.key,
                       "lease_token": lease.token, "lease_holder": lease.holder},
            )
        return released

    def hold(self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None) -> Hold:
        """Run a block under the lease. If the lease is lost, ``LeaseInterrupted``
        lands in the block (``on_lost="interrupt"``; else ``lease.check()``
        raises) and the block ends with ``LeaseLost``; also when the store
        refuses the release or the trust window closed before the block
        ended: a block that lost its lease never ends as a success."""
        return Hold(self, lambda: self._acquire(wait, meta, shield=True), release=True)

    # -- adopt: continue a lease another process acquired ---------------------
    def adopt(self, token: int, secret: str) -> Lease:
        """Continue the lease with ``token`` that another process acquired and
        handed over (its ``lease.secret``): renew it once at once (``LeaseLost``
        if the store refuses: it is no longer that lease), trust it from that
        attempt's start and keep renewing it on the heartbeat. Arms nothing:
        ``hold_adopted`` protects a block."""
        return self._adopt(token, secret, shield=False)

    def _adopt(self, token: int, secret: str, *, shield: bool) -> Lease:
        if shield:
            interrupt.shield_up()
        try:
            started = time.monotonic()
            record = self.store.get(self.key) if self.store.renew(
                self.key, secret, token, self.ttl) else None
            if record is None or record.token != token or record.holder is None:
                raise LeaseLost(self.key, token, "the store refused to renew the lease to adopt")
            return self._start(AcquireResult(True, record), started, secret=secret,
                               register=not shield)
        except BaseException:
            if shield:
                interrupt.lower()
            raise

    def forget(self, lease: Lease) -> None:
        """Stop renewing ``lease`` and disarm it without releasing it: the
        store keeps it (another process carries on) until its ttl."""
        get_heartbeat().remove(lease)
        lease.mark_released()  # drops the loss callbacks: nothing fires any more

    def hold_adopted(self, token: int, secret: str, *, release: bool = False) -> Hold:
        """``adopt`` for the length of a block, with the interrupt armed as in
        ``hold``; on exit stop renewing and leave the lease in the store
        (another process keeps it) unless ``release=True``."""
        return Hold(self, lambda: self._adopt(token, secret, shield=True), release=release)

    def _end(self, lease: Lease, release: bool) -> bool:
        """Stop renewing and (unless handing over) release. True when the store
        refused the release: proof that the lease was lost during the block."""
        if not release or lease.released:
            self.forget(lease)
            return False
        try:
            return not self.release(lease)
        except LeaseError as exc:  # unreachable: the ttl is the backstop
            log.warning("could not release lease %s (token %s): %s; it expires after its ttl",
                        lease.key, lease.token, exc)
            return False

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
                return self._start(result, started, secret)
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

    def hold_async(
        self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None
    ) -> AbstractAsyncContextManager[Lease]:
        """``hold`` for asyncio code: on loss the task running the block is
        cancelled, and the block ends with ``LeaseLost``."""
        return self._held_async(lambda: self.acquire_async(wait, meta=meta), release=True)

    def hold_adopted_async(
        self, token: int, secret: str, *, release: bool = False
    ) -> AbstractAsyncContextManager[Lease]:
        """``hold_adopted`` for asyncio code."""
        return self._held_async(lambda: asyncio.to_thread(self.adopt, token, secret),
                                release=release)

    @asynccontextmanager
    async def _held_async(self, take: Callable[[], Awaitable[Lease]],
                          release: bool) -> AsyncIterator[Lease]:
        lease = await take()
        block = interrupt.arm(lease, stacked=False) if self.on_lost == "interrupt" else None
        try:
            yield lease
        except BaseException as exc:
            error = await self._leave_async(lease, block, release, exc)
            if error is None:
                raise
            raise error from exc
        error = await self._leave_async(lease, block, release, None)
        if error is not None:
            raise error

    async def _leave_async(self, lease: Lease, block: interrupt.Block | None, release: bool,
                           exc: BaseException | None) -> LeaseLost | None:
        if block is not None:
            block.armed = False  # the task runs this: no cancel of ours is on its way
        closed = not lease.released and time.monotonic() >= lease.trusted_until
        # Finishes in its thread even if this task is cancelled meanwhile.
        refused = await asyncio.to_thread(self._end, lease, release)
        return verdict(lease, block, exc, refused=refused, closed=closed)

    # -- shared steps ----------------------------------------------------------
    def _identity(self, meta: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
        if not meta:  # the usual call: the lock's own meta, validated once per process
            cached = self._meta_cache
            if cached is not None and cached[0] == os.getpid() and cached[1] == self.meta:
                return new_holder_id(), dict(cached[2])
        full = default_meta()
        full.update(self.meta)
        full.update(validate_meta(meta))
        checked = validate_meta(full)
        if not meta:
            self._meta_cache = (os.getpid(), dict(self.meta), checked)
        return new_holder_id(), dict(checked)

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

    def _start(self, result: AcquireResult, started: float, secret: str, *,
               register: bool = True) -> Lease:
        assert result.record is not None
        lease = Lease(result.record, ttl=self.ttl, margin=self.margin, attempt_started=started,
                      secret=secret)
        metrics.acquired(lease, time.monotonic() - started)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "acquired lease %s (token %s) as %s", lease.key, lease.token, lease.holder,
                extra={"lease_event": "acquire", "lease_key": lease.key,
                       "lease_token": lease.token, "lease_holder": lease.holder},
            )
        if register:
            get_heartbeat().add(lease, self.store, self.heartbeat)
        return lease



class Hold:
    """The context manager ``hold()`` and ``hold_adopted()`` return.

    Enter and exit are ``guarded`` (no interrupt lands in their frames) and
    their store calls run shielded, so an interrupt never cuts the library's
    bookkeeping short: a lease is either armed and released, or never taken.
    """

    def __init__(self, lock: LeaseLock, take: Callable[[], Lease], *, release: bool) -> None:
        self.lock = lock
        self._take = take
        self._release = release
        self.lease: Lease | None = None
        self.block: interrupt.Block | None = None

    @interrupt.guarded
    def __enter__(self) -> Lease:
        depth = interrupt.depth()
        self.lease = lease = self._take()  # granted with this thread's shield up
        try:  # whatever lands from here on (a KeyboardInterrupt), __exit__ cleans up
            get_heartbeat().add(lease, self.lock.store, self.lock.heartbeat)
            if self.lock.on_lost == "interrupt":
                self.block = interrupt.arm(lease)
                self.block.abandon = lambda: self.lock._end(lease, self._release)
            pending = interrupt.shield_down()
            if pending is not None:  # lost meanwhile (ours or an outer block's)
                interrupt.deliver(pending)  # as if at the block's first bytecode
        except BaseException as exc:
            interrupt.depth(depth)  # the shield as before, whether lowered or not
            self.__exit__(type(exc), exc, exc.__traceback__)  # LeaseLost if ours
            raise
        return lease

    @interrupt.guarded
    def __exit__(self, etype: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        lease, block = self.lease, self.block
        assert lease is not None
        interrupt.shield_up()
        closed = not lease.released and time.monotonic() >= lease.trusted_until
        for inner in interrupt.disarm(block) if block is not None else []:
            try:
                inner.abandon()  # a hold inside ours whose exit was cut short
            except Exception:
                log.exception("could not end the lease of an abandoned block")
        refused = self.lock._end(lease, self._release)
        pending = interrupt.shield_down()
        error = verdict(lease, block, exc, refused=refused, closed=closed)
        if pending is not None:
            interrupt.deliver(pending)  # an outer block's loss: it wins
        if error is not None:
            raise error from exc
        return False


def verdict(lease: Lease, block: interrupt.Block | None, exc: BaseException | None, *,
            refused: bool, closed: bool) -> LeaseLost | None:
    """How a block ends: ``LeaseLost`` when its own interrupt ended it, or when
    it ended normally although its lease was lost (flagged, refused by the store
    at release, or past its trust window); else as it would have."""
    own = block is not None and (isinstance(exc, block.error) or (
        block.cancelled and isinstance(exc, asyncio.CancelledError)))
    if block is not None and block.cancelled and block.task is not None \
            and sys.version_info >= (3, 11):
        block.task.uncancel()
    if not own and (exc is not None or not (lease.lost or refused or closed)):
        return None
    reason = lease.lost_reason or ("the store no longer had the lease at release" if refused
                                   else "the trust window closed before the block ended")
    return LeaseLost(lease.key, lease.token, reason)
