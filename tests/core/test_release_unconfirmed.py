"""A block whose release cannot reach the store never ends as a success
(the proof's P5). The lease is broken and granted to a contender while the
block runs; then the holder's path to the store goes (its proxy refuses
connections, or, on SQLite, another connection holds the write lock past
the busy timeout). The block must end with ``LeaseLost``: whether the lease
was still ours when the block ended is unknown, and here it was not.

The ttl is long (30 s) so the keeper's next renewal, which would find the
break first, is 10 s away: what is judged is the release alone. The same
for ``hold_adopted(release=False)``, whose exit confirms the lease with one
renewal."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lease_integrations import LeaseLock, LeaseLost, connect
from tests.conftest import store_url_for
from tests.safety.proxy import FaultProxy


@contextmanager
def store_path(kind: str, request: pytest.FixtureRequest,
               tmp_path: os.PathLike[str]) -> Iterator[tuple[str, str, object]]:
    """(the holder's URL, a direct URL, a cutter): the cutter takes the
    holder's path to the store away."""
    direct = store_url_for(request, kind, tmp_path)
    if kind == "sqlite":
        path = direct.removeprefix("sqlite://")

        class Locker:
            conn: sqlite3.Connection | None = None

            def __call__(self) -> None:  # a writer that never commits
                self.conn = sqlite3.connect(path, isolation_level=None)
                self.conn.execute("BEGIN IMMEDIATE")

        locker = Locker()
        try:
            yield f"{direct}?timeout=0.3", direct, locker
        finally:
            if locker.conn is not None:
                locker.conn.close()
        return
    scheme, rest = direct.split("://", 1)
    userinfo, _, hostpart = rest.rpartition("@")
    hostport, _, tail = hostpart.partition("/")
    host, _, port = hostport.rpartition(":")
    proxy = FaultProxy(host, int(port))
    via = f"{scheme}://{userinfo + '@' if userinfo else ''}127.0.0.1:{proxy.port}/{tail}"
    try:
        yield via, direct, proxy.close
    finally:
        proxy.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres"])
@pytest.mark.parametrize("policy", ["exit", "check"])
def test_a_release_that_cannot_reach_the_store_after_a_break_is_a_loss(
        kind: str, policy: str, request: pytest.FixtureRequest, tmp_path: os.PathLike[str],
        key: str) -> None:
    with store_path(kind, request, tmp_path) as (via, direct, cut):
        holder_store, other = connect(via), connect(direct)
        lock = LeaseLock(holder_store, key, ttl=30.0, on_lost=policy)
        with pytest.raises(LeaseLost) as lost, lock.hold() as lease:
            assert other.force_release(key, by="test", token=lease.token) is not None
            rival = LeaseLock(other, key, ttl=30.0, on_lost="check").acquire()
            assert rival.token > lease.token
            cut()  # type: ignore[operator]
        assert lost.value.token == lease.token
        assert "could not be confirmed" in lost.value.reason, lost.value.reason
        assert other.get(key).token == rival.token  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_an_adopted_lease_broken_and_granted_again_is_no_success(
        kind: str, request: pytest.FixtureRequest, tmp_path: os.PathLike[str], key: str) -> None:
    url = store_url_for(request, kind, tmp_path)
    store = connect(url)
    first = LeaseLock(store, key, ttl=30.0).acquire()
    LeaseLock(store, key).forget(first)  # handed over, as the DAG-run lease does
    lock = LeaseLock(store, key, ttl=30.0, on_lost="check")
    with pytest.raises(LeaseLost) as lost, lock.hold_adopted(first.token, first.secret):
        store.force_release(key, by="test", token=first.token)
        LeaseLock(store, key, ttl=30.0, on_lost="check").acquire()
    assert "refused to confirm" in lost.value.reason


def test_an_adopted_lease_left_healthy_ends_the_block_normally(tmp_path: os.PathLike[str],
                                                                key: str) -> None:
    store = connect(f"sqlite://{tmp_path}/leases.db")
    first = LeaseLock(store, key, ttl=30.0).acquire()
    LeaseLock(store, key).forget(first)
    with LeaseLock(store, key, ttl=30.0).hold_adopted(first.token, first.secret):
        pass
    record = store.get(key)
    assert record is not None and record.held and record.token == first.token
