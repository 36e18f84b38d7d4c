"""The bucket store when other takers keep winning the race to a free key.

An acquire reads the key, finds it free and writes conditionally; when
another taker's write lands in between, the condition is false and the
acquire reads again. Where takers acquire and release quickly (the race
suite's eight processes on a loaded machine), an acquire could lose every
one of its tries with the key free each time it looked, and it then raised
``StoreUnavailable``: a waiting ``acquire(wait=10)`` failed the job as if
the store were down. Losing a race is being busy: the waiting above the
store decides what to do next."""

from __future__ import annotations

from typing import Any

import pytest

from lease_integrations import LeaseBusy, LeaseLock, connect
from lease_integrations.stores.s3 import ATTEMPTS


def _rival_wins_before_each_write(store: Any, rival: Any, key: str, times: int) -> list[int]:
    """Before each of ``store``'s next ``times`` writes, ``rival`` (another
    client of the same bucket) takes the key and gives it back: a real write
    in the window between the read and the conditional write."""
    put = store._bucket.put
    won: list[int] = []

    def contended_put(*args: Any, **kwargs: Any) -> Any:
        if len(won) < times:
            granted = rival.acquire(KEY, "rival", "rival-secret", 30.0, {})
            assert granted.granted and granted.record is not None
            won.append(granted.record.token)
            assert rival.release(KEY, "rival-secret", granted.record.token)
        return put(*args, **kwargs)

    store._bucket.put = contended_put
    return won


KEY = "billing"


def test_an_acquire_that_loses_every_race_is_busy_not_unavailable(s3_url: str) -> None:
    store, rival = connect(s3_url), connect(s3_url)
    store.acquire("warm", "w", "s", 30.0, {})  # the probe is done
    won = _rival_wins_before_each_write(store, rival, KEY, times=ATTEMPTS)
    result = store.acquire(KEY, "alice", "secret-a", 30.0, {})
    assert len(won) == ATTEMPTS
    assert not result.granted
    current = store.get(KEY)
    assert current is not None and current.holder is None  # the rival's release, untouched
    assert current.token == won[-1]


def test_a_waiting_acquire_gets_the_key_once_the_rivals_stop(s3_url: str) -> None:
    store, rival = connect(s3_url), connect(s3_url)
    store.acquire("warm", "w", "s", 30.0, {})
    won = _rival_wins_before_each_write(store, rival, KEY, times=ATTEMPTS + 3)
    lock = LeaseLock(store, KEY, ttl=30.0)
    with pytest.raises(LeaseBusy):
        lock.acquire(wait=0)
    lease = lock.acquire(wait=30)
    try:
        assert len(won) == ATTEMPTS + 3
        assert lease.token > won[-1]
    finally:
        lock.release(lease)
