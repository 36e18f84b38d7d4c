"""hold_async: the same lease for asyncio code; loss cancels the protected task."""

from __future__ import annotations

import asyncio

import pytest

from lease_integrations import LeaseBusy, LeaseLock, LeaseLost, connect


def test_hold_async_acquires_and_releases(key: str) -> None:
    store = connect(f"memory://{key}")

    async def main() -> int:
        async with LeaseLock(store, key, ttl=5).hold_async() as lease:
            record = store.get(key)
            assert record is not None and record.holder == lease.holder
            return lease.token

    assert asyncio.run(main()) >= 1
    record = store.get(key)
    assert record is not None and record.state == "released"


def test_hold_async_busy_and_wait(key: str) -> None:
    store = connect(f"memory://{key}")
    lock = LeaseLock(store, key, ttl=5)

    async def main() -> tuple[int, int]:
        async with lock.hold_async() as first:
            with pytest.raises(LeaseBusy):
                async with lock.hold_async(wait=0):
                    pass
            second = asyncio.ensure_future(lock.acquire_async(wait=None))
            await asyncio.sleep(0.05)
            assert not second.done()  # it waits while we hold
        lease = await asyncio.wait_for(second, 10)
        await lock.release_async(lease)
        return first.token, lease.token

    first, second = asyncio.run(main())
    assert first < second


def test_loss_cancels_the_protected_task_and_raises_lease_lost(key: str) -> None:
    store = connect(f"memory://{key}")
    lock = LeaseLock(store, key, ttl=1.5, on_lost="cancel")

    async def main() -> None:
        async with lock.hold_async() as lease:
            store.force_release(key, by="test")
            await asyncio.sleep(30)  # cancelled by the loss
        pytest.fail(f"not interrupted: {lease}")

    with pytest.raises(LeaseLost):
        asyncio.run(asyncio.wait_for(main(), 20))


def test_outside_cancellation_stays_a_cancellation(key: str) -> None:
    store = connect(f"memory://{key}")
    lock = LeaseLock(store, key, ttl=5)

    async def body(started: asyncio.Event) -> None:
        async with lock.hold_async():
            started.set()
            await asyncio.sleep(30)

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.ensure_future(body(started))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    record = store.get(key)
    assert record is not None and record.state == "released"


def test_a_nested_hold_async_of_the_same_key_fails_at_once(key: str) -> None:
    store = connect(f"memory://{key}")
    lock = LeaseLock(store, key, ttl=5)

    async def main() -> None:
        async with lock.hold_async():
            with pytest.raises(LeaseBusy, match="not re-entrant"):
                async with lock.hold_async(wait=None):
                    pytest.fail("entered a second hold of the same key")

    asyncio.run(asyncio.wait_for(main(), 10))
