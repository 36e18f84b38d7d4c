"""Redis goes away while a LeaseLock holds a lease.

Each test runs its own redis-server (`redis_server_factory`), never the
shared one. The outages are real:

- SIGSTOP/SIGCONT freezes the server: connections stay open, requests time
  out (the store's ``socket_timeout=0.3``), the server's clock keeps running.
- SIGKILL and a restart on the same port: with ``appendonly yes`` and
  ``appendfsync always`` the lease survives the restart; without persistence
  the server comes back empty, and the holder must learn at once that its
  lease is gone (Redis without persistence also forgets the fencing counter:
  run Redis with AOF for leases that guard anything that matters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from outage_support import Holder, renew_failures, until
from servers.redis_server import RedisServer

from lease_integrations import LeaseLost, connect
from lease_integrations.core.store import LeaseStore

FAST = "socket_timeout=0.3&connect_timeout=0.3"


@pytest.fixture
def stores(redis_server_factory: Callable[..., RedisServer], request: pytest.FixtureRequest,
           ) -> Iterator[tuple[RedisServer, LeaseStore, LeaseStore]]:
    persistent = getattr(request, "param", False)
    server = redis_server_factory(persistent=persistent)
    holder_store = connect(f"{server.url}?{FAST}")
    rival_store = connect(f"{server.url}?{FAST}")
    yield server, holder_store, rival_store
    if server.paused:
        server.resume()
    holder_store.close()
    rival_store.close()


def test_a_pause_inside_the_trust_window_keeps_the_lease(
    stores: tuple[RedisServer, LeaseStore, LeaseStore], key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, store, rival = stores
    holder = Holder(store, key, ttl=8.0, margin=0.8)  # trusted for 7.2 s after a renewal
    holder.wait_for_renewal()
    server.pause()
    try:
        until(lambda: renew_failures(caplog, key) >= 2, 6.0, "the heartbeat to retry")
        assert not holder.lease.lost, "lost inside the trust window"
        trusted_at_pause_end = holder.lease.trusted_until
    finally:
        server.resume()
    until(lambda: holder.lease.trusted_until > trusted_at_pause_end, 15.0, "renewal after SIGCONT")
    assert not holder.lease.lost and not holder.lost_event.is_set()
    holder.lease.check()
    record = rival.get(key)
    assert record is not None and record.state == "held"
    assert (record.holder, record.token) == (holder.lease.holder, holder.lease.token)
    assert not rival.acquire(key, "rival", "rival", 30, {}).granted
    assert holder.lock.release(holder.lease)


def test_a_pause_past_the_trust_window_loses_the_lease_before_the_store_expires_it(
    stores: tuple[RedisServer, LeaseStore, LeaseStore], key: str,
) -> None:
    server, store, rival = stores
    holder = Holder(store, key, ttl=4.0, margin=1.5)  # trust ends 1.5 s before the store's expiry
    for _attempt in range(20):
        trusted = holder.wait_for_renewal()
        record = rival.get(key)  # the expiry the server set for the last renewal
        server.pause()
        if holder.lease.trusted_until == trusted:
            break  # no renewal completed between the read and the pause
        server.resume()
    else:
        pytest.fail("could not pause the server between two renewals")
    try:
        assert record is not None and record.expires_at is not None
        assert holder.lost_event.wait(timeout=30), "the holder was never told it lost the lease"
        assert holder.lease.lost and holder.lease.trusted_for() == 0.0
        with pytest.raises(LeaseLost):
            holder.lease.check()
        assert holder.lost_at is not None
        # Same host, same clock as redis-server: the holder gave up before the
        # server could hand the lease to anyone (the server is frozen anyway).
        assert holder.lost_at < record.expires_at, (holder.lost_at, record.expires_at)
    finally:
        server.resume()
    # Back up: the lease expires on the server (a renewal queued before the
    # pause may still extend it once), then a rival gets the next token.
    until(lambda: rival.acquire(key, "rival", "rival", 30, {}).granted, 30.0, "the rival's grant")
    taken = rival.get(key)
    assert taken is not None and taken.holder == "rival" and taken.token > holder.lease.token
    assert not store.renew(key, holder.lease.secret, holder.lease.token, 4.0)
    holder.lock.release(holder.lease)


@pytest.mark.parametrize("stores", [True], indirect=True, ids=["appendonly"])
def test_a_restart_with_persistence_inside_the_window_keeps_the_lease(
    stores: tuple[RedisServer, LeaseStore, LeaseStore], key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, store, rival = stores
    holder = Holder(store, key, ttl=8.0, margin=0.8)
    holder.wait_for_renewal()
    server.kill()
    until(lambda: renew_failures(caplog, key) >= 1, 6.0, "a failed renewal while down")
    assert not holder.lease.lost
    trusted_before_restart = holder.lease.trusted_until
    server.start()  # same port, same data directory: the AOF brings the lease back
    until(lambda: holder.lease.trusted_until > trusted_before_restart, 15.0, "renewal after restart")
    assert not holder.lease.lost
    record = rival.get(key)
    assert record is not None and record.state == "held"
    assert (record.holder, record.token) == (holder.lease.holder, holder.lease.token)
    assert holder.lock.release(holder.lease)
    assert rival.acquire(key, "rival", "rival", 30, {}).record.token > holder.lease.token  # type: ignore[union-attr]


def test_a_restart_without_persistence_tells_the_holder_at_once(
    stores: tuple[RedisServer, LeaseStore, LeaseStore], key: str,
) -> None:
    server, store, _rival = stores
    holder = Holder(store, key, ttl=8.0, margin=0.8)
    holder.wait_for_renewal()
    server.restart()  # the lease (and the counter) are gone with the data
    assert holder.lost_event.wait(timeout=15), "the holder was not told"
    assert holder.lease.lost_reason is not None and "refused" in holder.lease.lost_reason
    assert not holder.lease.trusted_for()
