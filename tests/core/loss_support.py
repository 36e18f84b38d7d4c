"""Helpers of the loss-delivery tests: bounded waits, where a thread is, and
a way to hold up a real store's writes (so a loss fires while a hold sits
inside a store call)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from lease_integrations import Lease, LeaseStore
from lease_integrations.core.heartbeat import get_heartbeat


def wait_until(condition: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Bounded poll of something that happens in another thread or process."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.002)


def releasing(store: LeaseStore) -> set[int]:
    """The ids of the threads inside ``store.release`` right now (the method
    is wrapped on this instance). Not read from the threads' frames: walking
    another running thread's ``f_back`` chain can crash CPython 3.11."""
    inside: set[int] = set()
    release = store.release

    def tracked(key: str, secret: str, token: int) -> bool:
        me = threading.get_ident()
        inside.add(me)
        try:
            return release(key, secret, token)
        finally:
            inside.discard(me)

    store.release = tracked  # type: ignore[method-assign]
    return inside


@contextmanager
def writes_held_up(url: str) -> Iterator[Callable[[], None]]:
    """Hold up writes to the store at ``url`` until the yielded function is
    called: SQLite by a second connection's write transaction, Redis by
    ``CLIENT PAUSE ... WRITE``."""
    if url.startswith("sqlite://"):
        raw = sqlite3.connect(url[len("sqlite://"):].split("?")[0], isolation_level=None,
                              check_same_thread=False)
        raw.execute("BEGIN IMMEDIATE")
        done = threading.Event()

        def release_sqlite() -> None:
            if not done.is_set():
                done.set()
                raw.execute("ROLLBACK")

        try:
            yield release_sqlite
        finally:
            release_sqlite()
            raw.close()
    elif url.startswith("redis://"):
        import redis

        client = redis.Redis.from_url(url)
        client.execute_command("CLIENT", "PAUSE", 30000, "WRITE")

        def release_redis() -> None:
            client.execute_command("CLIENT", "UNPAUSE")

        try:
            yield release_redis
        finally:
            release_redis()
            client.close()
    else:
        raise ValueError(f"cannot hold up writes to {url}")


def assert_nothing_left(store: LeaseStore, leases: list[Lease]) -> None:
    """None of ``leases`` is held in the store or renewed by the heartbeat."""
    for key in {lease.key for lease in leases}:
        record = store.get(key)
        assert record is None or not record.held, f"lease {key} still held: {record}"
    heartbeat = get_heartbeat()
    for lease in leases:
        assert not renewing(heartbeat, lease), f"lease {lease.key} is still being renewed"


def renewing(heartbeat: Any, lease: Lease) -> bool:
    if hasattr(type(heartbeat), "__contains__"):
        return lease in heartbeat
    return id(lease) in heartbeat._entries  # the code before issue 12 had no public way
