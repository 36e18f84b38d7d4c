"""The hand-packed hot calls (``redis_wire``): a call cut short between its
write and its read (a Ctrl-C, say) must not leave its reply on the pooled
connection for the next call to read as its own."""

from __future__ import annotations

import os
from typing import Any

import pytest
import redis

from lease_integrations import connect
from lease_integrations.stores.redis import RedisStore
from lease_integrations.stores.redis_pool import get_connection


def test_a_call_cut_short_after_its_write_does_not_hand_its_reply_to_the_next(
    redis_url: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = connect(redis_url)
    assert isinstance(store, RedisStore)
    try:
        pool = store._client.connection_pool
        connection = get_connection(pool)
        pool.release(connection)  # the pool's only idle connection: the next call takes it
        real_read = type(connection).read_response
        cut = []

        def read_once_interrupted(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not cut:
                cut.append(True)
                raise KeyboardInterrupt  # after the request went out, before its reply is read
            return real_read(self, *args, **kwargs)

        monkeypatch.setattr(type(connection), "read_response", read_once_interrupted)
        with pytest.raises(KeyboardInterrupt):
            store.acquire(key, "first", "s-first", 30, {})
        monkeypatch.undo()
        # The interrupted acquire was granted on the server; the next calls get
        # their own replies, not its.
        busy = store.acquire(key, "second", "s-second", 30, {})
        assert not busy.granted and busy.record is not None and busy.record.holder == "first"
        assert store.release(key, "s-first", busy.record.token)
        again = store.acquire(key, "second", "s-second", 30, {})
        assert again.granted and again.record is not None and again.record.holder == "second"
    finally:
        store.close()


def test_renewal_batches_do_not_fill_the_packed_call_cache(redis_url: str, key: str) -> None:
    """Each heartbeat batch is a different set of keys: keeping its packed
    head would grow memory with every batch (up to 4,096 heads of 500 keys)."""
    store = connect(redis_url)
    assert isinstance(store, RedisStore)
    try:
        leases = []
        for i in range(12):
            rec = store.acquire(f"{key}-{i}", "h", f"s{i}", 30, {}).record
            assert rec is not None
            leases.append((f"{key}-{i}", f"s{i}", rec.token, 30.0))
        for batch in (leases[:5], leases[5:], leases[2:9]):
            assert store.renew_many(batch) == [True] * len(batch)
        assert store._call_renew_many._heads == {}  # type: ignore[attr-defined]
        assert store.renew(*leases[0])  # one lease's call is still packed once and kept
        assert len(store._call_renew._heads) == 1  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_connection_the_server_closed_while_idle_is_not_used(redis_url: str, key: str) -> None:
    """The hot calls keep one connection out of the pool between calls
    (``Warm``); one the server closed meanwhile (its ``timeout``, a
    ``CLIENT KILL``, a restart) must be found out before the next call, as
    the pool's own check would, not fail that call."""
    store = connect(redis_url)
    assert isinstance(store, RedisStore)
    admin = redis.Redis.from_url(redis_url)
    try:
        granted = store.acquire(key, "first", "s-first", 30, {})
        assert granted.granted and granted.record is not None
        killed = admin.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1
        assert store.release(key, "s-first", granted.record.token)
        again = store.acquire(key, "second", "s-second", 30, {})
        assert again.granted
    finally:
        admin.close()
        store.close()


def test_closing_the_store_gives_its_kept_connection_back_to_the_users_pool(
        redis_url: str, key: str) -> None:
    """A store made on the user's own client: after ``close`` every
    connection it took is back in that pool (a pool of one would otherwise
    answer "No connection available" to the user's next command)."""
    pool = redis.BlockingConnectionPool.from_url(redis_url, max_connections=1, timeout=1,
                                                decode_responses=True)
    client = redis.Redis(connection_pool=pool)
    store = RedisStore(client, url="redis://users-own-client")
    try:
        granted = store.acquire(key, "first", "s-first", 30, {})
        assert granted.granted
        store.close()
        assert client.ping()
    finally:
        pool.disconnect()


def test_a_forked_child_calls_on_a_connection_of_its_own(redis_url: str, key: str) -> None:
    """The kept connection's socket is shared with a forked child: the child
    must not talk on it (the two processes would read each other's replies)."""
    store = connect(redis_url)
    assert isinstance(store, RedisStore)
    try:
        assert store.acquire(key, "parent", "s-parent", 30, {}).granted
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its own acquire, on another key, many times
            os.close(read)
            ok = all(store.acquire(f"{key}-child-{i}", "child", "s", 30, {}).granted
                     for i in range(50))
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
        os.close(write)
        mine = [store.acquire(key, "other", "s-other", 30, {}) for _ in range(50)]
        assert os.read(read, 1) == b"1", "the child got replies that were not its own"
        os.close(read)
        assert os.waitpid(pid, 0)[1] == 0
        assert all(not r.granted and r.record is not None and r.record.holder == "parent"
                   for r in mine), "the parent got a reply that was not its own"
    finally:
        store.close()


def test_the_kept_connection_serves_other_commands_of_a_pool_of_one(
        redis_url: str, key: str) -> None:
    """The connection kept for the hot calls is still the pool's: with one
    connection in all, every other command (a read of the record, of the
    history, a wait) gets it, and none fails with "No connection available"."""
    store = connect(f"{redis_url}?max_connections=1&socket_timeout=2")
    assert isinstance(store, RedisStore)
    try:
        granted = store.acquire(key, "first", "s-first", 30, {})
        assert granted.granted and granted.record is not None
        record = store.get(key)
        assert record is not None and record.holder == "first"
        assert [e.kind for e in store.history(key)] == ["acquired"]
        assert store.release(key, "s-first", granted.record.token)
        assert store.get(key) is None or store.get(key).holder is None  # type: ignore[union-attr]
    finally:
        store.close()


def test_kept_renewal_words_are_the_lease_s_own(
    redis_url: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch renewal reuses each lease's packed words (key, secret, token,
    ttl) every interval: a lease taken again (a new token and secret) must be
    renewed with its own, the old holder's words still be refused, a changed
    ttl be the one set, and the kept words stay bounded."""
    monkeypatch.setattr("lease_integrations.stores.redis.RENEW_CACHE", 4)
    store = connect(redis_url)
    assert isinstance(store, RedisStore)
    admin = redis.Redis.from_url(redis_url)
    try:
        first = store.acquire(key, "h1", "s-first", 30, {}).record
        assert first is not None
        assert store.renew_many([(key, "s-first", first.token, 30.0)]) == [True]
        assert store.release(key, "s-first", first.token)
        second = store.acquire(key, "h2", "s-second", 30, {}).record
        assert second is not None and second.token != first.token
        assert store.renew_many([(key, "s-first", first.token, 30.0),
                                 (key, "s-second", second.token, 30.0)]) == [False, True]
        assert store.renew_many([(key, "s-second", second.token, 2.0)]) == [True]
        expires_ms = int(admin.hget(f"{{lease:{key}}}:rec", "expires_at"))
        renewed_ms = int(admin.hget(f"{{lease:{key}}}:rec", "renewed_at"))
        assert expires_ms - renewed_ms == 2000
        for i in range(10):
            store.renew_many([(f"{key}-{i}", "s", 1, 30.0)])
        assert len(store._renew_cache) <= 5
    finally:
        admin.close()
        store.close()
