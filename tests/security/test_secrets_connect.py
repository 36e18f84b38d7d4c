"""No password in any error, log line or repr, whatever the URL's shape:
connect() to an unreachable host for every scheme, LEASE_STORE_URL, and real
servers that check the password (a Redis ACL user, a PostgreSQL role)."""

from __future__ import annotations

import logging
import pickle
import traceback

import pytest
from servers.redis_server import free_port

from lease_integrations import (
    ConfigurationError,
    LeaseBusy,
    LeaseError,
    LeaseLock,
    StoreUnavailable,
    connect,
)

from .leaks import ENCODED, PASSWORD, assert_no_secret, url_shapes
from .secret_servers import postgres_role_url, redis_acl_url

__all__ = ["postgres_role_url", "redis_acl_url"]  # fixtures used by name

#: scheme -> (path, extra query) for a fast failure against a closed port.
SCHEMES = {
    "redis": ("/0", ""),
    "rediss": ("/0", ""),
    "postgresql": ("/leases", ""),
    "postgres": ("/leases", ""),
    "mongodb": ("/leases", "serverSelectionTimeoutMS=300&connectTimeoutMS=300"),
    "redis+cluster": ("", "connect_timeout=1"),
    "rediss+cluster": ("", "connect_timeout=1"),
    "redis+sentinel": ("/leases/0", "connect_timeout=1"),
    "rediss+sentinel": ("/leases/0", "connect_timeout=1"),
}
#: Schemes whose URL lists several hosts: the test gives them two closed ports.
MULTI_HOST = {"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}


def everything_said(exc: BaseException) -> str:
    """The message, repr, attributes and the full traceback with its chain."""
    said = [str(exc), repr(exc), repr(getattr(exc, "url", None)), repr(exc.args),
            "".join(traceback.format_exception(exc))]
    return "\n".join(said)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_connect_errors_never_show_the_password(scheme: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    path, query = SCHEMES[scheme]
    host = f"127.0.0.1:{free_port()}"  # nothing listens there
    if scheme in MULTI_HOST:
        host += f",127.0.0.1:{free_port()}"
    for shape, url in url_shapes(scheme, host, path, query).items():
        with pytest.raises(LeaseError) as caught:
            connect(url)
        assert_no_secret(everything_said(caught.value),
                         repr(pickle.loads(pickle.dumps(caught.value))))
        if shape == "raw-userinfo":
            assert isinstance(caught.value, ConfigurationError), shape
            assert "percent-encode" in str(caught.value)
        if shape == "encoded-userinfo":
            # A well-formed URL: the store really tried the network.
            assert isinstance(caught.value, StoreUnavailable), (shape, caught.value)
            assert host in str(caught.value)
    assert_no_secret(caplog.text)


@pytest.mark.parametrize("scheme", ["redis", "postgresql", "mongodb"])
def test_lease_store_url_from_the_environment_is_masked(
        scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path, query = SCHEMES[scheme]
    for url in url_shapes(scheme, f"127.0.0.1:{free_port()}", path, query).values():
        monkeypatch.setenv("LEASE_STORE_URL", url)
        with pytest.raises(LeaseError) as caught:
            connect()
        assert_no_secret(everything_said(caught.value))


@pytest.fixture(params=["redis", "postgres"])
def authenticated_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(
        "redis_acl_url" if request.param == "redis" else "postgres_role_url")
    return url


def test_servers_that_check_the_password_never_see_it_echoed(
        authenticated_url: str, key: str, caplog: pytest.LogCaptureFixture) -> None:
    """The right password (percent-encoded) works and shows nowhere; the same
    password pasted raw is refused with the fix; a wrong one is refused by
    the server, and neither error echoes it."""
    caplog.set_level(logging.DEBUG)
    said: list[str] = []
    with connect(authenticated_url) as store:
        said += [store.url, repr(store)]
        lock = LeaseLock(store, key, ttl=5)
        said.append(repr(lock))
        with lock.hold() as lease:
            said += [repr(lease), repr(store.get(key)), repr(store.list())]
            with pytest.raises(LeaseBusy) as busy:
                LeaseLock(store, key, ttl=5).acquire(wait=0)
            said.append(everything_said(busy.value))
        said.append(repr(store.history(key)))
        assert "***" in store.url
    with pytest.raises(ConfigurationError, match="percent-encode") as raw:
        connect(authenticated_url.replace(ENCODED, PASSWORD))
    said.append(everything_said(raw.value))
    wrong = ENCODED[::-1].replace("%", "x")
    with pytest.raises(LeaseError) as refused:
        connect(authenticated_url.replace(ENCODED, wrong))
    said.append(everything_said(refused.value))
    assert wrong not in said[-1]
    assert_no_secret(*said, caplog.text)


@pytest.mark.parametrize(("password", "says"), [
    ("Kq9vW%zzJpRm", "percent-escape"),   # not a %XX escape
    ("Kq9vW JpRm", "space"),              # a raw space
    ("Kq9vW%2", "percent-escape"),        # an escape cut short
])
def test_a_password_libpq_cannot_read_is_a_configuration_error_without_it(
        password: str, says: str, caplog: pytest.LogCaptureFixture) -> None:
    """issue 24 item 4: psycopg's conninfo parser quotes the whole password
    in its ProgrammingError; the store names the problem instead."""
    caplog.set_level(logging.DEBUG)
    url = f"postgresql://leaseuser:{password}@127.0.0.1:{free_port()}/leases"
    with pytest.raises(ConfigurationError, match=says) as caught:
        connect(url)
    said = everything_said(caught.value) + repr(pickle.loads(pickle.dumps(caught.value)))
    for piece in {password[i:i + 4] for i in range(len(password) - 3)}:
        assert piece not in said, (piece, said)
        assert piece not in caplog.text
