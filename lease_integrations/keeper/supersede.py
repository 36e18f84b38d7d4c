"""``supersede``: the newest run replaces the holder, and the old one can no
longer write.

Elsewhere "replace" is a state change while the old process may go on
writing (Argo's ``Replace``, Flyte's, Prefect's never-built "Cancel
Running"). Here it is built from what the lease already has:

1. read the holder's record (token *t*), and ask the guard (``supersede_if``)
   whether this run may replace it;
2. break *t*, conditionally, in one atomic step in the store
   (``force_release(key, by, token=t)``): a supersede never breaks a lease it
   did not read, so two racing supersedes break *t* once between them;
3. take the key at once, with a token above *t* (nothing else slips in
   between the old holder and us while we wait);
4. hand the lease over only once the old holder is gone: its next renewal
   is refused, its fail-stop ladder ends it and every process it started.
   Gone is known early when the holder ran on this host (its pid has
   exited, after it recorded the loss); otherwise the wait lasts until the
   broken record's own expiry, by which its trust window had closed and its
   ladder ended (``failstop``: the ladder ends ``0.2 * margin`` before it).

The break is recorded as ``broken`` by ``supersede by <new holder>`` (the
store's atomic record, which the holder reads to say why it stopped) and
then as a ``superseded`` event naming the new holder and its meta.

A guard that refuses, or a break that another supersede won, leaves the
ordinary busy behaviour: wait as ``wait`` says, then ``LeaseBusy``
(``SupersedeRefused`` when the guard said no).

Async code (``hold_async(supersede=True)``) runs the same steps on a worker
thread (``supersede_acquire_async``): a thread cannot be stopped halfway, so a
task cancelled meanwhile leaves it to finish, and a lease it was granted
anyway is released, never left renewed by nobody's block.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..core.errors import LeaseBusy, LeaseError, LeaseLost, SupersedeRefused
from ..core.record import LeaseRecord
from ..core.supersede_guards import SupersedeGuard
from .descendants import descendants

if TYPE_CHECKING:
    from ..core.lease import Lease
    from ..core.store import LeaseStore


class LeaseLock(Protocol):
    """What a supersede needs of ``lock.LeaseLock`` (named here, not
    imported: the lock imports this module)."""

    store: LeaseStore
    key: str
    ttl: float

    def _acquire(self, wait: float | None, meta: Mapping[str, Any] | None, *,
                 armed: bool) -> Lease: ...

    def _identity(self, meta: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]: ...

    def release(self, lease: Lease) -> bool: ...

log = logging.getLogger("lease_integrations")

#: How often the old holder is looked at while we wait for it to be gone.
POLL = 0.02
#: Extra wait past the broken record's expiry: clock-rate drift between the
#: store and this host over one ttl, and the round trip that read the record.
SLACK = 0.05


def supersede_acquire(lock: LeaseLock, wait: float | None, meta: Mapping[str, Any] | None,
                      guard: SupersedeGuard | None, *, armed: bool) -> Lease:
    """``lock.acquire(wait, supersede=True)``: take the lease, replacing its
    holder if it is held (see the module's text)."""
    try:
        return lock._acquire(0, meta, armed=armed)
    except LeaseBusy as busy:  # a store's record (errors.py describes it, not imports it)
        record = busy.record if isinstance(busy.record, LeaseRecord) else None
    holder, full_meta = lock._identity(meta)
    if record is None or record.holder is None:  # released meanwhile: the busy path says
        return lock._acquire(wait, meta, armed=armed)
    refusal = _refusal(record, full_meta, guard)
    if refusal is not None:
        try:
            return lock._acquire(wait, meta, armed=armed)
        except LeaseBusy as still:
            raise SupersedeRefused(lock.key, still.record, refusal) from None
    started = time.monotonic()
    gone_by = _break(lock, record, holder, full_meta)
    ours = dict(meta or {}, supersedes={"token": record.token, "holder": record.holder})
    try:
        lease = lock._acquire(0, ours, armed=armed)
    except LeaseBusy:  # another supersede (or a waiter) took it first: never break theirs
        left = None if wait is None else max(0.0, wait - (time.monotonic() - started))
        lease = lock._acquire(left, meta, armed=armed)
    try:
        _wait_gone(lock, record, gone_by, lease)
    except BaseException:
        lock.release(lease)
        raise
    if lease.lost:  # superseded in turn (or broken) before the block could begin
        lock.release(lease)
        raise LeaseLost(lease.key, lease.token, lease.lost_reason or "")
    log.info("lease %s: token %s of %s superseded by token %s (%.3f s from the break)",
             lock.key, record.token, record.holder, lease.token, time.monotonic() - started,
             extra={"lease_event": "superseded", "lease_key": lock.key,
                    "lease_token": lease.token, "lease_holder": lease.holder})
    return lease


async def supersede_acquire_async(lock: LeaseLock, wait: float | None,
                                  meta: Mapping[str, Any] | None, guard: SupersedeGuard | None,
                                  *, armed: bool) -> Lease:
    """``supersede_acquire`` for asyncio code, on a worker thread so the event
    loop runs while the old holder is stopped. If the awaiting task is
    cancelled, the lease the thread is granted (now, or once it finishes) is
    released: whichever of the two comes second releases it, decided under
    one lock, so it is released exactly once and never handed to a task that
    is gone."""
    handoff = _Handoff(lock)
    taking = asyncio.ensure_future(asyncio.to_thread(
        handoff.take, lambda: supersede_acquire(lock, wait, meta, guard, armed=armed)))
    try:
        lease = await asyncio.shield(taking)
    except asyncio.CancelledError:
        handoff.abandon()
        taking.add_done_callback(_retrieve)  # its LeaseBusy, say, is nobody's now
        raise
    assert lease is not None  # None only once abandoned
    return lease


class _Handoff:
    """A lease passed from a worker thread to the task awaiting it, or
    released if the task stopped waiting first."""

    def __init__(self, lock: LeaseLock) -> None:
        self.lock = lock
        self._mutex = threading.Lock()
        self._abandoned = False
        self._lease: Lease | None = None

    def take(self, acquire: Callable[[], Lease]) -> Lease | None:
        lease = acquire()
        with self._mutex:
            if not self._abandoned:
                self._lease = lease
                return lease
        self._release(lease)  # the task is gone: nobody would ever release it
        return None

    def abandon(self) -> None:
        with self._mutex:
            self._abandoned = True
            lease, self._lease = self._lease, None
        if lease is not None:  # granted just as the task was cancelled
            self._release(lease)

    def _release(self, lease: Lease) -> None:
        try:
            self.lock.release(lease)
        except LeaseError as exc:  # it expires after its ttl; renewals have stopped
            log.warning("could not release lease %s (token %s) granted to a cancelled "
                        "supersede: %s", lease.key, lease.token, exc)
        else:
            log.info("lease %s (token %s): granted to a supersede whose task was "
                     "cancelled; released", lease.key, lease.token)


def _retrieve(done: asyncio.Future[Lease | None]) -> None:
    if not done.cancelled():
        done.exception()


def _refusal(record: LeaseRecord, new_meta: Mapping[str, Any],
             guard: SupersedeGuard | None) -> str | None:
    """Why this run may not replace the holder, or None."""
    if record.meta.get("pid") == os.getpid() and record.meta.get("host") == socket.gethostname():
        return "the holder is this very process (another thread or task): it would stop itself"
    if guard is not None and not guard(dict(record.meta), dict(new_meta)):
        return f"the guard {getattr(guard, '__name__', repr(guard))} refused to replace it"
    return None


def _break(lock: LeaseLock, record: LeaseRecord, holder: str,
           new_meta: Mapping[str, Any]) -> float:
    """Break token ``record.token`` (only it) and record why; returns the
    ``time.monotonic()`` by which its holder has surely stopped trusting it."""
    before = lock.store.force_release(lock.key, f"supersede by {holder}", token=record.token)
    read = time.monotonic()
    if before is None or before.holder is None:
        # Someone else broke it (or it was released) after we read it; it may
        # have been renewed in between: a whole ttl of it from now is safe.
        return read + _ttl_of(record, lock.ttl) + SLACK
    try:
        lock.store.record_event(lock.key, "superseded", before.holder, before.token,
                                {"by": holder, "meta": dict(new_meta)})
    except LeaseError as exc:  # the break itself is recorded: this only adds who
        log.warning("could not record the supersede of lease %s: %s", lock.key, exc)
    return read + max(0.0, before.expires_in or 0.0) + SLACK


def _ttl_of(record: LeaseRecord, default: float) -> float:
    """The holder's ttl, as its record shows it (expiry minus last renewal)."""
    if record.renewed_at is not None and record.expires_at is not None:
        return max(0.0, (record.expires_at - record.renewed_at).total_seconds())
    return default


def _wait_gone(lock: LeaseLock, record: LeaseRecord, gone_by: float, ours: Lease) -> None:
    """Return once the holder of ``record`` and every process seen below it
    have ended, or at ``gone_by``, or once ``ours`` is lost meanwhile. Below
    it: its ladder leaves its descendants frozen and hands them SIGTERM, then
    SIGKILL, after it exits."""
    pid = _local_pid(record)
    tree: set[int] = set()
    while True:
        left = gone_by - time.monotonic()
        if left <= 0 or ours.lost:
            return
        if pid is not None:
            if _running(pid):
                tree |= descendants(pid)
            elif _noticed(lock, record):
                tree = {child for child in tree if _running(child)}
                if not tree:
                    return
        time.sleep(min(left, POLL))


def _local_pid(record: LeaseRecord) -> int | None:
    """The holder's pid when it ran on this host (its meta says so)."""
    pid = record.meta.get("pid")
    if record.meta.get("host") != socket.gethostname() or isinstance(pid, bool) \
            or not isinstance(pid, int) or pid <= 0:
        return None
    return pid


def _running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie has ended (only its parent's wait is left)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return stat[stat.rindex(")") + 2:].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except (OSError, ValueError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _noticed(lock: LeaseLock, record: LeaseRecord) -> bool:
    """Whether the holder itself recorded the end of token ``record.token``
    (its loss, or its release): a pid gone from this host is taken for the
    holder's exit only then. "This host" is the host name in the holder's
    meta; a holder in a container that shares the host's name but not its
    pid namespace is judged by a pid that is not its own (documented)."""
    try:
        events = lock.store.history(lock.key, limit=10)
    except LeaseError:
        return False
    return any(e.token == record.token and e.kind in ("lost", "released") for e in events)
