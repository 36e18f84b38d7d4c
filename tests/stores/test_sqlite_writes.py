"""What one SQLite acquire or release costs beyond a one-row write
transaction, counted rather than timed: the statements it runs (sqlite3's
trace callback) and the pages its commit appends to the WAL (each one a
4 KiB write before the fsync). A one-row write transaction is 3 statements
(BEGIN, UPDATE, COMMIT) and 1 page; an acquire is the same. The history
table must not rewrite a ``sqlite_sequence`` row per event, and a database
whose history table did is migrated on connect with its events kept in
order. The grant's event, kept in its lease row until the key's next
change, still shows in history in order, whatever comes next."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lease_integrations.core.store import HISTORY_LIMIT
from lease_integrations.stores.sqlite import TRIM_EVERY, SqliteStore

OLD_EVENTS = """
CREATE TABLE leases (key TEXT PRIMARY KEY, holder TEXT, secret TEXT, token INTEGER NOT NULL,
    acquired_at REAL NOT NULL, renewed_at REAL NOT NULL, expires_at REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}');
CREATE TABLE lease_events (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL,
    kind TEXT NOT NULL, token INTEGER NOT NULL, holder TEXT, at REAL NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}');
CREATE INDEX lease_events_by_key ON lease_events (key, id);
CREATE TABLE lease_tokens (key TEXT PRIMARY KEY, token INTEGER NOT NULL);
INSERT INTO lease_events (key, kind, token, holder, at) VALUES
    ('k', 'acquired', 1, 'a', 0), ('k', 'released', 1, 'a', 1), ('k', 'acquired', 2, 'b', 2);
