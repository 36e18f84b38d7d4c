"""The Redis store on a three-master Redis Cluster (started once per session by
servers/redis_topologies.py): notified waits across nodes, ``list()`` and
``leasectl list`` over every primary, a user-built ``RedisCluster`` client,
and the fencing guard's hash-tag rule. The conformance suite and the race test
run on the same cluster unchanged (tests/conftest.py, tests/race/conftest.py)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from servers.redis_server import free_port
from servers.redis_topologies import RedisClusterNodes, command

from lease_integrations import Lease, LeaseLock, connect
from lease_integrations.cli import main as leasectl
from lease_integrations.core.errors import StaleToken, StoreUnavailable
from lease_integrations.core.fencing import RedisFence
from lease_integrations.stores.redis import RedisStore
from lease_integrations.stores.redis_connect import retry_count


@pytest.fixture
def raw(redis_cluster: RedisClusterNodes) -> Iterator[RedisCluster]:
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port)  # type: ignore[no-untyped-call]
                                         for n in redis_cluster.nodes], decode_responses=True)
    yield client
    client.close()


def until(predicate: Any, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def blocked(cluster: RedisClusterNodes) -> int:
    """Clients blocked in BLPOP (waiters), added up over every node."""
    total = 0
    for node in cluster.nodes:
        for line in command(node.port, "CLIENT", "LIST").splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            total += fields.get("cmd") == "blpop" and "b" in fields.get("flags", "")
    return total


def test_a_waiting_lock_is_woken_by_the_release_notification_on_a_cluster(
    redis_cluster: RedisClusterNodes, redis_cluster_url: str, key: str
) -> None:
    holder_store, waiter_store = connect(redis_cluster_url), connect(redis_cluster_url)
    try:
        holder_lock = LeaseLock(holder_store, key, ttl=30)
        held = holder_lock.acquire(wait=0)
        woken: list[bool] = []
        real_wait = waiter_store.wait_for_release

        def recording_wait(k: str, timeout: float) -> bool:
            result = real_wait(k, timeout)
            woken.append(result)
            return result

        waiter_store.wait_for_release = recording_wait  # type: ignore[method-assign]
        got: list[Lease] = []
        lock = LeaseLock(waiter_store, key, ttl=30)
        thread = threading.Thread(target=lambda: got.append(lock.acquire(wait=60)))
        thread.start()
        until(lambda: blocked(redis_cluster) >= 1, what="the waiter to block")
        holder_lock.release(held)
        thread.join(timeout=30)
        assert got and got[0].token > held.token
        assert woken[-1] is True, f"the waiter was not woken by a notification: {woken}"
        lock.release(got[0])
    finally:
        holder_store.close()
        waiter_store.close()


def test_waiters_on_keys_of_different_masters_are_each_woken(
    redis_cluster: RedisClusterNodes, redis_cluster_url: str, raw: RedisCluster
) -> None:
    """A release pushes the wake-up onto the key's list on the master that
    owns it; each waiter's BLPOP is routed to that master."""
    base = f"nodes-{uuid.uuid4().hex[:8]}"
    by_node: dict[str, str] = {}
    for i in range(64):
        k = f"{base}-{i}"
        by_node.setdefault(raw.get_node_from_key(f"{{lease:{k}}}").name, k)
    assert len(by_node) == 3
    keys = sorted(by_node.values())
    with connect(redis_cluster_url) as holder, connect(redis_cluster_url) as waiter:
        locks = {k: LeaseLock(holder, k, ttl=30) for k in keys}
        leases = {k: lock.acquire(wait=0) for k, lock in locks.items()}
        results: dict[str, bool] = {}
        threads = [threading.Thread(target=lambda k=k: results.__setitem__(
            k, waiter.wait_for_release(k, 30))) for k in keys]
        for t in threads:
            t.start()
        until(lambda: blocked(redis_cluster) >= len(keys), what="every waiter to block")
        for k in keys:
            locks[k].release(leases[k])
        for t in threads:
            t.join(timeout=30)
        assert results == {k: True for k in keys}


