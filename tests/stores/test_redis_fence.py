"""The Redis fencing guard on the user's own redis client: a late write from
a former holder is refused, in the same script as the write."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from lease_integrations import connect
from lease_integrations.core.errors import ConfigurationError, StaleToken
from lease_integrations.core.fencing import RedisFence


@pytest.fixture(params=[True, False], ids=["decoded", "bytes"])
def client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, decode_responses=request.param)
    yield c
    c.close()


@pytest.fixture
def resource() -> str:
    return f"ledger-{uuid.uuid4().hex[:10]}"


def test_check_accepts_equal_and_newer_tokens_and_refuses_older(
    client: redis.Redis, resource: str
) -> None:
    fence = RedisFence()
    fence.check(client, resource, 3)
    fence.check(client, resource, 3)  # the same holder writes again
    fence.check(client, resource, 5)
    with pytest.raises(StaleToken) as caught:
        fence.check(client, resource, 4)
    assert caught.value.token == 4 and caught.value.newest == 5
    assert resource in str(caught.value)
    assert fence.newest(client, resource) == 5


def test_fenced_set_writes_only_with_a_current_token(client: redis.Redis, resource: str) -> None:
    fence = RedisFence(prefix="fences")
    target = f"{resource}:balance"
    fence.fenced_set(client, resource, 7, target, "100")
    assert client.get(target) in ("100", b"100")
    with pytest.raises(StaleToken):
        fence.fenced_set(client, resource, 6, target, "stale")
    assert client.get(target) in ("100", b"100"), "a refused write must not land"
    fence.fenced_set(client, resource, 8, target, "200", px=60_000)
    assert client.get(target) in ("200", b"200") and 0 < client.pttl(target) <= 60_000
    assert client.get(f"fences:{resource}") in ("8", b"8")


def test_a_former_holder_is_refused_after_a_takeover(redis_url: str, client: redis.Redis,
                                                      resource: str) -> None:
    fence = RedisFence()
    with connect(redis_url) as store:
        key = f"job-{resource}"
        old = store.acquire(key, "paused-worker", "paused-worker", 0.6, {}).record
        assert old is not None
        fence.fenced_set(client, resource, old.token, f"{resource}:out", "old")
        deadline = time.monotonic() + 10
        while not (new := store.acquire(key, "new-worker", "new-worker", 30, {})).granted:
            assert time.monotonic() < deadline, "the short lease never expired"
            time.sleep(0.02)
        assert new.record is not None
        fence.fenced_set(client, resource, new.record.token, f"{resource}:out", "new")
        with pytest.raises(StaleToken):  # the paused worker wakes up and writes late
            fence.fenced_set(client, resource, old.token, f"{resource}:out", "late")
    assert client.get(f"{resource}:out") in ("new", b"new")


@pytest.mark.parametrize("token", [0, -1, True, "3", 1.5])
def test_bad_tokens_are_configuration_errors(client: redis.Redis, token: object) -> None:
    with pytest.raises(ConfigurationError, match="token"):
        RedisFence().check(client, "r", token)  # type: ignore[arg-type]


def test_the_fence_module_does_not_import_redis() -> None:
    code = ("import sys, lease_integrations, lease_integrations.core.fencing as f; "
            "assert f.RedisFence; assert 'redis' not in sys.modules, 'redis imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
