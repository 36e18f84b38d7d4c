"""``LeaseLock``: everything above the store cut: waiting, heartbeats, trust
windows and the loss policy. Stores only answer single atomic operations.

What a loss does to a running block is the policy (``on_lost``): ``exit``
ends the process (``failstop``), ``check`` only reports it, ``cancel``
cancels the ``hold_async()`` task at every await until the block ends. No
policy injects exceptions into running threads: CPython cannot do that
without corrupting the locks and state the process keeps using."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Literal, overload

from .core import metrics
from .core.backoff import Backoff
from .core.clock import now
from .core.errors import (
    ConfigurationError,
    LeaseBusy,
    LeaseError,
    LeaseLost,
    NotReentrant,
    StoreUnavailable,
)
from .core.lease import Lease
from .core.record import AcquireResult
from .core.store import LeaseStore
from .core.supersede_guards import SupersedeGuard, validate_guard
from .core.validation import (
    ON_LOST_POLICIES,
    validate_heartbeat,
    validate_key,
    validate_meta,
    validate_on_lost,
    validate_policy,
    validate_ttl,
    validate_wait,
)
from .keeper.client import Renewer, get_keeper, keeps
from .keeper.failstop import release_on_sigterm, stop_process
from .keeper.heartbeat import get_heartbeat

log = logging.getLogger("lease_integrations")

#: A notifying store is still polled this often, in case a notification is lost.
NOTIFIED_POLL_CAP = 2.0

#: (store URL, key) of every lease the blocks enclosing this code hold, per
#: thread and asyncio task: a nested hold of the same key would wait on itself.
_enclosing: ContextVar[frozenset[tuple[str, str]]] = ContextVar("lease_enclosing",
                                                                 default=frozenset())


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
    holder stops trusting the lease ``margin`` seconds (ttl/5 by default)
    before the store could expire it. Under ``on_lost="exit"`` the process
    then ends within ``0.8 * margin``, giving its child processes ``grace``
    seconds (margin/4 by default, at most margin/2) between SIGTERM and SIGKILL.
    """

    #: (pid, the lock's meta, the full validated meta, the holder name): see ``_identity``.
    _meta_cache: tuple[int, dict[str, Any], dict[str, Any], str] | None = None

    def __init__(
        self,
        store: LeaseStore,
        key: str,
        ttl: float = 30.0,
        *,
        heartbeat: float | None = None,
        margin: float | None = None,
        grace: float | None = None,
        on_lost: str = "exit",
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
        self.grace = self._validate_grace(grace)
        self.on_lost = validate_policy(on_lost, ON_LOST_POLICIES, "on_lost")
        #: Its blocks stop the process on loss: the keeper arms its stop for them.
        self._fail_stop = self.on_lost == "exit"
        self.meta = validate_meta(meta)
        #: This lock's entry in the enclosing blocks' set (see ``_enter_scope``).
        self._scope = frozenset({(store.url, self.key)})
        #: Whether the keeper process renews (and enforces) this store's leases.
        self._kept = keeps(store)
        if self._kept:
            get_keeper().prepare(store)

    def _validate_margin(self, margin: float | None) -> float:
        if margin is None:
            return self.ttl / 5
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin < 0:
            raise ConfigurationError(f"margin must be a non-negative number of seconds, got {margin!r}")
        if self.heartbeat + margin >= self.ttl:
            raise ConfigurationError(
                f"margin={margin!r} leaves no room to renew: heartbeat ({self.heartbeat:g} s) "
                f"+ margin must be shorter than ttl ({self.ttl:g} s)"
            )
        return float(margin)

    def _validate_grace(self, grace: float | None) -> float:
        """The fail-stop ladder must end before the store can expire the lease:
        steps before the kill need time too, so the grace gets half the margin
        at most (see ``failstop``)."""
        if grace is None:
            return self.margin / 4
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not (
                0 <= grace <= self.margin / 2):
            raise ConfigurationError(
                f"grace={grace!r} must be a number of seconds from 0 to margin/2 "
                f"({self.margin / 2:g} s): a process stopped on loss must be gone before "
                f"the store can grant the lease again (raise margin to allow more)")
        return float(grace)

    def __repr__(self) -> str:
        return f"<LeaseLock key={self.key!r} ttl={self.ttl:g} store={self.store.url}>"

    # -- sync -------------------------------------------------------------------
    def acquire(self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None,
                supersede: bool = False, supersede_if: SupersedeGuard | None = None) -> Lease:
        """Take the lease. ``wait=0`` raises ``LeaseBusy`` at once if it is
        held, ``wait=None`` waits forever, ``wait=5.0`` waits up to 5 s.
        ``supersede=True`` replaces a holder instead (``keeper/supersede``),
        if ``supersede_if(holder_meta, new_meta)`` allows it.
        No policy applies: only a ``hold()`` block is stopped on loss."""
        return self._take(wait, meta, supersede, supersede_if, armed=False)

    def _take(self, wait: float | None, meta: Mapping[str, Any] | None, supersede: bool,
              guard: SupersedeGuard | None, *, armed: bool) -> Lease:
        if not supersede:
            validate_guard(guard, supersede)
            return self._acquire(wait, meta, armed=armed)
        from .keeper.supersede import supersede_acquire

        return supersede_acquire(self, wait, meta, validate_guard(guard), armed=armed)

    def _acquire(self, wait: float | None, meta: Mapping[str, Any] | None, *,
                 armed: bool) -> Lease:
        limit = validate_wait(wait)
        holder, full_meta = self._identity(meta)
        secret = new_secret()
        deadline = None if limit is None else time.monotonic() + limit
        renewer = self._renewer()
        backoff: Backoff | None = None  # made on the first busy answer only
        late = False
        while True:
            started = now()
            result = self.store.acquire(self.key, holder, secret, self.ttl, full_meta)
            if result.granted:
                if self._answered_in_window(started):
                    return self._start(result, started, secret, renewer, armed=armed)
                self._give_back_late(result, started, secret, again=late)
                late = True
                continue
            backoff = backoff or Backoff()
            delay = self._next_wait(result, backoff, deadline)
            if delay is None:
                raise self._busy(result)
            self.store.wait_for_release(self.key, delay)

    def release(self, lease: Lease) -> bool:
        """Give the lease back. Only touches the store's record if it still
        carries this lease's holder and token; True when it did."""
        if lease.pid != os.getpid():
            return False  # a forked child never releases its parent's lease
        (lease.kept_by or get_heartbeat()).remove(lease)  # first: see Keeper.remove
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

    def hold(self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None,
             supersede: bool = False, supersede_if: SupersedeGuard | None = None) -> Hold:
        """Run a block under the lease. If the lease is lost while it runs,
        ``on_lost="exit"`` ends the process (see ``failstop``); ``"check"``
        leaves the block running (``lease.lost``, ``lease.check()``). The block
        ends with ``LeaseLost`` whenever the lease was lost, the store refused
        the release or the trust window closed: never as a success.
        ``supersede``, ``supersede_if``: as for ``acquire``."""
        validate_guard(supersede_if, supersede)
        return Hold(self, lambda: self._take(wait, meta, supersede, supersede_if,
                                             armed=self._fail_stop), release=True)

    def run_in_subprocess(self, target: Callable[..., Any], args: tuple[Any, ...] = (),
                          kwargs: Mapping[str, Any] | None = None, *,
                          wait: float | None = 0) -> Any:
        """Run ``target(*args, **kwargs)`` under the lease in a child process
        and return its result. On loss the child and every process it started
        are ended and this raises ``LeaseLost``; the caller is never stopped,
        whatever ``on_lost`` says: for services and notebooks that must
        outlive a loss. The child reads its fencing token from ``LEASE_TOKEN``."""
        from .keeper.isolated import run_in_subprocess

        return run_in_subprocess(self, target, tuple(args), dict(kwargs or {}), wait)

    # -- adopt: continue a lease another process acquired ---------------------
    def adopt(self, token: int, secret: str) -> Lease:
        """Continue the lease with ``token`` that another process acquired and
        handed over (its ``lease.secret``): renew it once at once (``LeaseLost``
        if the store refuses: it is no longer that lease), trust it from that
        attempt's start and keep renewing it on the heartbeat. No policy
        applies: ``hold_adopted`` protects a block."""
        return self._adopt(token, secret, armed=False)

    def _adopt(self, token: int, secret: str, *, armed: bool) -> Lease:
        renewer = self._renewer()
        started = now()
        record = self.store.get(self.key) if self.store.renew(
            self.key, secret, token, self.ttl) else None
        if record is None or record.token != token or record.holder is None:
            raise LeaseLost(self.key, token, "the store refused to renew the lease to adopt")
        if not self._answered_in_window(started):
            raise LeaseLost(self.key, token, f"the renewal to adopt answered after "
                            f"{now() - started:.3g} s, past its trust window "
                            f"(ttl - margin = {self.ttl - self.margin:g} s)")
        return self._start(AcquireResult(True, record), started, secret, renewer, armed=armed,
                           adopted=True)

    def forget(self, lease: Lease) -> None:
        """Stop renewing ``lease`` and disarm it without releasing it: the
        store keeps it (another process carries on) until its ttl."""
        (lease.kept_by or get_heartbeat()).remove(lease)
        lease.mark_released()  # drops the loss callbacks: nothing fires any more

    def hold_adopted(self, token: int, secret: str, *, release: bool = False) -> Hold:
        """``adopt`` for the length of a block, under the lock's ``on_lost``
        policy as in ``hold``; on exit stop renewing and leave the lease in the
        store (another process keeps it) unless ``release=True``. Without it
        the lease is renewed once on exit: one broken (and perhaps granted
        again) during the block ends it with ``LeaseLost``, not as a success."""
        return Hold(self, lambda: self._adopt(token, secret, armed=self._fail_stop),
                    release=release)

    def _end(self, lease: Lease, release: bool) -> str | None:
        """Stop renewing and release (or, when handing over, confirm the lease
        is still ours). Returns why the block cannot count as a success, or
        None: the store refused, or could not be asked. A release that did
        not reach the store proves nothing: the lease may have been broken
        and granted to someone else meanwhile, so it is not a success either."""
        if lease.released:
            self.forget(lease)
            return None
        if not release:
            why = None if lease.lost.is_set() else self._confirm(lease)
            self.forget(lease)
            return why
        try:
            return None if self.release(lease) else "the store no longer had the lease at release"
        except LeaseError as exc:  # the ttl frees it; whether it was still ours is unknown
            log.warning("could not release lease %s (token %s): %s; it expires after its ttl",
                        lease.key, lease.token, exc)
            return (f"the release could not be confirmed ({exc}): the lease may have been "
                    "broken and granted to another holder during the block")

    def _confirm(self, lease: Lease) -> str | None:
        """An adopted lease left to its other holders: one renewal says
        whether it is still the lease this block ran under."""
        try:
            if self.store.renew(lease.key, lease.secret, lease.token, lease.ttl):
                return None
            return "the store refused to confirm the lease at the block's end"
        except LeaseError as exc:
            return (f"the lease could not be confirmed at the block's end ({exc}): it may have "
                    "been broken and granted to another holder during the block")

    # -- async -------------------------------------------------------------------
    async def acquire_async(
        self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None,
        supersede: bool = False, supersede_if: SupersedeGuard | None = None,
    ) -> Lease:
        """``acquire`` for asyncio code: store calls run in a worker thread so
        the event loop keeps running while we wait. ``supersede``,
        ``supersede_if``: as for ``acquire``."""
        validate_guard(supersede_if, supersede)
        return await self._take_async(wait, meta, supersede, supersede_if, armed=False)

    async def _take_async(self, wait: float | None, meta: Mapping[str, Any] | None,
                          supersede: bool, guard: SupersedeGuard | None, *,
                          armed: bool) -> Lease:
        if not supersede:
            return await self._acquire_async(wait, meta, armed=armed)
        from .keeper.supersede import supersede_acquire_async

        return await supersede_acquire_async(self, wait, meta, guard, armed=armed)

    async def _acquire_async(self, wait: float | None, meta: Mapping[str, Any] | None, *,
                             armed: bool) -> Lease:
        limit = validate_wait(wait)
        holder, full_meta = self._identity(meta)
        secret = new_secret()
        deadline = None if limit is None else time.monotonic() + limit
        # A thread only when there is something to wait for (a starting keeper).
        renewer = self._renewer(wait=False)
        if renewer is None:
            renewer = await asyncio.to_thread(self._renewer, True)
        backoff = Backoff()
        late = False
        while True:
            started = now()
            result = await self._acquire_attempt_async(holder, secret, full_meta)
            if result.granted:
                if self._answered_in_window(started):
                    return self._start(result, started, secret, renewer, armed=armed)
                await asyncio.to_thread(self._give_back_late, result, started, secret, again=late)
                late = True
                continue
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
        self, wait: float | None = 0, *, meta: Mapping[str, Any] | None = None,
        supersede: bool = False, supersede_if: SupersedeGuard | None = None,
    ) -> AbstractAsyncContextManager[Lease]:
        """``hold`` for asyncio code; ``on_lost="cancel"`` cancels the task
        running the block, and again at each later ``await`` until the block
        ends (as Trio's cancel scopes do), which then raises ``LeaseLost``.
        ``supersede``, ``supersede_if``: as for ``acquire`` (a bad guard is
        refused here, before the block is entered)."""
        validate_guard(supersede_if, supersede)
        return self._held_async(
            lambda: self._take_async(wait, meta, supersede, supersede_if,
                                     armed=self._fail_stop), release=True)

    def hold_adopted_async(
        self, token: int, secret: str, *, release: bool = False
    ) -> AbstractAsyncContextManager[Lease]:
        """``hold_adopted`` for asyncio code."""
        return self._held_async(lambda: asyncio.to_thread(
            functools.partial(self._adopt, token, secret, armed=self._fail_stop)),
                                release=release)

    @asynccontextmanager
    async def _held_async(self, take: Callable[[], Awaitable[Lease]],
                          release: bool) -> AsyncIterator[Lease]:
        release_on_sigterm()
        self._enter_scope()
        try:
            async with self._held_async_body(take, release) as lease:
                yield lease
        finally:
            self._leave_scope()

    @asynccontextmanager
    async def _held_async_body(self, take: Callable[[], Awaitable[Lease]],
                               release: bool) -> AsyncIterator[Lease]:
        lease = await take()
        canceller = Canceller(lease) if self.on_lost == "cancel" else None
        if self._fail_stop and not lease.arm_fail_stop(stop_process):
            await asyncio.to_thread(self._end, lease, release)
            raise LeaseLost(lease.key, lease.token, lease.lost_reason or "")
        try:
            yield lease
        except BaseException as exc:
            error = await self._leave_async(lease, canceller, release, exc)
            if error is None:
                raise
            raise error from exc
        error = await self._leave_async(lease, canceller, release, None)
        if error is not None:
            raise error

    async def _leave_async(self, lease: Lease, canceller: Canceller | None, release: bool,
                           exc: BaseException | None) -> BaseException | None:
        lease.disarm()
        cancelled = canceller is not None and canceller.stop()
        closed = not lease.released and lease.window_closed()
        # The release finishes in its thread whatever happens to this task; a
        # cancel of ours still on its way must not cut the wait for it short.
        ending = asyncio.ensure_future(asyncio.to_thread(self._end, lease, release))
        while True:
            try:
                refused = await asyncio.shield(ending)
                break
            except asyncio.CancelledError:
                if not cancelled:
                    raise
        if cancelled and canceller is not None and canceller.cancelled_by_others():
            return asyncio.CancelledError()  # someone else cancelled the task too: theirs wins
        return verdict(lease, exc, refused=refused, closed=closed, cancelled=cancelled)

    # -- shared steps ----------------------------------------------------------
    def _enter_scope(self) -> None:
        """Note this key as held by the enclosing blocks of this thread or task,
        or raise ``NotReentrant`` at once if it already is. A set, not a stack:
        blocks may end out of order (a generator's hold closed inside another)."""
        enclosing = _enclosing.get()
        if not enclosing.isdisjoint(self._scope):
            raise NotReentrant(self.key, self.store.get(self.key))
        _enclosing.set(enclosing | self._scope if enclosing else self._scope)

    def _leave_scope(self) -> None:
        _enclosing.set(_enclosing.get() - self._scope)

    def _identity(self, meta: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
        if not meta:  # the usual call: the lock's own meta, validated once per process
            cached = self._meta_cache
            if cached is not None and cached[0] == os.getpid() and cached[1] == self.meta:
                return cached[3], dict(cached[2])
        full = default_meta()
        full.update(self.meta)
        full.update(validate_meta(meta))
        checked = validate_meta(full)
        holder = new_holder_id()
        if not meta:
            self._meta_cache = (os.getpid(), dict(self.meta), checked, holder)
        return holder, dict(checked)

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

    def _answered_in_window(self, started: float) -> bool:
        """Whether an answer to an attempt begun at ``started`` came while it
        can still be trusted: the rule a Lease's own trust window keeps."""
        return now() < started + self.ttl - self.margin

    def _give_back_late(self, result: AcquireResult, started: float, secret: str, *,
                        again: bool) -> None:
        """A grant that reaches us after its trust window closed (this process
        was paused, or the store answered that slowly) may already have
        expired in the store and been granted to someone else: using it would
        overlap them. Give it back (refused harmlessly if it is no longer
        ours) and ask again; the answer to that says who holds the key now.
        A second late grant means the store cannot answer within a window at
        all: an error, not a lease that would be lost on arrival."""
        record = result.record
        assert record is not None
        took = now() - started
        window = self.ttl - self.margin
        try:
            self.store.release(self.key, secret, record.token)
        except LeaseError as exc:  # it expires after its ttl; nobody trusts it
            log.warning("could not give back late lease %s (token %s): %s",
                        self.key, record.token, exc)
        if again:
            raise StoreUnavailable(
                f"lease {self.key!r}: the store granted it twice in a row only after its trust "
                f"window closed (the last attempt took {took:.3g} s; ttl - margin is "
                f"{window:g} s); both grants were given back. Raise ttl, or find what paused "
                f"this process or slowed the store", url=self.store.url)
        log.warning("lease %s (token %s) was granted %.3g s after the attempt began, past its "
                    "trust window (ttl - margin = %g s): given back, asking again",
                    self.key, record.token, took, window,
                    extra={"lease_event": "late_grant", "lease_key": self.key,
                           "lease_token": record.token})

    def _busy(self, result: AcquireResult) -> LeaseBusy:
        busy = LeaseBusy(self.key, result.record)
        metrics.busy(self.key)
        log.info(str(busy), extra={"lease_event": "busy", "lease_key": self.key,
                                   "lease_holder": busy.holder, "lease_token": busy.token})
        return busy

    @overload
    def _renewer(self, wait: Literal[True] = True) -> Renewer: ...
    @overload
    def _renewer(self, wait: Literal[False]) -> Renewer | None: ...

    def _renewer(self, wait: bool = True) -> Renewer | None:
        """What will renew the next lease, decided before it is taken: the
        keeper once it has the store open (``Keeper.takes`` waits for that),
        else this process's heartbeat. One renewer for the lease's life.
        ``wait=False``: None where the keeper would have to be waited for."""
        if self._kept:
            keeper = get_keeper()
            if keeper.takes(self.store, wait=wait):
                return keeper
            if not wait and keeper.alive():
                return None
        return get_heartbeat()

    def _start(self, result: AcquireResult, started: float, secret: str, renewer: Renewer, *,
               armed: bool = False, adopted: bool = False) -> Lease:
        """The granted lease, handed to its renewer (with ``armed``: a
        fail-stop block will run under it, the keeper arms its stop)."""
        assert result.record is not None
        lease = Lease(result.record, ttl=self.ttl, margin=self.margin, attempt_started=started,
                      secret=secret, grace=self.grace)
        lease.adopted = adopted
        metrics.acquired(lease, now() - started)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "acquired lease %s (token %s) as %s", lease.key, lease.token, lease.holder,
                extra={"lease_event": "acquire", "lease_key": lease.key,
                       "lease_token": lease.token, "lease_holder": lease.holder},
            )
        lease.kept_by = renewer
        renewer.add(lease, self.store, self.heartbeat, armed=armed)
        return lease



