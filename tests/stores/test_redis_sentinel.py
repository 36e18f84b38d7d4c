"""The Redis store behind Sentinel (a primary, one replica and one sentinel,
started once per session by servers/redis_topologies.py): the
``redis+sentinel://`` URL, a user-built Sentinel client, and a failover while
a lease is held."""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel
from servers.redis_topologies import SERVICE, RedisSentinelSet, command

from lease_integrations import LeaseBusy, LeaseLock, LeaseLost, connect
from lease_integrations.core.errors import StoreUnavailable
from lease_integrations.stores.redis import RedisStore
from lease_integrations.stores.redis_connect import retry_count
from lease_integrations.stores.redis_pool import get_connection

TTL = 3.0


def test_a_user_built_sentinel_client_holds_leases_with_its_retries_switched_off(
    redis_sentinel: RedisSentinelSet, key: str
) -> None:
    sentinel = Sentinel([("127.0.0.1", redis_sentinel.sentinel_port)], socket_timeout=2)  # type: ignore[no-untyped-call]
    client = sentinel.master_for(SERVICE, decode_responses=True,  # type: ignore[no-untyped-call]
                                 retry=Retry(ExponentialBackoff(), 3))
    def connection_retries() -> int:
        connection = get_connection(client.connection_pool)
        try:
            return retry_count(connection.retry)
        finally:
            client.connection_pool.release(connection)

    assert connection_retries() == 3
    store = RedisStore(client)
    try:
        assert connection_retries() == 0
        with LeaseLock(store, key, ttl=30).hold() as lease:
            record = store.get(key)
            assert record is not None and record.token == lease.token
    finally:
        store.close()


def test_a_failover_during_a_held_lease_never_gives_one_token_to_two_holders(
    redis_sentinel: RedisSentinelSet, redis_sentinel_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SENTINEL FAILOVER while the lease is held: the holder either keeps the
    lease (its renewals reach the new primary) or learns it lost it; a
    contender hammering the key meanwhile is granted nothing the holder still
    trusts, and no token is granted twice."""
    key = f"failover-{uuid.uuid4().hex[:10]}"
    url = f"{redis_sentinel_url}?socket_timeout=1&connect_timeout=1"
    holder_store, contender_store = connect(url), connect(url)
    holder = LeaseLock(holder_store, key, ttl=TTL, on_lost="check")
    contender = LeaseLock(contender_store, key, ttl=TTL)
    lease = holder.acquire(wait=0)
    grants = [("holder", lease.token)]
    overlaps, outages, busy = [], 0, 0
    old_primary = redis_sentinel.master_port()
    # Sentinel promotes only a replica it heard from lately (INFO every 10 s,
    # PING every 1 s): on a loaded machine the first FAILOVER may find none yet.
    give_up = time.monotonic() + 30
    while True:
        reply = command(redis_sentinel.sentinel_port, "SENTINEL", "FAILOVER", SERVICE)
        if "+OK" in reply:
            break
        assert "NOGOODSLAVE" in reply and time.monotonic() < give_up, reply
        time.sleep(0.2)
    switched_at = None
    deadline = time.monotonic() + 60
    try:
        # Contend through the failover and for two ttls after the switch.
        while switched_at is None or time.monotonic() < switched_at + 2 * TTL:
            assert time.monotonic() < deadline, "the failover did not finish"
            if switched_at is None and redis_sentinel.master_port() != old_primary:
                switched_at = time.monotonic()
            try:
                taken = contender.acquire(wait=0)
            except LeaseBusy:
                busy += 1
            except StoreUnavailable:
                outages += 1
            else:
                grants.append(("contender", taken.token))
                if lease.trusted_for() > 0:
                    overlaps.append(taken.token)
                contender.release(taken)
            time.sleep(0.05)
        try:
            lease.check()
            outcome = "kept"
        except LeaseLost:
            outcome = "lost"
        history = holder_store.history(key, limit=1000) if outcome == "kept" else []
        with capsys.disabled():
            print(f"\nsentinel failover: holder {outcome} its lease (token {lease.token}); "
                  f"contender: {busy} busy, {outages} outages, grants {grants[1:]}")
        tokens = [token for _, token in grants]
        assert len(set(tokens)) == len(tokens), f"a token was granted twice: {grants}"
        assert not overlaps, f"granted while the holder still trusted its lease: {overlaps}"
        if outcome == "kept":
            assert all(who == "holder" for who, _ in grants)
            acquired = [e.token for e in history if e.kind == "acquired"]
            assert len(set(acquired)) == len(acquired)
            assert holder_store.get(key).holder == lease.holder  # type: ignore[union-attr]
    finally:
        with contextlib.suppress(LeaseLost):
            holder.release(lease)
        holder_store.close()
        contender_store.close()
