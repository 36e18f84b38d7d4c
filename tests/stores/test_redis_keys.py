"""Redis store internals that the conformance suite cannot see: key layout
(one hash and one history list per key, hash tags for Cluster, no TTLs),
the clock-floored tokens, the previous layout's records, the script cache,
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
    rec = store.acquire(key, "alice", "s-alice", 30, {}).record
    assert rec is not None
    store.renew(key, "s-alice", rec.token, 30)
    names = sorted(raw.scan_iter(match=f"{{lease:{key}}}*"))
    assert names == [f"{{lease:{key}}}:{n}" for n in ("log", "rec")]
    assert len({key_slot(n.encode()) for n in names}) == 1
    for name in names:  # nothing a volatile-* eviction policy could pick
        assert raw.ttl(name) == -1, f"{name} must never carry a TTL"
    fields = raw.hgetall(f"{{lease:{key}}}:rec")
    assert set(fields) == {"holder", "secret", "token", "acquired_at", "renewed_at",
                           "expires_at", "meta"}
    assert fields["secret"] == "s-alice" and fields["holder"] == "alice"


def test_expiry_is_judged_by_the_script_on_the_server_clock(
    store: RedisStore, raw: redis.Redis, key: str
) -> None:
    first = store.acquire(key, "alice", "s-alice", 0.6, {}).record
    assert first is not None
    until(lambda: (r := store.get(key)) is not None and r.state == "expired")
    expired = store.get(key)
    assert expired is not None and expired.holder == "alice"
    assert not store.renew(key, "s-alice", first.token, 30), "an expired lease is not resurrected"
    second = store.acquire(key, "bob", "s-bob", 30, {}).record
    assert second is not None and second.token > first.token
    assert raw.exists(f"{{lease:{key}}}:rec") == 1


def test_tokens_stay_above_earlier_grants_when_the_record_is_lost(
    store: RedisStore, raw: redis.Redis, key: str
) -> None:
    """A DEL (or an eviction, a FLUSHALL, a lagging replica) loses the counter
    with the record: the clock floor keeps the next token above the last."""
    tokens = []
    for name in ("alice", "bob"):
        rec = store.acquire(key, name, f"s-{name}", 30, {}).record
        assert rec is not None
        tokens.append(rec.token)
        raw.delete(f"{{lease:{key}}}:rec")
    rec = store.acquire(key, "carol", "s-carol", 30, {}).record
    assert rec is not None
    tokens.append(rec.token)
    print("tokens across two lost records:", tokens)
    assert tokens == sorted(set(tokens))


def test_a_record_written_by_the_previous_layout_keeps_working(
    store: RedisStore, raw: redis.Redis, key: str
) -> None:
    """The old layout kept a PX lease key, a counter key and the record hash
    (without a secret): a released old record is taken over with a greater
    token, and a held one stays busy until its expires_at."""
    tag = f"{{lease:{key}}}"
    now_ms = int(time.time() * 1000)
    raw.hset(f"{tag}:rec", mapping={"holder": "old:1:abc", "token": "41", "acquired_at": now_ms,
                                    "renewed_at": now_ms, "expires_at": now_ms + 30_000,
                                    "meta": "{}"})
    raw.set(f"{tag}:ctr", "41")
    raw.set(f"{tag}:lease", "41", px=30_000)
    busy = store.acquire(key, "new", "s-new", 30, {})
    assert not busy.granted and busy.record is not None and busy.record.token == 41
    raw.hdel(f"{tag}:rec", "holder")  # the old version released it
    rec = store.acquire(key, "new", "s-new", 30, {}).record
    assert rec is not None and rec.token > 41


def test_operations_survive_a_flushed_script_cache(
    store: RedisStore, raw: redis.Redis, key: str
) -> None:
    rec = store.acquire(key, "alice", "alice", 30, {}).record
    assert rec is not None
    first = rec.token
    raw.script_flush()
    assert store.renew(key, "alice", rec.token, 30)
    raw.script_flush()
    assert store.release(key, "alice", rec.token)
    raw.script_flush()
    again = store.acquire(key, "bob", "bob", 30, {}).record
    assert again is not None and again.token > first
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

        rec = count("acquire", lambda: store.acquire(key, "alice", "alice", 30, {"dag_id": "d"})).record
        assert rec is not None
        assert count("busy acquire", lambda: not store.acquire(key, "bob", "bob", 30, {}).granted)
        assert count("renew", lambda: store.renew(key, "alice", rec.token, 30))
        assert count("get", lambda: store.get(key)) is not None
        assert count("release", lambda: store.release(key, "alice", rec.token))
        assert counts == {"acquire": 1, "busy acquire": 1, "renew": 1, "get": 1, "release": 1}
        # After SCRIPT FLUSH the first call pays EVALSHA, SCRIPT LOAD, EVALSHA once.
        redis.Redis(connection_pool=pool).script_flush()
        assert count("acquire after flush", lambda: store.acquire(key, "c", "c", 30, {}).granted)
        assert counts["acquire after flush"] == 3
    finally:
        store.close()
