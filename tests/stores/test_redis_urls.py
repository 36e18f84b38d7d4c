"""Redis URL forms (one server, Cluster, Sentinel) and clients handed to
``RedisStore``: what is accepted, what is refused, and that the store always
ends up with retries off and pools that wait."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from servers.redis_server import free_port

from lease_integrations import connect
from lease_integrations.core.errors import ConfigurationError, StoreUnavailable
from lease_integrations.stores.redis import RedisStore
from lease_integrations.stores.redis_connect import parse, retry_count
from lease_integrations.stores.redis_pool import get_connection


def settings(url: str, **options: object):  # type: ignore[no-untyped-def]
    return parse(url, options, {"prefix": str})


def test_cluster_and_sentinel_urls_list_their_hosts() -> None:
    c = settings("rediss+cluster://u:p%2Fw@a:7000,b:7001,[::1]:7002?max_connections=9")
    assert (c.topology, c.tls, c.nodes) == ("cluster", True, (("a", 7000), ("b", 7001), ("::1", 7002)))
    assert (c.username, c.password, c.max_connections) == ("u", "p/w", 9)
    s = settings("redis+sentinel://s1:26379,s2/leases/3?sentinel_auth=true&prefix=team")
    assert (s.topology, s.nodes, s.service, s.db) == (
        "sentinel", (("s1", 26379), ("s2", 6379)), "leases", 3)
    assert s.sentinel_auth and s.store_options == {"prefix": "team"}


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel://s1:26379", "names the service"),
    ("redis+cluster://a:7000/1", "database 0 only"),
    ("redis://a:1,b:2/0", "bad store URL"),
    ("redis+cluster://a:7000,b:x", "port that is not a number"),
    ("redis+cluster://a:7000?max_connections=0", "between 1 and 100000"),
    ("redis+cluster://a:7000?sentinel_auth=true", "unknown option"),
    ("redis+sentinel://s1/svc/0/9", "unexpected path"),
])
def test_bad_urls_are_configuration_errors_before_connecting(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        connect(url)


def test_a_password_in_a_multi_host_url_is_never_shown() -> None:
    with pytest.raises(ConfigurationError) as caught:
        connect("redis+cluster://user:hunter2-pw@a:7000,b:7001/5")
    assert "hunter2-pw" not in str(caught.value)


@pytest.mark.parametrize("url", [
    "redis+cluster://user:hunter2-pw@127.0.0.1:{port}?connect_timeout=2",
    "redis+sentinel://user:hunter2-pw@127.0.0.1:{port}/leases/0?connect_timeout=2",
])
def test_an_unreachable_cluster_or_sentinel_is_store_unavailable_with_a_short_masked_message(
    url: str,
) -> None:
    with pytest.raises(StoreUnavailable) as caught:
        connect(url.format(port=free_port()))
    message = str(caught.value)
    assert "hunter2-pw" not in message and "***" in message
    assert "<redis" not in message, "no client reprs in the message"


def test_url_clients_use_a_waiting_pool_of_the_given_size_and_a_renew_pool(redis_url: str) -> None:
    with connect(f"{redis_url}?max_connections=7") as store:
        assert isinstance(store, RedisStore)
        pool = store._client.connection_pool
        assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections == 7
        renew_pool = store._renew_client.connection_pool
        assert renew_pool is not pool and renew_pool.max_connections == 2
        assert retry_count(store._client.get_retry()) == 0


@pytest.mark.parametrize("pool_class", [redis.ConnectionPool, redis.BlockingConnectionPool])
def test_a_user_built_client_gets_its_retries_switched_off_and_a_renew_pool(
    redis_url: str, pool_class: type[redis.ConnectionPool]
) -> None:
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    pool = pool_class(host="127.0.0.1", port=port, decode_responses=True,
                      retry=Retry(ExponentialBackoff(), 3))
    client = redis.Redis(connection_pool=pool)

    def connection_retries() -> int:
        connection = get_connection(client.connection_pool)
        try:
            return retry_count(connection.retry)
        finally:
            client.connection_pool.release(connection)

    assert connection_retries() == 3
    store = RedisStore(client, url=redis_url)
    try:
        assert connection_retries() == 0
        assert store._renew_client is not client
        assert store._renew_client.connection_pool.connection_kwargs["port"] == (
            client.connection_pool.connection_kwargs["port"])
    finally:
        store.close()


@pytest.mark.parametrize("client", [object(), "redis://localhost", redis.asyncio.Redis()])
def test_anything_but_a_sync_redis_py_client_is_a_configuration_error(client: object) -> None:
    with pytest.raises(ConfigurationError, match="RedisStore needs"):
        RedisStore(client)


def test_a_cluster_url_pointing_at_a_plain_server_is_a_configuration_error(redis_url: str) -> None:
    host = redis_url.removeprefix("redis://").rsplit("/", 1)[0]
    with pytest.raises(ConfigurationError, match="not in cluster mode"):
        connect(f"redis+cluster://{host}")
