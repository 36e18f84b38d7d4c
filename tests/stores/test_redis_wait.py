"""Redis store under concurrency: a release wakes the next waiter (one, in
the order they blocked), the heartbeat renews from worker threads while the main thread works, and a
forked child never reuses the parent's sockets."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from lease_integrations import Lease, LeaseLock, connect
from lease_integrations.stores.redis import RedisStore


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _store(url: str) -> RedisStore:
    s = connect(url)
    assert isinstance(s, RedisStore)
    return s


def until(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def blocked(raw: redis.Redis) -> int:
    """Clients blocked in BLPOP on this server (waiters; tests run one at a time)."""
    return sum(1 for c in raw.client_list() if c.get("cmd") == "blpop" and "b" in c.get("flags", ""))


def test_a_waiting_lock_is_woken_by_the_release_notification(
    redis_url: str, raw: redis.Redis, key: str
) -> None:
    holder, waiter = _store(redis_url), _store(redis_url)  # two "hosts"
    try:
        held = holder.acquire(key, "alice", "alice", 30, {}).record
        assert held is not None
        woken: list[bool] = []
        real_wait = waiter.wait_for_release

        def recording_wait(k: str, timeout: float) -> bool:  # records the real answers
            result = real_wait(k, timeout)
            woken.append(result)
            return result

        waiter.wait_for_release = recording_wait  # type: ignore[method-assign]
        got: list[Lease] = []
        lock = LeaseLock(waiter, key, ttl=30)
        thread = threading.Thread(target=lambda: got.append(lock.acquire(wait=60)))
        thread.start()
        until(lambda: blocked(raw) >= 1, what="the waiter to block")
        assert holder.release(key, "alice", held.token)
        thread.join(timeout=30)
        assert got and got[0].token > held.token
        assert woken[-1] is True, f"the waiter was not woken by a notification: {woken}"
        lock.release(got[0])
    finally:
        holder.close()
        waiter.close()


def test_waiters_on_different_keys_are_each_woken_by_their_own_release(
    redis_url: str, raw: redis.Redis, key: str
) -> None:
    store = _store(redis_url)
    try:
        keys = [f"{key}-{i}" for i in range(3)]
        tokens = {k: store.acquire(k, "alice", "alice", 30, {}).record.token for k in keys}  # type: ignore[union-attr]
        results: dict[str, bool] = {}

        def wait(k: str) -> None:
            results[k] = store.wait_for_release(k, 30)

        threads = [threading.Thread(target=wait, args=(k,)) for k in keys]
        for t in threads:
            t.start()
        until(lambda: blocked(raw) >= 3, what="three blocked waiters")
        for k in reversed(keys):
            assert store.release(k, "alice", tokens[k])
        for t in threads:
            t.join(timeout=30)
        assert results == {k: True for k in keys}
    finally:
        store.close()


def test_a_release_wakes_one_waiter_the_first_that_blocked(
    redis_url: str, raw: redis.Redis, key: str
) -> None:
    """Wake one, not all: every waiter woken races for the key and all but
    one go back to sleep; the first to block is the one woken."""
    store = _store(redis_url)
    try:
        token = store.acquire(key, "alice", "alice", 30, {}).record.token  # type: ignore[union-attr]
        woken: list[int] = []
        base = blocked(raw)

        def wait(i: int) -> None:
            if store.wait_for_release(key, 20):
                woken.append(i)

        threads = []
        for i in range(3):
            threads.append(threading.Thread(target=wait, args=(i,)))
            threads[-1].start()
            until(lambda i=i: blocked(raw) >= base + i + 1, what=f"waiter {i} to block")
        assert store.release(key, "alice", token)
        until(lambda: bool(woken), what="a waiter to wake")
        assert woken == [0]
        assert blocked(raw) == base + 2, "the other waiters were woken too"
        token = store.acquire(key, "bob", "bob", 30, {}).record.token  # type: ignore[union-attr]
        assert store.release(key, "bob", token)
        until(lambda: len(woken) == 2, what="the second waiter to wake")
        assert woken == [0, 1]
        store.force_release(key, by="test")  # a break wakes the next waiter too
        for t in threads:
            t.join(timeout=30)
        assert woken == [0, 1, 2]
    finally:
        store.close()


def test_heartbeat_renews_from_its_threads_while_the_main_thread_works(
    redis_url: str, key: str
) -> None:
    store = _store(redis_url)
    lock = LeaseLock(store, key, ttl=2.0, on_lost="check")
    lease = lock.acquire()
    try:
        seen = [lease.trusted_until]
        deadline = time.monotonic() + 30
        i = 0
        while len(seen) < 4:  # three renewals observed while we hammer the same client
            assert time.monotonic() < deadline, "the heartbeat did not renew"
            other = f"{key}-busy-{i % 5}"
            rec = store.acquire(other, "main", "main", 30, {}).record
            assert rec is not None
            assert store.release(other, "main", rec.token)
            i += 1
            if lease.trusted_until > seen[-1]:
                seen.append(lease.trusted_until)
        lease.check()
    finally:
        lock.release(lease)
        store.close()


def _child(store: RedisStore, key: str, write_fd: int) -> None:
    try:
        child_id = store._client.client_id()
        granted = store.acquire(f"{key}-child", "child", "child", 30, {}).granted
        free = store.acquire(f"{key}-free", "child", "child", 30, {}).record
        # A busy answer raises the waiting flag, so the release leaves a wake-up.
        assert not store.acquire(f"{key}-free", "other", "other", 30, {}).granted
        assert free is not None and store.release(f"{key}-free", "child", free.token)
        free_wake = store.wait_for_release(f"{key}-free", 5.0)
        os.write(write_fd, json.dumps([child_id, granted, free_wake]).encode())
    finally:
        os._exit(0)


def test_a_forked_child_opens_its_own_connections(redis_url: str, raw: redis.Redis, key: str) -> None:
    store = _store(redis_url)
    try:
        held = store.acquire(key, "parent", "parent", 30, {}).record
        assert held is not None
        assert not store.wait_for_release(key, 0.05)  # parent's wait connection is now open
        parent_id = store._client.client_id()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            _child(store, key, write_fd)
        os.close(write_fd)
        try:
            with os.fdopen(read_fd) as pipe:
                child_id, granted, free_wake = json.loads(pipe.read() or "null")
        finally:
            deadline = time.monotonic() + 30
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)
        assert granted and free_wake
        assert child_id != parent_id, "the child reused the parent's socket"
        assert store._client.client_id() == parent_id, "the parent's connection was disturbed"
        child_rec = store.get(f"{key}-child")
        assert child_rec is not None and child_rec.holder == "child"
        # The parent's own wait still works after the child came and went.
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(store.wait_for_release(key, 30)))
        waiter.start()
        until(lambda: blocked(raw) >= 1, what="the parent's waiter to block")
        assert store.release(key, "parent", held.token)
        waiter.join(timeout=30)
        assert result == [True]
    finally:
        store.close()
