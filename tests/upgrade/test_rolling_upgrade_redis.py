"""A rolling upgrade of the Redis store: processes of the previous version
(its scripts frozen in ``old_redis_scripts``, called with its arguments) keep
running beside upgraded ones on the same keys. The lease record's layout did
not change, so a lease the old version holds stays held and renewable
through the upgrade; history moved from a JSON list (``…:hist``) to a Stream
(``…:log``), and the new version reads both, in time order."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from lease_integrations import Lease, LeaseLock, connect
from lease_integrations.stores.redis import RedisStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
import old_redis_scripts as old


class OldVersionClient:
    """What a process of the previous version sends: its scripts, its key
    names ([rec, hist], [rec, hist, wake]) and its arguments (the release
    channel included)."""

    def __init__(self, url: str, key: str, holder: str) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        tag = f"{{lease:{key}}}"
        self.rec, self.hist, self.wake = f"{tag}:rec", f"{tag}:hist", f"{tag}:wake"
        self.channel = f"{tag}:released@0"
        self.holder, self.secret = holder, f"secret-of-{holder}"
        self._acquire = self.client.register_script(old.ACQUIRE)
        self._renew = self.client.register_script(old.RENEW)
        self._release = self.client.register_script(old.RELEASE)

    def acquire(self, ttl_ms: int) -> list[Any]:
        return self._acquire(keys=[self.rec, self.hist],
                             args=[self.holder, self.secret, ttl_ms, json.dumps({"v": "old"})])

    def renew(self, token: int, ttl_ms: int) -> bool:
        return bool(self._renew(keys=[self.rec], args=[self.secret, str(token), ttl_ms]))

    def release(self, token: int) -> bool:
        return bool(self._release(keys=[self.rec, self.hist, self.wake],
                                  args=[self.secret, str(token), self.channel]))


@pytest.fixture
def new_store(redis_url: str) -> Iterator[RedisStore]:
    store = connect(redis_url)
    assert isinstance(store, RedisStore)
    yield store
    store.close()


def test_a_lease_the_old_version_holds_stays_held_through_the_upgrade(
    redis_url: str, new_store: RedisStore, key: str
) -> None:
    old_holder = OldVersionClient(redis_url, key, "old-worker:1")
    granted, first, _, _ = old_holder.acquire(ttl_ms=1000)
    assert granted == 1
    first = int(first)

    # An upgraded process wants the same key while the old one keeps renewing
    # for well past its ttl: it must never be granted in that time.
    lock = LeaseLock(new_store, key, ttl=5)
    taken: list[Lease] = []
    contender = threading.Thread(target=lambda: taken.append(lock.acquire(wait=30)))
    contender.start()
    renewed_until = time.monotonic() + 2.5  # 2.5 ttls of the old lease
    while time.monotonic() < renewed_until:
        assert old_holder.renew(first, ttl_ms=1000), "the old version lost its lease"
        record = new_store.get(key)
        assert record is not None and record.holder == "old-worker:1" and record.held
        assert record.token == first and not taken
        time.sleep(0.2)  # the renewal period of a 1 s lease, not a synchronisation

    # The old version's release wakes the upgraded waiter (it always pushes
    # the wake-up); the new grant's token is above the old one.
    assert old_holder.release(first)
    contender.join(timeout=30)
    assert len(taken) == 1 and taken[0].token > first
    lease = taken[0]
    second = lease.token

    # The old version is refused while the new one holds, and sees who does.
    busy = old_holder.acquire(ttl_ms=1000)
    assert busy[0] == 0 and busy[1] == lock.store.get(key).holder  # type: ignore[union-attr]
    assert busy[2] == str(second)
    lock.release(lease)
    again, third, _, _ = old_holder.acquire(ttl_ms=1000)
    assert again == 1 and int(third) > second
    assert old_holder.release(int(third))

    events = [(e.kind, e.token, e.holder) for e in new_store.history(key)]
    new_holder = lease.holder
    assert events == [("acquired", first, "old-worker:1"), ("released", first, "old-worker:1"),
                      ("acquired", second, new_holder), ("released", second, new_holder),
                      ("acquired", int(third), "old-worker:1"),
                      ("released", int(third), "old-worker:1")]
    times = [e.at for e in new_store.history(key)]
    assert times == sorted(times)


def test_the_old_versions_takeover_events_read_back_with_their_detail(
    redis_url: str, new_store: RedisStore, key: str
) -> None:
    """A takeover the old version recorded in its JSON list reads back as the
    new version records one (``detail.took_over``), in time order with the
    Stream's events."""
    rec = new_store.acquire(key, "new-worker:2", "s-new", 0.2, {"v": "new"}).record
    assert rec is not None
    old_taker = OldVersionClient(redis_url, key, "old-worker:3")
    deadline = time.monotonic() + 10
    while (reply := old_taker.acquire(ttl_ms=5000))[0] != 1:  # until the 0.2 s lease expires
        assert time.monotonic() < deadline, "the expired lease was never taken over"
        time.sleep(0.05)
    history = new_store.history(key)
    assert [(e.kind, e.token, e.holder) for e in history] == [
        ("acquired", rec.token, "new-worker:2"), ("acquired", int(reply[1]), "old-worker:3")]
    assert history[0].detail == {"meta": {"v": "new"}}
    assert history[1].detail["took_over"] == {"token": rec.token, "holder": "new-worker:2"}
    assert history[1].detail["meta"] == {"v": "old"}
    assert old_taker.release(int(reply[1]))
