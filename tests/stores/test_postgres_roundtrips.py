"""Each lease operation is one statement, one round trip: counted on the
client with libpq's own protocol trace (every ``Sync`` the client sends ends
one round trip; a simple ``Query`` is one too)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg.pq import Trace

from lease_integrations.stores import postgres
from lease_integrations.stores.postgres import PostgresStore


@pytest.fixture
def pg(postgres_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore.from_url(postgres_url)
    yield store
    store.close()


def round_trips(store: PostgresStore, op: Callable[[], Any]) -> int:
    """Round trips ``op`` sent on the store's (single, pooled) connection."""
    idle = store._pool._idle
    assert len(idle) == 1, "one thread, one pooled connection"
    conn = idle[0]
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        try:
            op()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t")[2].split()[0] for line in trace.read().splitlines()
                if line.startswith("F\t")]
    assert store._pool._idle == [conn], "the operation used another connection"
    return sum(1 for message in sent if message in ("Sync", "Query"))


def warm_up(store: PostgresStore, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past psycopg's prepare threshold, so statements run prepared (the
    preparing execution itself sends Parse in a round trip of its own, once per
    connection). Both acquire statements: the one that trims history runs at
    random (1 in TRIM_EVERY), and an acquire measured after a warm-up that
    never drew it paid its Parse (a flaky 2 == 1, about 1 run in 25)."""
    for i in range(8):
        monkeypatch.setattr(postgres, "TRIM_EVERY", 1 if i % 2 else 10**9)
        rec = store.acquire(key, f"w{i}", f"w{i}", 30, {}).record
        assert rec is not None
        store.acquire(key, "busy", "busy", 30, {})
        store.renew(key, f"w{i}", rec.token, 30)
        store.release(key, f"w{i}", rec.token)
        store.force_release(key, by="warm-up")
        store.get(key)
    monkeypatch.undo()


def test_every_operation_is_one_round_trip(pg: PostgresStore, key: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    warm_up(pg, key, monkeypatch)
    granted: list[Any] = []
    assert round_trips(pg, lambda: granted.append(pg.acquire(key, "alice", "alice", 30, {}))) == 1
    rec = granted[0].record
    assert granted[0].granted
    busy: list[Any] = []
    assert round_trips(pg, lambda: busy.append(pg.acquire(key, "bob", "bob", 30, {}))) == 1
    assert not busy[0].granted and busy[0].record.holder == "alice"
    assert round_trips(pg, lambda: pg.renew(key, "alice", rec.token, 30)) == 1
    assert round_trips(pg, lambda: pg.release(key, "alice", rec.token)) == 1
    assert round_trips(pg, lambda: pg.get(key)) == 1
    assert round_trips(pg, lambda: pg.force_release(key, by="ops")) == 1
    events = pg.history(key, limit=3)
    assert [e.kind for e in events] == ["acquired", "released", "broken"]
    monkeypatch.setattr(postgres, "TRIM_EVERY", 1)  # an acquire that trims history, too
    assert round_trips(pg, lambda: pg.acquire(key, "carol", "carol", 30, {})) == 1
