"""Waiters on PostgreSQL are woken by LISTEN/NOTIFY from the releasing
statement: ``wait_for_release`` returns True (notified) long before its
timeout, and stays False while nothing is released."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from servers.postgres_server import PgServer

from lease_integrations import Lease, LeaseLock, connect
from lease_integrations.stores.postgres import PostgresStore

LONG = 60.0  # a waiter that returns True before this was woken, not timed out


@pytest.fixture
def pair(postgres_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores (two processes' worth of connections): a waiter and a releaser."""
    waiter, releaser = PostgresStore.from_url(postgres_url), PostgresStore.from_url(postgres_url)
    yield waiter, releaser
    waiter.close()
    releaser.close()


def wait_in_thread(store: PostgresStore, key: str, timeout: float) -> tuple[threading.Thread,
                                                                         list[bool],
                                                                         threading.Event]:
    """Acquire (busy), then wait; ``asked`` is set once the acquire answered."""
    result: list[bool] = []
    asked = threading.Event()

    def run() -> None:
        assert not store.acquire(key, "bob", "bob", 30, {}).granted
        asked.set()
        result.append(store.wait_for_release(key, timeout))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result, asked


@pytest.mark.parametrize("how", ["release", "force_release"])
def test_a_release_wakes_the_waiter(pair: tuple[PostgresStore, PostgresStore], key: str,
                                    how: str) -> None:
    waiter, releaser = pair
    rec = releaser.acquire(key, "alice", "alice", 30, {}).record
    assert rec is not None
    thread, result, asked = wait_in_thread(waiter, key, LONG)
    assert asked.wait(10)
    if how == "release":
        assert releaser.release(key, "alice", rec.token)
    else:
        assert releaser.force_release(key, by="ops") is not None
    thread.join(LONG + 10)
    assert result == [True]
    assert waiter.acquire(key, "bob", "bob", 30, {}).granted


def test_no_wake_while_the_lease_stays_held(pair: tuple[PostgresStore, PostgresStore],
                                            key: str) -> None:
    waiter, releaser = pair
    other = releaser.acquire(key + "-other", "carol", "carol", 30, {}).record
    assert releaser.acquire(key, "alice", "alice", 30, {}).granted and other is not None
    waiter.wait_for_release(key + "-warm", 0.2)  # LISTEN is up from here on
    thread, result, asked = wait_in_thread(waiter, key, 1.0)
    assert asked.wait(10)
    assert releaser.release(key + "-other", "carol", other.token)  # another key
    thread.join(20)
    assert result == [False]


def test_a_release_between_busy_and_wait_is_not_missed(
    pair: tuple[PostgresStore, PostgresStore], key: str
) -> None:
    waiter, releaser = pair
    waiter.wait_for_release(key + "-warm", 0.1)  # LISTEN is up
    rec = releaser.acquire(key, "alice", "alice", 30, {}).record
    assert rec is not None
    assert not waiter.acquire(key, "bob", "bob", 30, {}).granted
    assert releaser.release(key, "alice", rec.token)  # before the waiter waits
    assert waiter.wait_for_release(key, LONG) is True


def test_the_first_wait_checks_the_lease_after_listen_starts(
    pair: tuple[PostgresStore, PostgresStore], key: str
) -> None:
    waiter, releaser = pair
    rec = releaser.acquire(key, "alice", "alice", 30, {}).record
    assert rec is not None
    assert not waiter.acquire(key, "bob", "bob", 30, {}).granted
    assert releaser.release(key, "alice", rec.token)  # nobody listens yet
    assert waiter.wait_for_release(key, LONG) is True


def test_lease_lock_waiter_takes_the_lease_on_release(postgres_url: str, key: str) -> None:
    with connect(postgres_url) as a, connect(postgres_url) as b:
        holder = LeaseLock(a, key, ttl=30)
        lease = holder.acquire()
        waiter = LeaseLock(b, key, ttl=30)
        got: list[Lease] = []
        thread = threading.Thread(target=lambda: got.append(waiter.acquire(wait=LONG)))
        thread.start()
        holder.release(lease)
        thread.join(LONG + 10)
        assert len(got) == 1 and got[0].token > lease.token
        assert waiter.release(got[0])


def test_waiters_hear_releases_again_after_a_server_restart(private_postgres: PgServer,
                                                            key: str) -> None:
    with PostgresStore.from_url(private_postgres.url) as waiter:
        waiter.wait_for_release(key + "-warm", 0.1)
        listener = waiter._get_listener()
        epoch = listener._epoch
        private_postgres.stop("fast")
        private_postgres.start()
        with PostgresStore.from_url(private_postgres.url) as releaser:
            rec = releaser.acquire(key, "alice", "alice", 30, {}).record
            assert rec is not None
            deadline = time.monotonic() + 30
            while not (listener._epoch > epoch and listener.listening_since is not None):
                assert time.monotonic() < deadline, "LISTEN never came back"
                time.sleep(0.02)
            thread, result, asked = wait_in_thread(waiter, key, LONG)
            assert asked.wait(20)
            assert releaser.release(key, "alice", rec.token)
            thread.join(LONG + 10)
            assert result == [True]
