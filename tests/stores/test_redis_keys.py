"""Redis store internals that the conformance suite cannot see: key layout
(hash tags for Cluster), the persistent fencing counter, the script cache,
and one round trip per lease operation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from lease_integrations import connect
from lease_integrations.stores.redis import RedisStore


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStore]:
    s = connect(redis_url)
    assert isinstance(s, RedisStore)
    yield s
    s.close()


def until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the store"
        time.sleep(0.02)


def test_every_key_of_a_lease_shares_one_hash_tag_and_slot(
    store: RedisStore, raw: redis.Redis, key: str
) -> None:
    rec = store.acquire(key, "alice", 30, {}).record
    assert rec is not None
    store.renew(key, "alice", rec.token, 30)
    names = sorted(raw.scan_iter(match=f"{{lease:{key}}}*"))
    assert names == [f"{{lease:{key}}}:{n}" for n in ("ctr", "hist", "lease", "rec")]
    assert len({key_slot(n.encode()) for n in names}) == 1
    assert raw.ttl(f"{{lease:{key}}}:lease") > 0, "the lease key expires by PX"
    for persistent in ("ctr", "rec", "hist"):
        assert raw.ttl(f"{{lease:{key}}}:{persistent}") == -1, f"{persistent} must never expire"


def test_counter_survives_expiry_and_deletion_of_the_lease_key(
    store: RedisStore, raw: redis.Redis, key: str
) -> None:
    first = store.acquire(key, "alice", 0.6, {}).record
    assert first is not None and first.token == 1
    until(lambda: raw.exists(f"{{lease:{key}}}:lease") == 0)  # gone by PX, on the server
    expired = store.get(key)
    assert expired is not None and expired.state == "expired" and expired.holder == "alice"
    second = store.acquire(key, "bob", 30, {}).record
    assert second is not None and second.token == 2
    # An eviction (or a careless DEL) of the live key: the lease reads as
    # expired, and the next token still follows on.
    raw.delete(f"{{lease:{key}}}:lease")
    after_del = store.get(key)
    assert after_del is not None and after_del.state == "expired"
    assert not store.renew(key, "bob", 2, 30), "a deleted lease must not be resurrected"
    third = store.acquire(key, "carol", 30, {}).record
    assert third is not None and third.token == 3


def test_tokens_stay_monotonic_when_either_persistent_key_is_lost(
    store: RedisStore, raw: redis.Redis, key: str
) -> None:
    rec = store.acquire(key, "alice", 30, {}).record
    assert rec is not None and store.release(key, "alice", rec.token)
    raw.delete(f"{{lease:{key}}}:ctr")  # the record hash still knows token 1
    rec = store.acquire(key, "bob", 30, {}).record
    assert rec is not None and rec.token == 2 and store.release(key, "bob", 2)
    raw.delete(f"{{lease:{key}}}:rec")  # the counter still knows token 2
    rec = store.acquire(key, "carol", 30, {}).record
    assert rec is not None and rec.token == 3


def test_operations_survive_a_flushed_script_cache(
    store: RedisStore, raw: redis.Redis, key: str
) -> None:
    rec = store.acquire(key, "alice", 30, {}).record
    assert rec is not None
    raw.script_flush()
    assert store.renew(key, "alice", rec.token, 30)
    raw.script_flush()
    assert store.release(key, "alice", rec.token)
    raw.script_flush()
    again = store.acquire(key, "bob", 30, {}).record
    assert again is not None and again.token == 2
    raw.script_flush()
    assert store.get(key) is not None and store.list(key)[0].holder == "bob"


class CountingConnection(redis.Connection):
    """Counts what the client puts on the wire: one ``send_packed_command`` is
    one request (a pipeline or a script call included)."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sends += 1
        super().send_packed_command(command, check_health)


def test_acquire_renew_and_release_are_one_round_trip_each(redis_url: str, key: str) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, decode_responses=True,
                                         connection_class=CountingConnection)
    store = RedisStore(redis.Redis(connection_pool=pool), url=redis_url)
    try:
        counts: dict[str, int] = {}

        def count(name: str, call: Any) -> Any:
            before = CountingConnection.sends
            result = call()
            counts[name] = CountingConnection.sends - before
            return result

        rec = count("acquire", lambda: store.acquire(key, "alice", 30, {"dag_id": "d"})).record
        assert rec is not None
        assert count("busy acquire", lambda: not store.acquire(key, "bob", 30, {}).granted)
        assert count("renew", lambda: store.renew(key, "alice", rec.token, 30))
        assert count("get", lambda: store.get(key)) is not None
        assert count("release", lambda: store.release(key, "alice", rec.token))
        assert counts == {"acquire": 1, "busy acquire": 1, "renew": 1, "get": 1, "release": 1}
        # After SCRIPT FLUSH the first call pays EVALSHA, SCRIPT LOAD, EVALSHA once.
        redis.Redis(connection_pool=pool).script_flush()
        assert count("acquire after flush", lambda: store.acquire(key, "c", 30, {}).granted)
        assert counts["acquire after flush"] == 3
    finally:
        store.close()
