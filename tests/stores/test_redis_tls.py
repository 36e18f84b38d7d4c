"""TLS Redis as managed services run it: ``rediss://`` (one server),
``rediss+cluster://`` (three masters, TLS on the cluster bus too) and
``rediss+sentinel://`` (primary, replica and sentinel, TLS on every link),
each serving a throwaway self-signed certificate made with openssl.

Covered on each: leases held with the servers' CA; verification off
(``ssl_cert_reqs=none``) connects without one; a wrong CA and a host name the
certificate does not carry are refused by default, on every redis-py the
extra admits (5.x leaves host names unchecked unless told), with an error
that says what to change and holds no piece of the password."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from security.leaks import ENCODED, assert_no_secret
from servers.redis_server import RedisServer, make_self_signed_cert
from servers.redis_topologies import RedisClusterNodes, RedisSentinelSet

from lease_integrations import connect
from lease_integrations.core.errors import ConfigurationError, StoreUnavailable

FAST = "connect_timeout=2&socket_timeout=2"
TOPOLOGIES = ("single", "cluster", "sentinel")


class _Started:
    def __init__(self, url: str, stop: Callable[[], None]) -> None:
        self.url, self.stop = url, stop


def _start(kind: str, root: Path) -> _Started:
    if kind == "single":
        server = RedisServer(root, tls=True)
        server.start()
        return _Started(server.url, server.stop)
    topology = RedisClusterNodes(root, tls=True) if kind == "cluster" else RedisSentinelSet(
        root, tls=True)
    try:
        topology.start()
    except BaseException:
        topology.stop()
        raise
    return _Started(topology.url, topology.stop)


@pytest.fixture(scope="module", params=TOPOLOGIES)
def tls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Started]:
    """One TLS deployment per topology, its URL trusting its certificate."""
    started = _start(request.param, tmp_path_factory.mktemp(f"redis-tls-{request.param}"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that signed none of the servers' certificates."""
    return make_self_signed_cert(tmp_path_factory.mktemp("other-ca"))[0]


def without_trust(url: str) -> str:
    return url.partition("?")[0]


def with_password(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://leaseuser:{ENCODED}@{rest}"


def test_the_servers_ca_holds_leases(tls: _Started, key: str) -> None:
    with connect(tls.url) as store:
        rec = store.acquire(key, "alice", "alice", 30, {}).record
        assert rec is not None and rec.token > 0
        assert store.renew(key, "alice", rec.token, 30)
        assert [r.key for r in store.list(key)] == [key]  # a Cluster asks every primary
        assert store.release(key, "alice", rec.token)


def test_verification_off_connects_without_a_ca(tls: _Started, key: str) -> None:
    with connect(f"{without_trust(tls.url)}?ssl_cert_reqs=none&{FAST}") as store:
        rec = store.acquire(key, "alice", "alice", 30, {}).record
        assert rec is not None and store.release(key, "alice", rec.token)


@pytest.mark.parametrize("trust", ["a wrong CA", "no CA (the system's)"])
def test_a_certificate_that_does_not_verify_is_refused_saying_what_to_change(
        tls: _Started, other_ca: Path, trust: str) -> None:
    query = f"ssl_ca_certs={other_ca}&{FAST}" if trust == "a wrong CA" else FAST
    with pytest.raises(StoreUnavailable) as caught:
        connect(f"{with_password(without_trust(tls.url))}?{query}")
    text = str(caught.value)
    assert "certificate verify failed" in text
    assert "give the CA that signed it as ssl_ca_certs=" in text  # what to change
    assert_no_secret(text, "".join(traceback.format_exception(caught.value)))


def test_a_host_name_the_certificate_does_not_carry_is_refused_by_default(tls: _Started) -> None:
    # 127.1 reaches 127.0.0.1 but is checked as a name, which the certificate (for
    # IP 127.0.0.1) does not carry. Behind Sentinel the sentinel's own name is checked.
    hosts, _, trust = tls.url.partition("?")
    renamed = f"{hosts.replace('127.0.0.1', '127.1')}?{trust}&{FAST}"
    with pytest.raises(StoreUnavailable) as caught:
        connect(renamed)
    assert "does not name the host or address in the URL" in str(caught.value)


def test_host_names_unchecked_when_asked(tls: _Started, key: str) -> None:
    hosts, _, trust = tls.url.partition("?")
    renamed = f"{hosts.replace('127.0.0.1', '127.1')}?{trust}&ssl_check_hostname=false&{FAST}"
    with connect(renamed) as store:
        rec = store.acquire(key, "alice", "alice", 30, {}).record
        assert rec is not None and store.release(key, "alice", rec.token)


def test_plain_redis_to_a_tls_port_fails_instead_of_hanging(tls: _Started) -> None:
    plain = without_trust(tls.url).replace("rediss", "redis", 1)
    with pytest.raises(StoreUnavailable):
        connect(f"{plain}?connect_timeout=1&socket_timeout=1")


@pytest.mark.parametrize("scheme", ["rediss", "rediss+cluster", "rediss+sentinel"])
@pytest.mark.parametrize(("query", "says"), [
    ("ssl_ca_certs=/nonexistent/ca.pem", "ssl_ca_certs='/nonexistent/ca.pem' in"),
    ("ssl_certfile=/nonexistent/cert.pem", "is not a file this process can read"),
    ("ssl_cert_reqs=none&ssl_check_hostname=true", "needs the certificate checked"),
])
def test_bad_tls_options_are_refused_before_connecting(scheme: str, query: str, says: str) -> None:
    path = "/leases/0" if scheme.endswith("sentinel") else ""
    # Port 1 on loopback: connecting would fail differently (StoreUnavailable).
    with pytest.raises(ConfigurationError) as caught:
        connect(with_password(f"{scheme}://127.0.0.1:1{path}?{query}"))
    assert says in str(caught.value)
    assert_no_secret(str(caught.value))
