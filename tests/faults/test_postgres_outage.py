"""PostgreSQL goes away while a LeaseLock holds a lease.

The tests share one cluster of their own (``private_postgres``), never the
session's. The outages are real:

- SIGSTOP/SIGCONT of the postmaster and every backend: connections stay
  open and nothing answers, not even ``statement_timeout``; the store's
  client-side watchdog (statement_timeout + 1 s) ends each hung call.
- A fast shutdown and a restart on the same port: the row (and the token
  counter) is durable, the store reconnects by itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from outage_support import Holder, assert_still_held, renew_failures, until
from servers.postgres_server import PgServer

from lease_integrations import LeaseLost, connect
from lease_integrations.core.store import LeaseStore

FAST = "statement_timeout=0.5&connect_timeout=2"


@pytest.fixture
def stores(private_postgres: PgServer) -> Iterator[tuple[PgServer, LeaseStore, LeaseStore]]:
    holder_store = connect(f"{private_postgres.url}?{FAST}")
    rival_store = connect(f"{private_postgres.url}?{FAST}")
    yield private_postgres, holder_store, rival_store
    private_postgres.resume()
    if private_postgres.proc is None:
        private_postgres.start()
    holder_store.close()
    rival_store.close()


def test_a_pause_inside_the_trust_window_keeps_the_lease(
    stores: tuple[PgServer, LeaseStore, LeaseStore], key: str, caplog: pytest.LogCaptureFixture,
) -> None:
    server, store, rival = stores
    holder = Holder(store, key, ttl=10.0, margin=1.0)  # trusted for 9 s after a renewal
    holder.wait_for_renewal()
    server.pause()
    try:
        until(lambda: renew_failures(caplog, key) >= 2, 8.0, "the heartbeat to retry")
        assert not holder.lease.lost, "lost inside the trust window"
        trusted_at_pause_end = holder.lease.trusted_until
    finally:
        server.resume()
    until(lambda: holder.lease.trusted_until > trusted_at_pause_end, 15.0, "renewal after SIGCONT")
    assert_still_held(holder, rival, key)
    assert holder.lock.release(holder.lease)


def test_a_restart_inside_the_trust_window_keeps_the_lease(
    stores: tuple[PgServer, LeaseStore, LeaseStore], key: str, caplog: pytest.LogCaptureFixture,
) -> None:
    server, store, rival = stores
    holder = Holder(store, key, ttl=10.0, margin=1.0)
    holder.wait_for_renewal()
    server.stop("fast")
    until(lambda: renew_failures(caplog, key) >= 1, 8.0, "a failed renewal while down")
    assert not holder.lease.lost
    trusted_before_restart = holder.lease.trusted_until
    server.start()  # same port, same data directory
    until(lambda: holder.lease.trusted_until > trusted_before_restart, 15.0,
          "renewal after restart")
    assert_still_held(holder, rival, key)
    assert holder.lock.release(holder.lease)
    taken = rival.acquire(key, "rival", "rival", 30, {}).record
    assert taken is not None and taken.token > holder.lease.token


def test_a_pause_past_the_trust_window_loses_the_lease_before_the_store_expires_it(
    stores: tuple[PgServer, LeaseStore, LeaseStore], key: str,
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
        # Same host, same clock as the server's clock_timestamp(): the holder
        # gave up before the server could hand the lease to anyone.
        assert holder.lost_at < record.expires_at, (holder.lost_at, record.expires_at)
    finally:
        server.resume()
    # Back up: the lease expires by the server's clock (a renewal sent before
    # the pause may still extend it once), then a rival gets the next token.
    until(lambda: rival.acquire(key, "rival", "rival", 30, {}).granted, 30.0, "the rival's grant")
    taken = rival.get(key)
    assert taken is not None and taken.holder == "rival" and taken.token > holder.lease.token
    assert not store.renew(key, holder.lease.secret, holder.lease.token, 4.0)
    holder.lock.release(holder.lease)


def test_a_server_down_past_the_trust_window_loses_the_lease(
    stores: tuple[PgServer, LeaseStore, LeaseStore], key: str,
) -> None:
    server, store, rival = stores
    holder = Holder(store, key, ttl=4.0, margin=1.5)
    holder.wait_for_renewal()
    server.stop("immediate")  # a crash: connections refused while it is down
    try:
        assert holder.lost_event.wait(timeout=30), "the holder was never told it lost the lease"
        assert "trust window" in (holder.lease.lost_reason or "")
    finally:
        server.start()
    until(lambda: rival.acquire(key, "rival", "rival", 30, {}).granted, 30.0, "the rival's grant")
    taken = rival.get(key)
    assert taken is not None and taken.token > holder.lease.token
    holder.lock.release(holder.lease)