class Hold:
    """The context manager ``hold()`` and ``hold_adopted()`` return."""

    def __init__(self, lock: LeaseLock, take: Callable[[], Lease], *, release: bool) -> None:
        if lock.on_lost == "cancel":  # the lock validated the rest when it was made
            validate_on_lost(lock.on_lost, runs_async=False)
        self.lock = lock
        self._take = take
        self._release = release
        self.lease: Lease | None = None

    def __enter__(self) -> Lease:
        release_on_sigterm()
        self.lock._enter_scope()
        try:
            self.lease = lease = self._take()
        except BaseException:
            self.lock._leave_scope()
            raise
        if self.lock._fail_stop and not lease.arm_fail_stop(stop_process):
            self.lock._leave_scope()
            self.lock._end(lease, self._release)  # lost before the block began
            raise LeaseLost(lease.key, lease.token, lease.lost_reason or "")
        return lease

    def __exit__(self, etype: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        lease = self.lease
        assert lease is not None
        self.lock._leave_scope()
        if lease.pid != os.getpid():
            return False  # a forked child leaving the block: the lease is its parent's
        lease.disarm()
        closed = not lease.released and lease.window_closed()
        refused = self.lock._end(lease, self._release)
        error = verdict(lease, exc, refused=refused, closed=closed)
        if error is not None:
            raise error from exc
        return False


class Canceller:
    """``on_lost="cancel"``: on loss, cancel the task that entered the block,
    and again on every turn of its loop until the block ends, so a task that
    swallowed one cancel (``wait_for`` on Python 3.10/3.11 does) meets the
    next at its very next ``await``, as in Trio's cancel scopes. Runs on the
    task's loop only."""

    def __init__(self, lease: Lease) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.count = 0  # cancels of ours: undone at the end (Python 3.11+)
        self.active = True
        self.fired = False
        lease.on_lost(self._lost)

    def _lost(self, _lease: Lease) -> None:  # on the heartbeat's thread
        with contextlib.suppress(RuntimeError):  # a closed loop: the block is long gone
            self.loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if not self.active:
            return
        self.fired = True
        if self.task.cancel("lease lost"):
            self.count += 1
        self.loop.call_soon(self._cancel)  # again at its very next await

    def stop(self) -> bool:
        """No more cancels; True if any was made (the block ends ``LeaseLost``)."""
        self.active = False
        return self.fired

    def cancelled_by_others(self) -> bool:
        """Undo our cancels; True if a cancel from someone else is left."""
        if sys.version_info < (3, 11):
            return False
        for _ in range(self.count):
            self.task.uncancel()
        return self.task.cancelling() > 0


def verdict(lease: Lease, exc: BaseException | None, *, refused: str | None, closed: bool,
            cancelled: bool = False) -> LeaseLost | None:
    """How a block ends: ``LeaseLost`` when our cancel ended it, or when it
    ended normally although its lease was lost (flagged, refused by the store
    or unconfirmed at release, or past its trust window); else as it would have."""
    own = cancelled and isinstance(exc, asyncio.CancelledError)
    if not own and (exc is not None or not (lease.lost or refused or closed)):
        return None
    reason = lease.lost_reason or refused or "the trust window closed before the block ended"
    return LeaseLost(lease.key, lease.token, reason)
