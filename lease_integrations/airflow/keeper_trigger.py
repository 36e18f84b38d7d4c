"""The keeper's trigger: keeps a DAG run's lease from the triggerer.

It adopts the lease (``LeaseLock.adopt``), so the core heartbeat renews it
(one scheduler and renewal pool per process, shared by every keeper) under
the core's trust window and loss rules; the trigger only waits on the loss
flag and reads its run's state now and then. The run's own release (by
the teardown, another process) is recognised as a normal end, not reported
as a loss (``KeeperStore``). Its own store and API calls run
on this module's bounded pool, never on the loop's default executor, and
keepers of one store share one client. It ends the keeper task itself:
success once the run gave the lease back or is over (then it releases the
lease itself if the run still holds it), failure once the lease is lost. See
``docs/airflow/dag-run-lease.md``.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from airflow.triggers.base import BaseTrigger, TaskFailedEvent, TaskSuccessEvent, TriggerEvent

from lease_integrations import Lease, LeaseLost, LeaseRecord, LeaseStore, connect
from lease_integrations.core import AcquireResult, LeaseEvent
from lease_integrations.core.store import end_of_token

from ._compat import run_states
from .connections import resolve_store_url_async
from .run_lease import DagRunLease, release_run_lease

T = TypeVar("T")

#: Threads for the keepers' own store and API calls (renewals use the core
#: heartbeat's pool). Bounded: 500 keepers do not mean 500 threads.
KEEPER_WORKERS = 8
#: How many of the key's latest events to search for the run's own release.
HISTORY_DEPTH = 50
#: Task states that are over for good (the keeper's stop rule).
FINISHED = {"success", "failed", "skipped", "upstream_failed", "removed"}

_pool = ThreadPoolExecutor(KEEPER_WORKERS, thread_name_prefix="lease-keeper")
_stores: dict[str, tuple[KeeperStore, int]] = {}
_stores_lock = threading.Lock()


class KeeperStore(LeaseStore):
    """The keepers' view of one store: every call passes straight through,
    except that a renewal the store refuses because the run's own teardown
    released the lease is recognised as the run's normal end.

    The teardown (a worker process) and the keeper (the triggerer) are two
    processes, so the keeper's next renewal after the teardown's release is
    always refused. Left to the core that refusal is a loss: a WARNING and a
    ``lost`` event after the ``released`` one, on every successful run. Here,
    on a refusal, the key's history is read (only then: a refusal is rare);
    if it shows this token released, the keeper is told and stops renewing
    (``LeaseLock.forget``) before the core settles the refusal, which it then
    drops quietly, as for any lease no longer renewed. A break, an expiry or
    a takeover still reads as the loss it is. One per store URL, shared by
    its keepers, so the heartbeat still batches their renewals."""

    def __init__(self, inner: LeaseStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.notifies = inner.notifies
        self.batch_renewals = inner.batch_renewals
        self._ends: dict[tuple[str, int], Callable[[], None]] = {}
        self._ends_lock = threading.Lock()

    def on_run_release(self, key: str, token: int, end: Callable[[], None]) -> None:
        """Call ``end`` (it must stop renewing the lease) when a renewal of
        ``token`` is refused because the run released it."""
        with self._ends_lock:
            self._ends[(key, token)] = end

    def forget_run(self, key: str, token: int) -> None:
        with self._ends_lock:
            self._ends.pop((key, token), None)

    def _refused(self, key: str, token: int) -> None:
        with self._ends_lock:
            end = self._ends.get((key, token))
        if end is None:
            return
        try:
            released = any(e.token == token and e.kind == "released"
                           for e in self.inner.history(key, limit=HISTORY_DEPTH))
        except Exception:  # unreadable: the refusal stands as a loss
            return
        if released:
            self.forget_run(key, token)
            end()

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        renewed = self.inner.renew(key, secret, token, ttl)
        if not renewed:
            self._refused(key, token)
        return renewed

    def renew_many(self, items: Sequence[tuple[str, str, int, float]]) -> Sequence[bool | None]:
        outcomes = self.inner.renew_many(items)
        for (key, _secret, token, _ttl), outcome in zip(items, outcomes):
            if outcome is False:
                self._refused(key, token)
        return outcomes

    def acquire(self, key: str, holder: str, secret: str, ttl: float,
                meta: Mapping[str, Any]) -> AcquireResult:
        return self.inner.acquire(key, holder, secret, ttl, meta)

    def release(self, key: str, secret: str, token: int) -> bool:
        return self.inner.release(key, secret, token)

    def get(self, key: str) -> LeaseRecord | None:
        return self.inner.get(key)

    def list(self, prefix: str = "") -> builtins.list[LeaseRecord]:
        return self.inner.list(prefix)

    def force_release(self, key: str, by: str, token: int | None = None) -> LeaseRecord | None:
        return self.inner.force_release(key, by, token)

    def history(self, key: str, limit: int = 50) -> builtins.list[LeaseEvent]:
        return self.inner.history(key, limit)

    def record_event(self, key: str, kind: Any, holder: str | None, token: int,
                     detail: Mapping[str, Any] | None = None) -> None:
        self.inner.record_event(key, kind, holder, token, detail)

    def wait_for_release(self, key: str, timeout: float) -> bool:
        return self.inner.wait_for_release(key, timeout)

    def close(self) -> None:
        self.inner.close()


async def _call(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args))


def _open_store(url: str | None) -> KeeperStore:
    with _stores_lock:
        store, users = _stores.get(url or "", (None, 0))
        if store is None:
            store = KeeperStore(connect(url))
        _stores[url or ""] = (store, users + 1)
        return store


def _close_store(url: str | None) -> None:
    with _stores_lock:
        store, users = _stores[url or ""]
        if users > 1:
            _stores[url or ""] = (store, users - 1)
            return
        del _stores[url or ""]
    store.close()


class DagRunLeaseKeeperTrigger(BaseTrigger):  # type: ignore[misc]
    """Ends the keeper task: success once the run released its lease or ended,
    failure once the lease is lost. ``outcome`` holds (status, reason).

    ``lease`` is the run's XCom value (no secret: the triggerer derives it);
    ``check_interval`` how often the run's state is read (default: the
    heartbeat but at least 5 s, and at most ttl/2)."""

    def __init__(self, lease: dict[str, Any], keeper_task_id: str,
                 check_interval: float | None = None) -> None:
        super().__init__()
        self.lease = lease
        self.keeper_task_id = keeper_task_id
        self.check_interval = check_interval
        self.outcome: tuple[str, str] | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"lease": self.lease, "keeper_task_id": self.keeper_task_id,
                 "check_interval": self.check_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        info = DagRunLease.from_xcom(self.lease)
        url = info.store_url or await resolve_store_url_async(info.conn_id)
        store = await _call(_open_store, url)
        try:
            status, reason = await self._keep(info, store)
        finally:
            await _call(_close_store, url)
        self.outcome = (status, reason)
        if status == "released":
            self.log.info("run lease %s (token %s): %s", info.key, info.token, reason)
            yield TaskSuccessEvent()
        else:
            self.log.error("run lease %s (token %s) lost: %s", info.key, info.token, reason)
            yield TaskFailedEvent()

    async def on_kill(self) -> None:
        """A user ended the keeper's task (marked the run failed or succeeded,
        cleared it): give the lease back if the run is over, else leave it."""
        info = DagRunLease.from_xcom(self.lease)
        if await _call(self._run_is_over, info):
            self.log.info(await _call(release_run_lease, info))

    async def _keep(self, info: DagRunLease, store: KeeperStore) -> tuple[str, str]:
        lock = info.lock(store)
        # The acquire task took it at most a ttl ago: a store down until then has lost it.
        trusted_until = time.monotonic() + lock.ttl - lock.margin
        while True:
            try:
                lease = await _call(lock.adopt, info.token, info.secret())
                break
            except LeaseLost as refused:
                return await self._after_loss(store, info, refused.reason)
            except Exception as exc:
                if time.monotonic() >= trusted_until:
                    return "lost", f"store unreachable until the trust window closed ({exc!r})"
                await asyncio.sleep(min(1.0, lock.heartbeat / 4))
        loop = asyncio.get_running_loop()
        lost = asyncio.Event()

        def wake(_lease: Lease) -> None:
            loop.call_soon_threadsafe(lost.set)

        lease.on_lost(wake)

        def run_released() -> None:  # on a renewal thread, before the refusal is settled
            lock.forget(lease)
            loop.call_soon_threadsafe(lost.set)

        store.on_run_release(info.key, info.token, run_released)
        self.log.info("keeping run lease %s (token %s) every %.1f s", info.key, info.token,
                      lock.heartbeat)
        # Each look costs the API server a request: no more often than every 5 s
        # (or the heartbeat), yet at least twice per ttl.
        interval = self.check_interval or min(max(lock.heartbeat, 5.0), lock.ttl / 2)
        try:
            while not lost.is_set():
                try:
                    await asyncio.wait_for(lost.wait(), interval)
                    break
                except asyncio.TimeoutError:
                    pass
                over = await _call(self._run_is_over, info)
                if over:
                    return await _call(_end_of_run, lock, lease, store, info)
                if over is None:  # no supervisor to ask (not in a triggerer): stop asking
                    interval = lock.ttl
        finally:
            store.forget_run(info.key, info.token)
            lock.forget(lease)  # stop renewing, never release here: that is decided above
        return await self._after_loss(store, info, lease.lost_reason or "")

    async def _after_loss(self, store: LeaseStore, info: DagRunLease,
                          reason: str) -> tuple[str, str]:
        """A loss is the end either way; the history says whether the run gave
        the lease back first. Unreadable (the store is down): the loss stands."""
        try:
            status, why = await _call(_why_refused, store, info)
        except Exception:
            return "lost", reason
        if status == "lost" and "trust window" in reason:
            return "lost", reason
        return status, why

    def _run_is_over(self, info: DagRunLease) -> bool | None:
        """True once the DAG run is not running or every task but the keeper
        has finished; None when the run's state cannot be read (no triggerer
        supervisor, e.g. in a plain asyncio test: the keeper then ends only
        with the lease)."""
        try:
            states = run_states(info.dag_id, info.run_id)
        except Exception as exc:  # the API server or the DB blipped: ask again next time
            self.log.warning("could not read the state of run %s: %r", info.run_id, exc)
            return False
        if states is None:  # no Task SDK supervisor in this process
            return None
        run_state, tasks = states
        if run_state not in ("running", "queued"):
            return True
        tasks.pop(self.keeper_task_id, None)
        return bool(tasks) and all(str(s) in FINISHED for s in tasks.values())


def _end_of_run(lock: Any, lease: Lease, store: LeaseStore, info: DagRunLease) -> tuple[str, str]:
    """The run is over: release the lease if this run still holds it."""
    if lock.release(lease):
        return "released", "the run ended without giving it back: released by the keeper"
    return _why_refused(store, info)


def _why_refused(store: LeaseStore, info: DagRunLease) -> tuple[str, str]:
    """The lease is no longer the run's: the history says whether the run
    gave it back (success) or lost it."""
    end = end_of_token(store.history(info.key, limit=HISTORY_DEPTH), info.token)
    if end is not None and end.kind == "released":
        return "released", "the run's release task gave it back"
    if end is not None:
        return "lost", f"broken from outside by {end.detail.get('by', 'someone')}"
    record = store.get(info.key)
    if record is not None and record.token != info.token:
        return "lost", f"taken over with token {record.token} by {record.holder}"
    return "lost", "expired before it could be renewed"
