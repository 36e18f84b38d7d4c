"""One Redis store object shared by 200 busy threads: the pool waits for a
free connection instead of failing, and the heartbeat's renewals (on their
own small pool) never starve behind the crowd."""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from lease_integrations import LeaseBusy, LeaseLock, LeaseLost, connect
from lease_integrations.core.errors import StoreUnavailable
from lease_integrations.stores.redis_pool import FairBlockingConnectionPool, FairQueue, get_connection

THREADS = 200
SECONDS = 10.0
POOL = 20  # far fewer connections than threads: most calls wait for one
HOLDER_TTL = 3.0


def test_200_threads_on_one_store_object_get_no_errors_and_the_holder_keeps_its_lease(
    redis_url: str, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with connect(f"{redis_url}?max_connections={POOL}") as store:
        holder = LeaseLock(store, key, ttl=HOLDER_TTL, on_lost="check")
        lease = holder.acquire(wait=0)
        stop = threading.Event()
        counts: Counter[str] = Counter()
        errors: list[str] = []
        guard = threading.Lock()

        def churn(i: int) -> None:
            lock = LeaseLock(store, f"{key}-churn-{i % 50}", ttl=30)
            seen: Counter[str] = Counter()
            while not stop.is_set():
                try:
                    taken = lock.acquire(wait=0)
                except LeaseBusy:
                    seen["busy"] += 1
                    continue
                except StoreUnavailable as exc:
                    seen["errors"] += 1
                    with guard:
                        errors.append(str(exc))
                    continue
                seen["grants"] += 1
                try:
                    lock.release(taken)
                except (StoreUnavailable, LeaseLost) as exc:
                    seen["errors"] += 1
                    with guard:
                        errors.append(str(exc))
            with guard:
                counts.update(seen)

        threads = [threading.Thread(target=churn, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        stop.wait(SECONDS)  # the length of the run, not a synchronisation
        stop.set()
        for t in threads:
            t.join(timeout=60)
        false_losses = 1 if lease.lost else 0
        with capsys.disabled():
            print(f"\nredis pool: {THREADS} threads on one store object, max_connections={POOL}, "
                  f"{SECONDS:.0f} s: {counts['grants']} grants, {counts['busy']} busy, "
                  f"{counts['errors']} errors, {false_losses} false losses of the "
                  f"{HOLDER_TTL:.0f} s-ttl holder")
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors[:3]
        assert counts["grants"] > 0
        lease.check()  # raises LeaseLost on a false loss
        holder.release(lease)


def test_renewals_need_no_free_connection_in_the_stores_main_pool(redis_url: str, key: str) -> None:
    """User traffic holding every pooled connection (slow calls, a stalled
    burst) must not stop the heartbeat: renewals have their own pool."""
    with connect(f"{redis_url}?max_connections=2&socket_timeout=1") as store:
        lock = LeaseLock(store, key, ttl=2.0, on_lost="check")  # renewed every ~0.67 s
        lease = lock.acquire(wait=0)
        pool = store._client.connection_pool  # type: ignore[attr-defined]
        taken = [get_connection(pool) for _ in range(2)]
        try:
            start = lease.trusted_until
            deadline = time.monotonic() + 10
            while lease.trusted_until < start + 3.0:  # three seconds of renewals, > the ttl
                assert not lease.lost, "the lease was lost while the main pool was busy"
                assert time.monotonic() < deadline, "the heartbeat stopped renewing"
                time.sleep(0.02)
        finally:
            for connection in taken:
                pool.release(connection)
        lease.check()
        lock.release(lease)


def test_a_returned_connection_goes_to_the_thread_that_waited_longest() -> None:
    """redis-py's own queue lets a thread that just gave a connection back take
    it again ahead of the waiters, so under load some waiter times out."""
    pool = FairQueue(1)
    pool.put_nowait("conn")
    held = pool.get()
    got: list[str] = []

    def waiter(name: str) -> None:
        pool.get(timeout=30)
        got.append(name)

    first = threading.Thread(target=waiter, args=("first",))
    first.start()
    until(lambda: len(pool._waiters) == 1)
    second = threading.Thread(target=waiter, args=("second",))
    second.start()
    until(lambda: len(pool._waiters) == 2)
    pool.put_nowait(held)
    first.join(timeout=10)
    with pytest.raises(queue.Empty):  # a newcomer does not barge past "second"
        pool.get(block=False)
    pool.put_nowait(held)
    second.join(timeout=10)
    assert got == ["first", "second"]
    with pytest.raises(queue.Empty):
        pool.get(timeout=0.01)  # both hand-overs consumed: nothing left, the wait is bounded


def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_disconnecting_the_idle_connections_leaves_the_ones_in_use(redis_url: str) -> None:
    """What Sentinel asks of the pool when it finds a new primary; redis-py's
    BlockingConnectionPool takes the flag only from 7.0 on, so before that the
    pool does it itself."""
    pool = FairBlockingConnectionPool.from_url(redis_url, max_connections=3)
    try:
        busy, idle = get_connection(pool), get_connection(pool)
        pool.release(idle)
        pool.disconnect(inuse_connections=False)
        assert busy._sock is not None, "a connection in use was cut"
        assert idle._sock is None, "an idle connection was kept"
        pool.release(busy)
    finally:
        pool.disconnect()
