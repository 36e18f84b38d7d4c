"""Redis store under concurrency: release notifications wake waiters, the
heartbeat renews from worker threads while the main thread works, and a
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


def subscribers(raw: redis.Redis, key: str) -> int:
    counts = dict(raw.pubsub_numsub(f"{{lease:{key}}}:released@0"))
    return int(counts.get(f"{{lease:{key}}}:released@0", 0))


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
        until(lambda: subscribers(raw, key) >= 1, what="the waiter to subscribe")
        assert holder.release(key, "alice", held.token)
        thread.join(timeout=30)
        assert got and got[0].token > held.token
        assert woken[-1] is True, f"the waiter was not woken by a notification: {woken}"
        lock.release(got[0])
    finally:
        holder.close()
        waiter.close()


def test_waiters_on_different_keys_share_one_listener_and_each_is_woken(
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
        for k in keys:
            until(lambda k=k: subscribers(raw, k) >= 1, what=f"a subscription to {k}")
        for k in reversed(keys):
            assert store.release(k, "alice", tokens[k])
        for t in threads:
            t.join(timeout=30)
        assert results == {k: True for k in keys}
        assert subscribers(raw, keys[0]) == 1, "one store object keeps one subscription per key"
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
        free_wake = store.wait_for_release(f"{key}-free", 5.0)
        os.write(write_fd, json.dumps([child_id, granted, free_wake]).encode())
    finally:
        os._exit(0)


def test_a_forked_child_opens_its_own_connections(redis_url: str, raw: redis.Redis, key: str) -> None:
    store = _store(redis_url)
    try:
        held = store.acquire(key, "parent", "parent", 30, {}).record
        assert held is not None
        assert not store.wait_for_release(key, 0.05)  # parent's listener is now subscribed
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
        # The parent's own listener still works after the child came and went.
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(store.wait_for_release(key, 30)))
        waiter.start()
        until(lambda: subscribers(raw, key) >= 1, what="the parent's subscription")
        assert store.release(key, "parent", held.token)
        waiter.join(timeout=30)
        assert result == [True]
    finally:
        store.close()


def test_without_channel_rights_connect_names_the_missing_channel_right(
    redis_url: str, raw: redis.Redis
) -> None:
    """Missing channel rights used to turn notified waits silently into polling;
    connect now refuses with the right to grant."""
    import uuid

    from lease_integrations.core.errors import ConfigurationError

    user, secret = f"nochan{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    raw.acl_setuser(user, enabled=True, passwords=[f"+{secret}"], keys=["*"],
                    commands=["+@all"], reset_channels=True)
    host = redis_url.removeprefix("redis://").rsplit("/", 1)[0]
    try:
        with pytest.raises(ConfigurationError) as caught:
            connect(f"redis://{user}:{secret}@{host}/0")
        message = str(caught.value)
        assert "+publish" in message and "+subscribe" in message and "&{lease:*" in message
        assert secret not in message
    finally:
        raw.acl_deluser(user)
