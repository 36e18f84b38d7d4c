"""rediss:// against a real TLS redis-server (a throwaway self-signed
certificate made with openssl): the certificate is checked, never skipped."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from servers.redis_server import RedisServer

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
