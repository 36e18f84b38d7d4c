"""A least-privilege Redis user: the ACL rule documented in
docs/operating/redis.md is exactly what the store needs (every operation
works with it), and connect names any right that is missing."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from servers.redis_topologies import RedisClusterNodes

from lease_integrations import LeaseLock, LeaseLost, connect
from lease_integrations.cli import main as leasectl
from lease_integrations.core.errors import ConfigurationError
from lease_integrations.stores import redis_checks, redis_scripts

DOC = Path(__file__).resolve().parents[2] / "docs" / "operating" / "redis.md"


def documented_rule() -> str:
    found = re.search(r"^ACL SETUSER lease_store on >\S+ (.+)$", DOC.read_text(), re.MULTILINE)
    assert found, f"no ACL SETUSER line in {DOC}"
    return found.group(1).strip()


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def make_user(admin: redis.Redis, redis_url: str) -> Iterator[object]:
    made: list[str] = []

    def make(rule: str) -> str:
        name, secret = f"acl{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{secret}", *rule.split())
        made.append(name)
        host = redis_url.removeprefix("redis://").rsplit("/", 1)[0]
        return f"redis://{name}:{secret}@{host}/0"

    yield make
    for name in made:
        admin.acl_deluser(name)


def until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_documented_rule_is_the_one_the_scripts_need() -> None:
    assert documented_rule() == redis_checks.acl_rule("lease", redis_scripts.ALL)


def test_every_operation_works_with_exactly_the_documented_rights(
    make_user: object, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = make_user(documented_rule())  # type: ignore[operator]
    with connect(url) as store, connect(url) as other:
        lock = LeaseLock(store, key, ttl=2.0, on_lost="check")  # renewed every ~0.67 s
        lease = lock.acquire(wait=0)
        first = lease.trusted_until
        until(lambda: lease.trusted_until > first, "a renewal")
        assert store.get(key).token == lease.token  # type: ignore[union-attr]
        assert [r.key for r in store.list(key)] == [key]
        assert leasectl(["--url", url, "--json", "list", key]) == 0
        assert key in capsys.readouterr().out
        woken: list[bool] = []
        # A waiter is first told busy, as LeaseLock's are: that raises the
        # waiting flag, so the release leaves a wake-up even if it comes
        # before the waiter blocks.
        assert not other.acquire(key, "other", "s-other", 30, {}).granted
        waiter = threading.Thread(target=lambda: woken.append(other.wait_for_release(key, 30)))
        waiter.start()
        lock.release(lease)
        waiter.join(timeout=30)
        assert woken == [True], "the release notification did not reach the waiter"
        second = lock.acquire(wait=0)
        assert second.token > lease.token
        assert store.force_release(key, by="operator") is not None
        kinds = [e.kind for e in store.history(key)]
        assert kinds[-4:] == ["acquired", "released", "acquired", "broken"]
        store.record_event(key, "lost", lease.holder, second.token, {"why": "test"})
        with contextlib.suppress(LeaseLost):  # the break above took it
            lock.release(second)


@pytest.mark.parametrize(("take", "named"), [
    ("+time", "+time"),
    ("+script|load", "'script|load'"),
    ("+scan", "+scan"),
    ("+xadd", "+xadd"),
    ("~{lease:*", "key"),
])
def test_a_missing_right_is_a_configuration_error_naming_it(
    make_user: object, take: str, named: str
) -> None:
    rule = " ".join(word for word in documented_rule().split() if word != take)
    url = make_user(rule)  # type: ignore[operator]
    with pytest.raises(ConfigurationError) as caught:
        connect(url)
    message = str(caught.value)
    assert named in message, message
    assert "ACL SETUSER" in message and "***" in message


@pytest.fixture
def cluster_user(redis_cluster: RedisClusterNodes) -> Iterator[object]:
    """A user made on every node of the session's cluster (Redis does not
    propagate ACL SETUSER)."""
    made: list[str] = []

    def make(extra: str) -> str:
        name, secret = f"acl{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        rule = f"{documented_rule()} {extra}".split()
        for node in redis_cluster.nodes:
            with redis.Redis(port=node.port) as admin:
                admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{secret}", *rule)
        made.append(name)
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in redis_cluster.nodes)
        return f"redis+cluster://{name}:{secret}@{hosts}"

    yield make
    for node in redis_cluster.nodes:
        with redis.Redis(port=node.port) as admin:
            for name in made:
                admin.acl_deluser(name)


def test_a_cluster_needs_the_documented_rule_plus_cluster_slots_and_command(
    cluster_user: object, key: str
) -> None:
    addition = re.search(r"^ACL SETUSER lease_store on >\S+ <the rule above> (.+)$",
                         DOC.read_text(), re.MULTILINE)
    assert addition, "the docs give the Cluster addition"
    assert addition.group(1).split() == [f"+{c}" for c in redis_checks.CLUSTER_COMMANDS]
    url = cluster_user(addition.group(1))  # type: ignore[operator]
    with connect(url) as store:
        with LeaseLock(store, key, ttl=30).hold() as lease:
            assert [r.token for r in store.list(key)] == [lease.token]
        assert [e.kind for e in store.history(key)] == ["acquired", "released"]
    with pytest.raises(ConfigurationError, match=r"\+command"):
        connect(cluster_user("+cluster|slots"))  # type: ignore[operator]
