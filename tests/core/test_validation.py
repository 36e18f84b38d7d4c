"""Bad input is refused before any work, with an error naming the bad value,
and never touches a lease record."""

from __future__ import annotations

import pytest

from lease_integrations import ConfigurationError, LeaseLock, connect


@pytest.mark.parametrize(
    ("bad_key", "named"),
    [("", "empty"), ("has space", "has space"), ("x" * 201, "201"), ("-lead", "-lead"),
     ("naïve", "naïve"), (None, "None"), (42, "42"), ("a\nb", "a\\nb")],
)
def test_bad_keys_are_named(bad_key: object, named: str, key: str) -> None:
    store = connect(f"memory://{key}")
    with pytest.raises(ConfigurationError) as err:
        LeaseLock(store, bad_key, ttl=5)  # type: ignore[arg-type]
    assert named in str(err.value)
    assert store.list() == []


@pytest.mark.parametrize("ttl", [0, -1, 0.1, float("nan"), float("inf"), "30", True, 10**9])
def test_bad_ttls_are_named(ttl: object, key: str) -> None:
    with pytest.raises(ConfigurationError, match="ttl"):
        LeaseLock(connect(f"memory://{key}"), key, ttl=ttl)  # type: ignore[arg-type]


@pytest.mark.parametrize("heartbeat", [0, -1, 5.0, 6.0, "1"])
def test_heartbeat_must_be_shorter_than_half_the_ttl(heartbeat: object, key: str) -> None:
    with pytest.raises(ConfigurationError, match="heartbeat"):
        LeaseLock(connect(f"memory://{key}"), key, ttl=10, heartbeat=heartbeat)  # type: ignore[arg-type]


def test_bad_policy_and_wait_are_named(key: str) -> None:
    store = connect(f"memory://{key}")
    with pytest.raises(ConfigurationError, match="'explode'"):
        LeaseLock(store, key, ttl=5, on_lost="explode")
    lock = LeaseLock(store, key, ttl=5)
    with pytest.raises(ConfigurationError, match="wait"):
        lock.acquire(wait=-1)
    with pytest.raises(ConfigurationError, match="wait"):
        lock.acquire(wait="soon")  # type: ignore[arg-type]
    assert store.get(key) is None


def test_store_must_be_a_store(key: str) -> None:
    with pytest.raises(ConfigurationError, match="LeaseStore"):
        LeaseLock("sqlite:///tmp/x.db", key)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "named"),
    [("ftp://host/x", "'ftp'"), ("no-scheme", "no scheme"), ("sqlite://", "names no file"),
     ("sqlite:///nonexistent-dir-xyz/sub/l.db", "does not exist"),
     ("sqlite:///tmp/l.db?timeout=abc", "timeout"), ("sqlite:///tmp/l.db?bogus=1", "bogus"),
     ("redis://user:s3cret@127.0.0.1:99999/0", "***")],
)
def test_bad_urls_are_named_with_the_password_masked(url: str, named: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        connect(url)
    assert named in str(err.value)
    assert "s3cret" not in str(err.value)
