"""Adopt: a second process continues a lease the first one acquired (the
DAG-run lease: the acquire task takes it, the triggerer and the work tasks
continue it). Run across real processes on SQLite and Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, LeaseLost, connect
from tests.conftest import store_url_for

CHILD = textwrap.dedent("""
    import sys, time
    from lease_integrations import LEASE_LOST_EXIT_STATUS, LeaseLock, LeaseLost, connect
    url, key, token, secret = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    lock = LeaseLock(connect(url), key, ttl=1.5)
    with lock.hold_adopted(token, secret) as lease:
        print("adopted", lease.token, flush=True)
        time.sleep(60)  # ended with the process by fail-stop
    print("not stopped", flush=True)
""")


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    return store_url_for(request, request.param, tmp_path)


def test_a_second_process_adopts_renews_and_is_stopped_on_loss(url: str, key: str) -> None:
    store = connect(url)
    lease = LeaseLock(store, key, ttl=30).acquire()  # outlives the child's start
    LeaseLock(store, key).forget(lease)  # hand over: stop renewing here, keep it in the store
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, key, str(lease.token), lease.secret],
        stdout=subprocess.PIPE, text=True, env=os.environ,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split() == ["adopted", str(lease.token)]
        first = store.get(key)
        assert first is not None and first.held and first.token == lease.token
        assert (first.expires_in or 0) < 5  # renewed by the adopter with its own ttl
        # Renewed by the adopter past the original ttl (bounded poll).
        deadline = time.monotonic() + 10
        while True:
            record = store.get(key)
            assert record is not None and record.held, "the adopted lease expired"
            if record.renewed_at != first.renewed_at:
                break
            assert time.monotonic() < deadline, "the adopter never renewed"
            time.sleep(0.05)
        store.force_release(key, by="test")
        assert child.wait(timeout=20) == LEASE_LOST_EXIT_STATUS
        assert child.stdout.read().strip() == ""
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        store.close()


def test_adopting_a_refused_lease_raises_lease_lost(url: str, key: str) -> None:
    store = connect(url)
    try:
        lock = LeaseLock(store, key, ttl=5)
        lease = lock.acquire()
        lock.release(lease)
        with pytest.raises(LeaseLost):
            lock.adopt(lease.token, lease.secret)
        with pytest.raises(LeaseLost), lock.hold_adopted(lease.token, lease.secret):
            pytest.fail("entered a block for a lease the store refused")
        other = lock.acquire()
        with pytest.raises(LeaseLost):
            lock.adopt(lease.token, lease.secret)  # an older token, someone else's now
        lock.release(other)
    finally:
        store.close()


def test_hold_adopted_leaves_the_lease_in_the_store_unless_asked(key: str) -> None:
    store = connect(f"memory://{key}")
    lock = LeaseLock(store, key, ttl=5)
    lease = lock.acquire()
    lock.forget(lease)
    with lock.hold_adopted(lease.token, lease.secret) as adopted:
        assert adopted.token == lease.token
    record = store.get(key)
    assert record is not None and record.held
    with lock.hold_adopted(lease.token, lease.secret, release=True):
        pass
    record = store.get(key)
    assert record is not None and record.state == "released"
