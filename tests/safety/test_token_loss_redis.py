"""Issue 13, reproductions 2 and 3 on Redis: a server that loses data must not
grant a token twice. Each test starts its own redis-server processes on
127.0.0.1, loses the lease data the way production does (failover to a
lagging replica, FLUSHALL, a restart without persistence, eviction), and
prints the tokens granted before and after. The history checker's rule 5
(no token granted twice) judges every run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from history import tokens_granted_twice
from proxy import FaultProxy

from lease_integrations import connect
from lease_integrations.core.errors import ConfigurationError
from lease_integrations.stores.redis import RedisStore


def until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Grants:
    """Every grant of the run, in order, for the checker."""

    def __init__(self) -> None:
        self.log: list[tuple[int, str]] = []

    def cycle(self, store: Any, key: str, who: str) -> int:
        rec = store.acquire(key, who, f"secret-{who}", 30, {}).record
        assert rec is not None, f"{who} was refused {key}"
        self.log.append((rec.token, who))
        assert store.release(key, f"secret-{who}", rec.token)
        return int(rec.token)

    def judge(self) -> None:
        tokens = [t for t, _ in self.log]
        assert tokens_granted_twice(self.log) == []
        assert tokens == sorted(tokens), f"tokens went backwards: {tokens}"


@pytest.fixture
def raw_clients() -> Iterator[list[redis.Redis]]:
    clients: list[redis.Redis] = []
    yield clients
    for c in clients:
        c.close()


def client(port: int, clients: list[redis.Redis]) -> redis.Redis:
    c = redis.Redis(port=port, decode_responses=True, socket_timeout=5)
    clients.append(c)
    return c


def test_failover_to_a_lagging_replica_never_reissues_a_token(
    redis_server_factory: Any, raw_clients: list[redis.Redis], key: str
) -> None:
    primary, replica = redis_server_factory(), redis_server_factory()
    link = FaultProxy("127.0.0.1", primary.port)  # the replication link runs through it
    try:
        r = client(replica.port, raw_clients)
        r.replicaof("127.0.0.1", link.port)
        until(lambda: r.info("replication").get("master_link_status") == "up", "replication")
        grants = Grants()
        store = connect(primary.url)
        before = [grants.cycle(store, key, f"p{i}") for i in range(3)]
        p = client(primary.port, raw_clients)
        assert p.wait(1, 5000) == 1, "the replica must have the first grants"
        link.blackhole()  # the replica falls behind from here on
        lagged = [grants.cycle(store, key, f"lag{i}") for i in range(3)]
        store.close()
        primary.kill()
        r.replicaof("no", "one")  # promotion
        until(lambda: r.info("replication").get("role") == "master", "promotion")
        promoted = connect(replica.url)
        seen = promoted.get(key)
        assert seen is not None and seen.token == before[-1], "the replica lags by 3 grants"
        after = [grants.cycle(promoted, key, f"r{i}") for i in range(3)]
        promoted.close()
        print(f"\nredis failover: before the cut {before}, lost with the primary {lagged}, "
              f"replica had {seen.token}, after promotion {after}")
        assert after[0] > max(before + lagged)
        grants.judge()
    finally:
        link.close()


def test_flushall_and_a_restart_without_persistence_never_reissue(
    redis_server_factory: Any, raw_clients: list[redis.Redis], key: str
) -> None:
    server = redis_server_factory()  # --save "" --appendonly no
    grants = Grants()
    store = connect(server.url)
    before = [grants.cycle(store, key, f"a{i}") for i in range(3)]
    client(server.port, raw_clients).flushall()
    after_flush = [grants.cycle(store, key, f"b{i}") for i in range(3)]
    store.close()
    server.restart()
    store = connect(server.url)
    assert store.get(key) is None, "the restart lost everything"
    after_restart = [grants.cycle(store, key, f"c{i}") for i in range(3)]
    store.close()
    print(f"\nredis data loss: before {before}, after FLUSHALL {after_flush}, "
          f"after a restart without persistence {after_restart}")
    assert after_flush[0] > before[-1] and after_restart[0] > after_flush[-1]
    grants.judge()


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_allkeys_eviction_is_refused_at_connect_unless_opted_out(
    redis_server_factory: Any, raw_clients: list[redis.Redis], policy: str, key: str
) -> None:
    server = redis_server_factory()
    client(server.port, raw_clients).config_set("maxmemory-policy", policy)
    with pytest.raises(ConfigurationError) as refused:
        connect(server.url)
    assert policy in str(refused.value) and "noeviction" in str(refused.value)
    assert "allow_eviction=true" in str(refused.value)
    with connect(f"{server.url}?allow_eviction=true") as store:  # knowingly
        assert store.acquire(key, "alice", "s", 30, {}).granted


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru", "volatile-lfu",
                                    "volatile-random", "volatile-ttl"])
def test_safe_policies_are_accepted(
    redis_server_factory: Any, raw_clients: list[redis.Redis], policy: str
) -> None:
    server = redis_server_factory()
    client(server.port, raw_clients).config_set("maxmemory-policy", policy)
    with connect(server.url) as store:
        assert isinstance(store, RedisStore)


def test_volatile_lru_under_memory_pressure_keeps_the_holder_and_its_token(
    redis_server_factory: Any, raw_clients: list[redis.Redis], key: str
) -> None:
    """Reproduction 3 (volatile-lru): before, the PX lease key was evicted
    and a second holder got the lease while the first held it. Now no lease
    key has a TTL: filler keys with a TTL are evicted, the lease is not."""
    server = redis_server_factory()
    raw = client(server.port, raw_clients)
    raw.config_set("maxmemory-policy", "volatile-lru")
    grants = Grants()
    store = connect(server.url)
    before = [grants.cycle(store, key, f"a{i}") for i in range(2)]
    held = store.acquire(key, "holder", "s-holder", 30, {}).record
    assert held is not None
    grants.log.append((held.token, "holder"))
    used = int(raw.info("memory")["used_memory"])
    raw.config_set("maxmemory", str(used + 2_000_000))
    filler = "x" * 10_000
    pipe = raw.pipeline(transaction=False)
    for i in range(1_000):  # ~10 MB of keys with a TTL against a 2 MB margin
        pipe.set(f"filler:{i}", filler, ex=3600)
    pipe.execute()
    evicted = int(raw.info("stats")["evicted_keys"])
    assert evicted > 0, "the filler must have pushed the server into eviction"
    contender = store.acquire(key, "contender", "s-contender", 30, {})
    assert not contender.granted, "a second holder while the first holds"
    assert store.renew(key, "s-holder", held.token, 30)
    assert store.release(key, "s-holder", held.token)
    after = grants.cycle(store, key, "next")
    store.close()
    print(f"\nredis volatile-lru: {evicted} filler keys evicted; tokens before {before}, "
          f"held {held.token} throughout, next {after}")
    grants.judge()
