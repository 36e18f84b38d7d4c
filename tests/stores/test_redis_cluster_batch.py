"""Batched renewals on the three-master Redis Cluster (servers/redis_topologies.py):
``renew_many`` renews a batch with one pipelined request per node, each lease
still judged on its own, and survives a node that forgot the script or a slot
map that went stale. Round trips are counted by the servers themselves
(``total_reads_processed`` in ``INFO stats``: one read per request that
arrives), not by the client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from redis.cluster import ClusterNode
from servers.redis_topologies import RedisClusterNodes, command

from lease_integrations import connect
from lease_integrations.core.store import RenewItem
from lease_integrations.stores.redis import RedisStore

TTL = 30.0
LEASES = 30


def reads(port: int) -> int:
    """Requests the node has read so far (this INFO included)."""
    info = command(port, "INFO", "stats")
    return int(info.split("total_reads_processed:")[1].split("\r\n")[0])


def secret(i: int) -> str:
    return f"secret-{i}"


@pytest.fixture
def store(redis_cluster_url: str) -> Iterator[RedisStore]:
    found = connect(redis_cluster_url)
    assert isinstance(found, RedisStore)
    yield found
    found.close()


@pytest.fixture
def leases(store: RedisStore) -> list[RenewItem]:
    """LEASES leases held by this store, a third on each primary, interleaved."""
    base = f"batch-{uuid.uuid4().hex[:8]}"
    by_node: dict[str, list[str]] = {}
    for n in range(LEASES * 10):
        name = f"{base}-{n}"
        node = store._renew_client.get_node_from_key(store._prepared(name)[1][0]).name
        by_node.setdefault(node, []).append(name)
    assert len(by_node) == 3
    names = [name for trio in zip(*by_node.values()) for name in trio][:LEASES]
    assert len(names) == LEASES
    items: list[RenewItem] = []
    for i, name in enumerate(names):
        got = store.acquire(name, "worker", secret(i), TTL, {})
        assert got.granted and got.record is not None
        items.append((name, secret(i), got.record.token, TTL))
    return items


def test_a_batch_is_one_request_per_node_and_each_lease_is_judged_on_its_own(
    redis_cluster: RedisClusterNodes, store: RedisStore, leases: list[RenewItem]
) -> None:
    assert store.batch_renewals
    assert store.renew_many(leases) == [True] * LEASES  # warm: connections opened

    before = {n.port: reads(n.port) for n in redis_cluster.nodes}
    assert store.renew_many(leases) == [True] * LEASES
    after = {n.port: reads(n.port) for n in redis_cluster.nodes}
    # Besides the batch: the second INFO, and the first INFO's connection
    # closing (a read of end-of-file). Ten leases per node, one request (two
    # if TCP split it); one call per lease would be ten.
    requests = {port: after[port] - before[port] - 2 for port in before}
    assert all(n <= 2 for n in requests.values()), requests

    broken = leases[7][0]
    assert store.force_release(broken, by="test") is not None
    outcome = store.renew_many(leases)
    assert outcome == [i != 7 for i in range(LEASES)]
    record = store.get(broken)
    assert record is not None and record.state == "released"  # refused, not resurrected


def test_a_node_that_forgot_the_script_or_a_stale_slot_map_still_gets_every_verdict(
    redis_cluster: RedisClusterNodes, store: RedisStore, leases: list[RenewItem]
) -> None:
    client = store._renew_client
    flushed = redis_cluster.nodes[0].port
    assert command(flushed, "SCRIPT", "FLUSH").startswith("+OK")
    before = reads(flushed)
    assert store.renew_many(leases) == [True] * LEASES
    # The refused batch, SCRIPT LOAD and the batch again (besides the INFOs),
    # where one call per lease would be ten.
    assert reads(flushed) - before - 2 <= 4

    # Point one lease's slot at a node that does not own it: that node
    # answers MOVED and the lease is renewed where it lives.
    rec = store._prepared(leases[3][0])[1][0]
    slot = client.keyslot(rec)
    owner = client.get_node_from_key(rec)
    wrong = next(n for n in client.get_primaries() if n.name != owner.name)
    client.nodes_manager.slots_cache[slot] = [wrong]
    assert store.renew_many(leases) == [True] * LEASES
    assert client.get_node_from_key(rec).name == owner.name  # the map learnt it back

    # A slot mapped to a node nobody listens on: no verdict (None, which the
    # heartbeat retries) for that lease alone, never False (lost).
    client.nodes_manager.slots_cache[slot] = [ClusterNode("127.0.0.1", 1)]  # type: ignore[no-untyped-call]
    assert list(store.renew_many(leases)) == [None if i == 3 else True for i in range(LEASES)]
    assert client.get_node_from_key(rec).name == owner.name  # the map was read again