def test_list_and_leasectl_see_leases_on_every_primary(
    redis_cluster_url: str, raw: RedisCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"spread-{uuid.uuid4().hex[:8]}-"
    keys = [f"{prefix}{i}" for i in range(12)]
    with connect(redis_cluster_url) as store:
        leases = [LeaseLock(store, k, ttl=30).acquire(wait=0) for k in keys]
        nodes = {raw.get_node_from_key(f"{{lease:{k}}}").name for k in keys}
        assert len(nodes) >= 2, "the keys should live on more than one master"
        assert [r.key for r in store.list(prefix)] == sorted(keys)
        assert leasectl(["--url", redis_cluster_url, "--json", "list", prefix]) == 0
        listed = json.loads(capsys.readouterr().out)
        rows = listed if isinstance(listed, list) else listed.get("leases", [])
        assert sorted(row["key"] for row in rows) == sorted(keys)
        for k, lease in zip(keys, leases, strict=True):
            LeaseLock(store, k, ttl=30).release(lease)


def cluster_retries(client: RedisCluster) -> int:
    """How often the Cluster resends a failed command: its ``retry`` counts
    from redis-py 6.0 on; 5.x counts in ``cluster_error_retry_attempts`` and
    has no ``retry`` unless given one (then only its nodes' connections use it)."""
    if hasattr(client, "cluster_error_retry_attempts"):
        return int(client.cluster_error_retry_attempts)
    return retry_count(client.retry)


def test_a_user_built_cluster_client_works_with_its_retries_switched_off(
    raw: RedisCluster, redis_cluster: RedisClusterNodes, key: str
) -> None:
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port)  # type: ignore[no-untyped-call]
                                         for n in redis_cluster.nodes], decode_responses=True)
    assert cluster_retries(client) > 0  # redis-py's default
    store = RedisStore(client)
    try:
        assert cluster_retries(client) == 0
        lock = LeaseLock(store, key, ttl=30)
        with lock.hold() as lease:
            record = store.get(key)
            assert record is not None and record.token == lease.token
        assert [e.kind for e in store.history(key)][-2:] == ["acquired", "released"]
    finally:
        store.close()


def test_a_cluster_url_builds_clients_that_resend_nothing(redis_cluster_url: str) -> None:
    with connect(redis_cluster_url) as store:
        assert isinstance(store, RedisStore)
        assert cluster_retries(store._client) == 0
        assert cluster_retries(store._renew_client) == 0


def test_the_fence_works_on_a_cluster_when_its_names_share_a_hash_tag(
    raw: RedisCluster, redis_cluster_url: str, key: str
) -> None:
    fence = RedisFence()
    resource = f"{{ledger-{key}}}"  # the tag puts the fence key and the data in one slot
    fence.fenced_set(raw, resource, 7, f"{resource}:total", "42")
    with pytest.raises(StaleToken):
        fence.fenced_set(raw, resource, 6, f"{resource}:total", "stale")
    assert raw.get(f"{resource}:total") == "42"
    untagged = f"ledger-{key}"
    with pytest.raises((redis.RedisError, RedisClusterException), match="same key slot"):
        fence.fenced_set(raw, untagged, 7, f"{untagged}:total-x", "42")


def _binds_ipv6_loopback() -> bool:
    try:
        free_port("::1")
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def ipv6_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    if not _binds_ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback (::1)")
    cluster = RedisClusterNodes(tmp_path_factory.mktemp("redis-cluster-v6"), host="::1")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_a_cluster_on_ipv6_hosts_holds_leases_and_lists_them(
    ipv6_cluster: RedisClusterNodes, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first startup node once became redis://::1:port (no brackets): every
    # such URL failed with ValueError, a 500 in the UI and exit 5 in leasectl.
    url = ipv6_cluster.url
    assert url.startswith("redis+cluster://[::1]:")
    prefix = f"v6-{uuid.uuid4().hex[:8]}-"
    keys = [f"{prefix}{i}" for i in range(6)]
    with connect(url) as store:
        # ttl 2 s, heartbeat every 0.67 s: renewals reach each key's node by its IPv6 name.
        locks = [LeaseLock(store, k, ttl=2, on_lost="check") for k in keys]
        leases = [lock.acquire(wait=0) for lock in locks]
        until(lambda: all(r.renewed_at > r.acquired_at for r in store.list(prefix)),
              what="a renewal of every lease")
        assert leasectl(["--url", url, "--json", "list", prefix]) == 0
        listed = json.loads(capsys.readouterr().out)
        rows = listed if isinstance(listed, list) else listed.get("leases", [])
        assert sorted(row["key"] for row in rows) == sorted(keys)
        for lock, lease in zip(locks, leases, strict=True):
            lease.check()
            lock.release(lease)


def test_an_unreachable_ipv6_cluster_is_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable):
        connect("redis+cluster://[::1]:1,[::1]:2?connect_timeout=1&socket_timeout=1")
