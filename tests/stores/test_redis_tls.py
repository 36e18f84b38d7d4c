"""rediss:// against a real TLS redis-server, and rediss+cluster:// against a
three-master cluster served over TLS only (a throwaway self-signed certificate
made with openssl): the certificate is checked, never skipped."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from servers.redis_server import RedisServer
from servers.redis_topologies import RedisClusterNodes

from lease_integrations import connect
from lease_integrations.core.errors import StoreUnavailable


@pytest.fixture
def tls_server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory(tls=True)


def test_rediss_with_the_servers_ca_holds_leases(tls_server: RedisServer, key: str) -> None:
    with connect(tls_server.url) as store:
        rec = store.acquire(key, "alice", "alice", 30, {}).record
        assert rec is not None and rec.token > 0
        assert store.renew(key, "alice", rec.token, 30)
        assert store.release(key, "alice", rec.token)


def test_rediss_refuses_a_certificate_it_cannot_verify(tls_server: RedisServer) -> None:
    untrusted = f"rediss://127.0.0.1:{tls_server.port}/0?connect_timeout=2&socket_timeout=2"
    with pytest.raises(StoreUnavailable) as caught:
        connect(untrusted)
    assert "certificate" in str(caught.value).lower()


def test_plain_redis_to_a_tls_port_fails_instead_of_hanging(tls_server: RedisServer) -> None:
    with pytest.raises(StoreUnavailable):
        connect(f"redis://127.0.0.1:{tls_server.port}/0?connect_timeout=1&socket_timeout=1")


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    cluster = RedisClusterNodes(tmp_path_factory.mktemp("redis-tls-cluster"), tls=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_rediss_cluster_with_the_nodes_ca_holds_leases(tls_cluster: RedisClusterNodes,
                                                      key: str) -> None:
    with connect(tls_cluster.url) as store:
        rec = store.acquire(key, "alice", "alice", 30, {}).record
        assert rec is not None and rec.token > 0
        assert store.renew(key, "alice", rec.token, 30)
        assert [r.key for r in store.list(key)] == [key]  # asks every primary
        assert store.release(key, "alice", rec.token)


@pytest.mark.parametrize("why", ["unknown CA", "wrong host name"])
def test_rediss_cluster_refuses_a_certificate_it_cannot_verify(
        tls_cluster: RedisClusterNodes, why: str) -> None:
    hosts, _, trust = tls_cluster.url.partition("?")
    query = "connect_timeout=2&socket_timeout=2"
    if why == "wrong host name":
        # 127.1 reaches 127.0.0.1 but is checked as a name, which the certificate
        # (for IP 127.0.0.1) does not carry ("localhost" redis-py turns into 127.0.0.1).
        hosts = hosts.replace("127.0.0.1", "127.1")
        query += f"&{trust}&ssl_check_hostname=true"
    with pytest.raises(StoreUnavailable) as caught:
        connect(f"{hosts}?{query}")
    assert "certificate" in str(caught.value).lower()
