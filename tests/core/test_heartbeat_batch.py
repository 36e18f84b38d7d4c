"""Batched renewals: the heartbeat renews the leases of one store that fall
due in the same tick with one ``renew_many`` call, and still judges each lease
on its own (a refused renewal loses that lease and no other)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from lease_integrations import LeaseLock
from lease_integrations.core.store import RenewItem
from lease_integrations.stores.memory import MemoryStore


class CountingStore(MemoryStore):
    """The real memory store, recording the size of every batch it is asked
    to renew (the heartbeat is what is under test, not the store)."""

    batch_renewals = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.batches: list[int] = []
        self.seen = threading.Event()

    def renew_many(self, items: Sequence[RenewItem]) -> list[bool]:
        self.batches.append(len(items))
        if len(items) > 1:
            self.seen.set()
        return super().renew_many(items)


def test_leases_due_together_are_renewed_in_one_call_and_judged_alone(key: str) -> None:
    store = CountingStore(key)
    locks = [LeaseLock(store, f"{key}-{i}", ttl=3.0, on_lost="check") for i in range(20)]
    leases = [lock.acquire(wait=0) for lock in locks]
    try:
        if not store.seen.wait(10):
            pytest.fail(f"no batched renewal within 10 s; batches seen: {store.batches}")
        assert max(store.batches) > 1
        victim = leases[7]
        store.force_release(victim.key, by="test")
        deadline = time.monotonic() + 10
        while not victim.lost.is_set():
            assert time.monotonic() < deadline, "the broken lease was never reported lost"
            time.sleep(0.02)
        # Every other lease goes on renewing: two more intervals, none lost.
        marks = {lease.key: store.get(lease.key).renewed_at for lease in leases  # type: ignore[union-attr]
                 if lease is not victim}
        deadline = time.monotonic() + 10
        while any(store.get(k).renewed_at == at for k, at in marks.items()):  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the other leases stopped renewing"
            time.sleep(0.02)
        assert [lease.key for lease in leases if lease.lost.is_set()] == [victim.key]
    finally:
        for lock, lease in zip(locks, leases):
            if lease is not leases[7]:
                lock.release(lease)
        store.close()


class OneSilentNodeStore(CountingStore):
    """The real memory store, except that leases in ``silent`` get no verdict
    (None) from ``renew_many``, as a Redis Cluster reports the leases of a node
    that did not answer while the other nodes renewed theirs."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.silent: set[str] = set()
        self.unanswered = threading.Event()

    def renew_many(self, items: Sequence[RenewItem]) -> list[bool | None]:
        quiet = [item[0] in self.silent for item in items]
        done = super().renew_many([item for item, q in zip(items, quiet) if not q])
        answers = iter(done)
        if any(quiet):
            self.unanswered.set()
        return [None if q else next(answers) for q in quiet]


def test_a_lease_without_a_verdict_in_a_batch_is_retried_not_lost(key: str) -> None:
    store = OneSilentNodeStore(key)
    locks = [LeaseLock(store, f"{key}-{i}", ttl=3.0, on_lost="check") for i in range(20)]
    leases = [lock.acquire(wait=0) for lock in locks]
    victim = leases[7]
    try:
        if not store.seen.wait(10):
            pytest.fail(f"no batched renewal within 10 s; batches seen: {store.batches}")
        store.silent.add(victim.key)
        if not store.unanswered.wait(10):
            pytest.fail("the victim was never in a batch while silent")
        store.silent.clear()
        mark = store.get(victim.key).renewed_at  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while store.get(victim.key).renewed_at == mark:  # type: ignore[union-attr]
            assert not victim.lost.is_set(), "a renewal without a verdict declared the lease lost"
            assert time.monotonic() < deadline, "the victim was never renewed again"
            time.sleep(0.02)
        assert [lease.key for lease in leases if lease.lost.is_set()] == []
    finally:
        for lock, lease in zip(locks, leases):
            lock.release(lease)
        store.close()


class KeyCountingStore(CountingStore):
    """The real memory store, counting the renewals of each key (its
    ``renew_many`` renews each item through ``renew``)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.renewed: dict[str, int] = {}

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        self.renewed[key] = self.renewed.get(key, 0) + 1
        return super().renew(key, secret, token, ttl)


def test_leases_renewed_in_one_batch_keep_their_own_intervals(key: str) -> None:
    """The leases one batch renewed are queued again together only where they
    fall due together: a short lease and a long one renewed in one call go
    on at their own intervals (1 s and 4 s here), neither dragged to the
    other's."""
    store = KeyCountingStore(key)
    short = LeaseLock(store, f"{key}-short", ttl=3.0, on_lost="check")
    long = LeaseLock(store, f"{key}-long", ttl=12.0, on_lost="check")
    first, second = short.acquire(wait=0), long.acquire(wait=0)
    try:
        deadline = time.monotonic() + 20
        while store.renewed.get(first.key, 0) < 9:
            assert time.monotonic() < deadline, f"renewals so far: {store.renewed}"
            time.sleep(0.05)
        counts = dict(store.renewed)
        # 9 renewals of the short lease take about 9 s: the long one is
        # renewed at 4 s and 8 s (2; 3 if the short one's calls ran late).
        assert 1 <= counts.get(second.key, 0) <= 3, counts
        assert not first.lost.is_set() and not second.lost.is_set()
    finally:
        short.release(first)
        long.release(second)
        store.close()
