"""Redis store: connection settings from the URL, and clear errors for bad
ones (masked passwords, bounded waits), against a real redis-server."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest
import redis
from servers.redis_server import free_port

from lease_integrations import connect
from lease_integrations.core.errors import ConfigurationError, StoreUnavailable
from lease_integrations.stores.redis import RedisStore


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _base(redis_url: str) -> str:
    return redis_url.rsplit("/", 1)[0]  # redis://127.0.0.1:PORT


def test_prefix_isolates_two_teams_on_one_redis(redis_url: str, key: str) -> None:
    with connect(f"{redis_url}?prefix=team-a") as a, connect(f"{redis_url}?prefix=team-b") as b:
        assert a.acquire(key, "alice", "alice", 30, {}).granted
        assert b.acquire(key, "bob", "bob", 30, {}).granted, "team-b must not see team-a's lease"
        rec_a, rec_b = a.get(key), b.get(key)
        assert rec_a is not None and rec_a.holder == "alice" and rec_a.state == "held"
        assert rec_b is not None and rec_b.holder == "bob" and rec_b.state == "held"
        assert [r.key for r in a.list(key)] == [key]
        assert [r.holder for r in b.list(key)] == ["bob"]


def test_db_number_selects_the_database(redis_url: str, key: str, raw: redis.Redis) -> None:
    with connect(f"{_base(redis_url)}/3") as store:
        assert store.acquire(key, "alice", "alice", 30, {}).granted
    in_db3 = redis.Redis.from_url(f"{_base(redis_url)}/3", decode_responses=True)
    try:
        assert in_db3.exists(f"{{lease:{key}}}:rec") == 1
    finally:
        in_db3.close()
    assert raw.exists(f"{{lease:{key}}}:rec") == 0, "db 0 must not hold db 3's lease"


def test_acl_user_and_password_work_and_a_wrong_password_is_masked(
    redis_url: str, key: str, raw: redis.Redis
) -> None:
    user, secret = f"u{uuid.uuid4().hex[:8]}", f"s3cret-{uuid.uuid4().hex[:8]}"
    raw.acl_setuser(user, enabled=True, passwords=[f"+{secret}"], keys=["*"], channels=["*"],
                    commands=["+@all"])
    try:
        host = _base(redis_url).removeprefix("redis://")
        with connect(f"redis://{user}:{secret}@{host}/0") as store:
            assert store.acquire(key, "alice", "alice", 30, {}).granted
            assert store.url == f"redis://{user}:***@{host}/0"
        with pytest.raises(ConfigurationError) as caught:
            connect(f"redis://{user}:wrong-{secret}@{host}/0")
        message = str(caught.value)
        assert f"redis://{user}:***@{host}/0" in message
        assert secret not in message
    finally:
        raw.acl_deluser(user)


def test_unreachable_port_is_store_unavailable_with_the_masked_url() -> None:
    port = free_port()  # nobody listens here
    url = f"redis://someone:topsecret@127.0.0.1:{port}/0?connect_timeout=1"
    with pytest.raises(StoreUnavailable) as caught:
        connect(url)
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert "topsecret" not in str(caught.value) and "***" in str(caught.value)


def test_a_server_that_never_answers_times_out_instead_of_hanging() -> None:
    # The kernel completes the TCP handshake for a listening socket that never
    # accepts: the client connects, sends PING and must give up at socket_timeout.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with pytest.raises(StoreUnavailable) as caught:
            connect(f"redis://127.0.0.1:{port}/0?socket_timeout=0.5&connect_timeout=0.5")
    assert f"127.0.0.1:{port}" in str(caught.value)


@pytest.mark.parametrize(
    ("suffix", "names"),
    [
        ("/0?colour=blue", "colour"),
        ("/0?socket_timeout=soon", "socket_timeout"),
        ("/0?socket_timeout=0", "socket_timeout"),
        ("/0?prefix=a:b", "a:b"),
        ("/0?prefix=%7Bx%7D", "{x}"),
        ("/zero", "zero"),
        ("/0?ssl_ca_certs=/tmp/ca.pem", "ssl_ca_certs"),
    ],
)
def test_bad_url_options_are_configuration_errors_naming_the_value(
    redis_url: str, suffix: str, names: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        connect(_base(redis_url) + suffix)
    assert names in str(caught.value)


def test_a_database_number_the_server_does_not_have_is_a_configuration_error(
    redis_url: str,
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        connect(f"{_base(redis_url)}/999")
    assert "/999" in str(caught.value)


def test_keyword_options_override_the_url_and_unknown_ones_are_refused(redis_url: str) -> None:
    with connect(redis_url, prefix="kw", socket_timeout=2.0) as store:
        assert isinstance(store, RedisStore) and store.prefix == "kw"
    with pytest.raises(ConfigurationError, match="retries"):
        connect(redis_url, retries=3)


def test_rediss_url_asks_for_tls(redis_url: str) -> None:
    # A TLS handshake against the plain-text test server must fail, not hang or
    # silently fall back to plain text.
    tls = _base(redis_url).replace("redis://", "rediss://") + "/0?socket_timeout=1&connect_timeout=1"
    with pytest.raises(StoreUnavailable):
        connect(tls + "&ssl_cert_reqs=none")


@pytest.mark.parametrize("options", [{"socket_timeout": -1}, {"connect_timeout": "soon"},
                                     {"prefix": "a b"}])
def test_keyword_options_get_the_same_checks_as_url_options(
    redis_url: str, options: dict[str, object]
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        connect(redis_url, **options)
    assert str(next(iter(options.values()))) in str(caught.value)


def test_tls_options_are_checked(redis_url: str) -> None:
    tls = _base(redis_url).replace("redis://", "rediss://") + "/0"
    with pytest.raises(ConfigurationError, match="ssl_cert_reqs='sometimes'"):
        connect(tls, ssl_cert_reqs="sometimes")


def test_a_client_without_decoded_responses_is_refused(redis_url: str) -> None:
    with pytest.raises(ConfigurationError, match="decode_responses"):
        RedisStore(redis.Redis.from_url(redis_url), url=redis_url)


def test_a_user_without_script_rights_gets_a_clear_error(
    redis_url: str, raw: redis.Redis
) -> None:
    user, secret = f"ro{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    raw.acl_setuser(user, enabled=True, passwords=[f"+{secret}"], keys=["*"],
                    commands=["+@read", "+ping"])
    try:
        host = _base(redis_url).removeprefix("redis://")
        with pytest.raises(ConfigurationError) as caught:
            connect(f"redis://{user}:{secret}@{host}/0")
        assert "'script|load'" in str(caught.value) and "***" in str(caught.value)
        assert secret not in str(caught.value)
    finally:
        raw.acl_deluser(user)
