"""The hand-packed hot calls (``redis_wire``): a call cut short between its
write and its read (a Ctrl-C, say) must not leave its reply on the pooled
connection for the next call to read as its own."""

from __future__ import annotations

from typing import Any

import pytest

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
