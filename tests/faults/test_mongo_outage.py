"""MongoDB (mongoeco's MongoDB-wire server, not mongod) goes away while a
LeaseLock holds a lease.

The tests share one server of their own (``private_mongo``), never the
session's. The outages are real:

- SIGSTOP/SIGCONT of the server process: connections stay open and nothing
  answers; pymongo's socketTimeoutMS (0.5 s here) ends each hung call.
- SIGTERM and a restart on the same port: the data (an SQLite file) is
  durable, pymongo rediscovers the server by itself. The wire server takes
  several seconds to start on a loaded machine, so these tests use a longer
  ttl than the PostgreSQL ones.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from outage_support import Holder, assert_still_held, renew_failures, until
from servers.mongo_server import MongoWireServer

from lease_integrations import LeaseLost, StoreUnavailable, connect
from lease_integrations.core.store import LeaseStore

FAST = "socketTimeoutMS=500&serverSelectionTimeoutMS=500&connectTimeoutMS=500"


@pytest.fixture
def stores(private_mongo: MongoWireServer,
           ) -> Iterator[tuple[MongoWireServer, LeaseStore, LeaseStore]]:
    holder_store = connect(f"{private_mongo.url}&{FAST}")
    rival_store = connect(f"{private_mongo.url}&{FAST}")
    yield private_mongo, holder_store, rival_store
    private_mongo.resume()
    if private_mongo.proc is None:
        private_mongo.start()
    holder_store.close()
    rival_store.close()


def rival_acquire(rival: LeaseStore, key: str) -> bool:
    """One attempt; a store still rediscovering the server counts as "not yet"."""
    try:
        return rival.acquire(key, "rival", "rival", 30, {}).granted
    except StoreUnavailable:
        return False


def test_a_pause_inside_the_trust_window_keeps_the_lease(
    stores: tuple[MongoWireServer, LeaseStore, LeaseStore], key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, store, rival = stores
    holder = Holder(store, key, ttl=12.0, margin=1.2)  # trusted for 10.8 s after a renewal
    holder.wait_for_renewal()
    server.pause()
    try:
        until(lambda: renew_failures(caplog, key) >= 2, 9.0, "the heartbeat to retry")
        assert not holder.lease.lost, "lost inside the trust window"
        trusted_at_pause_end = holder.lease.trusted_until
    finally:
        server.resume()
    until(lambda: holder.lease.trusted_until > trusted_at_pause_end, 20.0, "renewal after SIGCONT")
    assert_still_held(holder, rival, key)
    assert holder.lock.release(holder.lease)


def test_a_restart_inside_the_trust_window_keeps_the_lease(
    stores: tuple[MongoWireServer, LeaseStore, LeaseStore], key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, store, rival = stores
    holder = Holder(store, key, ttl=40.0, margin=4.0)  # the restart itself takes seconds
    holder.wait_for_renewal()
    server.stop()
    until(lambda: renew_failures(caplog, key) >= 1, 10.0, "a failed renewal while down")
    assert not holder.lease.lost
    trusted_before_restart = holder.lease.trusted_until
    server.start()  # same port, same SQLite file
    until(lambda: holder.lease.trusted_until > trusted_before_restart, 30.0,
          "renewal after restart")
    assert_still_held(holder, rival, key)
    assert holder.lock.release(holder.lease)
    taken = rival.acquire(key, "rival", "rival", 30, {}).record
    assert taken is not None and taken.token > holder.lease.token


def test_a_pause_past_the_trust_window_loses_the_lease_before_the_store_expires_it(
    stores: tuple[MongoWireServer, LeaseStore, LeaseStore], key: str,
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
        # Same host, same clock as the server's $$NOW: the holder gave up
        # before the server could hand the lease to anyone.
        assert holder.lost_at < record.expires_at, (holder.lost_at, record.expires_at)
    finally:
        server.resume()
    until(lambda: rival_acquire(rival, key), 30.0, "the rival's grant")
    taken = rival.get(key)
    assert taken is not None and taken.holder == "rival" and taken.token > holder.lease.token
    assert not store.renew(key, holder.lease.secret, holder.lease.token, 4.0)
    holder.lock.release(holder.lease)