"""


def cost(store: SqliteStore, path: Path, op: Callable[[], Any]) -> tuple[int, int]:
    """(statements, WAL pages) that ``op`` ran and wrote. Statements are those
    the store sent: sqlite3 traces a trigger's program as its statement
    again, so a repeat of the statement just traced is not counted."""
    with sqlite3.connect(path) as other:
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # an empty WAL to count in
    statements: list[str] = []
    conn = store._connection()
    conn.set_trace_callback(statements.append)
    try:
        op()
    finally:
        conn.set_trace_callback(None)
    with sqlite3.connect(path) as other:
        _, pages, _ = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    sent = [s for i, s in enumerate(statements) if i == 0 or s != statements[i - 1]]
    return len(sent), pages


def test_acquire_and_release_write_no_more_than_they_must(tmp_path: Path, key: str) -> None:
    path = tmp_path / "leases.db"
    store = SqliteStore(path)
    try:
        for i in range(2):  # the key's rows exist
            token = store.acquire(key, "w", f"w{i}", 30, {}).record.token  # type: ignore[union-attr]
            assert store.release(key, f"w{i}", token)
        granted: list[Any] = []
        # BEGIN, the lease upsert, COMMIT; one page, the lease row: the
        # grant's event is written into it (until the key's next change moves
        # it to the history table), and the counter is written only when a
        # row is deleted. As a one-row write transaction. (A token that is a
        # multiple of TRIM_EVERY also trims the history: about 1 grant in 16,
        # as tokens are clock readings; such a grant is released and retried.)
        for _ in range(10):
            granted.clear()
            spent = cost(store, path, lambda: granted.append(
                store.acquire(key, "alice", "s", 30, {"dag_id": "d"})))
            if granted[0].record.token % TRIM_EVERY:
                break
            assert store.release(key, "s", granted[0].record.token)
        assert spent == (3, 1)
        # Busy: BEGIN, the upsert that changes nothing, the row, COMMIT.
        assert cost(store, path, lambda: store.acquire(key, "bob", "b", 30, {})) == (4, 0)
        record = granted[0].record
        assert granted[0].granted and record.token > token and record.meta == {"dag_id": "d"}
        # BEGIN, the event (it also proves ownership; its trigger first moves
        # the grant's event beside it), the lease row, COMMIT; pages: the
        # history table, its index, the lease row.
        assert cost(store, path, lambda: store.release(key, "s", record.token)) == (4, 3)
        assert [e.kind for e in store.history(key, 2)] == ["acquired", "released"]
        assert store.history(key, 1)[0].holder == "alice"
    finally:
        store.close()


def test_an_autoincrement_history_table_is_migrated_in_order(tmp_path: Path) -> None:
    path = tmp_path / "leases.db"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_EVENTS)
    store = SqliteStore(path)
    try:
        assert store.acquire("k", "c", "s", 30, {}).granted
        assert [(e.kind, e.holder) for e in store.history("k")] == [
            ("acquired", "a"), ("released", "a"), ("acquired", "b"), ("acquired", "c")]
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'lease_events'").fetchone()[0]
        assert "AUTOINCREMENT" not in sql.upper()
        assert db.execute("SELECT count(*) FROM sqlite_master "
                          "WHERE name = 'lease_events_by_key'").fetchone() == (1,)


def test_the_grants_event_keeps_its_place_whatever_comes_next(tmp_path: Path, key: str) -> None:
    """The grant's event waits in its row; a takeover, a break, a recorded
    event and a DELETE of the row each move it to the history table first."""
    path = tmp_path / "leases.db"
    store = SqliteStore(path)
    try:
        first = store.acquire(key, "a", "sa", 0, {"n": 1}).record  # expires at once
        assert first is not None
        t1 = first.token
        # A takeover: the expired grant's event first, then the new one
        # (still in the row) naming what it took over.
        took: list[Any] = []
        assert cost(store, path, lambda: took.append(
            store.acquire(key, "b", "sb", 30, {"n": 2})))[1] == 3
        t2 = took[0].record.token
        store.record_event(key, "acquired", "by-hand", t2, {"n": 3})
        assert store.force_release(key, "op", token=t2) is not None
        t3 = store.acquire(key, "c", "sc", 30, {"n": 4}).record.token  # type: ignore[union-attr]
        with sqlite3.connect(path) as shell:  # an operator deletes the held row
            shell.execute("DELETE FROM leases WHERE key = ?", (key,))
        events = [(e.kind, e.token, e.holder, e.detail) for e in store.history(key)]
        assert events == [
            ("acquired", t1, "a", {"meta": {"n": 1}}),
            ("acquired", t2, "b", {"meta": {"n": 2}, "took_over": {"token": t1, "holder": "a"}}),
            ("acquired", t2, "by-hand", {"n": 3}),
            ("broken", t2, "b", {"by": "op", "meta": {"n": 2}}),
            ("acquired", t3, "c", {"meta": {"n": 4}})]
        t4 = store.acquire(key, "d", "sd", 30, {}).record.token  # type: ignore[union-attr]
        assert t1 < t2 < t3 < t4
        assert [e.token for e in store.history(key, 2)] == [t3, t4]
    finally:
        store.close()


def test_history_stays_capped(tmp_path: Path, key: str) -> None:
    store = SqliteStore(tmp_path / "leases.db")
    try:
        for i in range(3 * HISTORY_LIMIT):
            rec = store.acquire(key, "w", f"s{i}", 30, {}).record
            assert rec is not None and store.release(key, f"s{i}", rec.token)
        rec = store.acquire(key, "w", "last", 30, {}).record
        assert rec is not None
        events = store.history(key, HISTORY_LIMIT)
        assert len(events) == HISTORY_LIMIT and events[-1].token == rec.token
        conn = store._connection()
        stored = conn.execute("SELECT count(*) FROM lease_events WHERE key = ?", (key,)).fetchone()
        # a grant trims when its token (a clock reading) is a multiple of
        # TRIM_EVERY: 1 in 16 at random, so 160 grants without one: p < 1e-4
        assert stored[0] <= HISTORY_LIMIT + 2 * 10 * TRIM_EVERY
    finally:
        store.close()
