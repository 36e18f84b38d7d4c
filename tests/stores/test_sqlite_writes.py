"""What one SQLite acquire or release costs beyond a one-row write
transaction, counted rather than timed: the statements it runs (sqlite3's
trace callback) and the pages its commit appends to the WAL (each one a
4 KiB write before the fsync). The history table must not rewrite a
``sqlite_sequence`` row per event, and a database whose history table did is
migrated on connect with its events kept in order."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lease_integrations.stores.sqlite import SqliteStore

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
    """(statements, WAL pages) that ``op`` ran and wrote."""
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
    return len(statements), pages


def test_acquire_and_release_write_no_more_than_they_must(tmp_path: Path, key: str) -> None:
    path = tmp_path / "leases.db"
    store = SqliteStore(path)
    try:
        for i in range(2):  # the key's rows exist; token 3 is not a trimming grant
            token = store.acquire(key, "w", f"w{i}", 30, {}).record.token  # type: ignore[union-attr]
            assert store.release(key, f"w{i}", token)
        granted: list[Any] = []
        # BEGIN, the lease upsert (it keeps what it replaced, for a takeover's
        # trace), the event, COMMIT; pages: the lease row, the event and its
        # index entry. The counter is written only when a row is deleted.
        assert cost(store, path, lambda: granted.append(
            store.acquire(key, "alice", "s", 30, {"dag_id": "d"}))) == (4, 3)
        # Busy: BEGIN, the upsert that changes nothing, the row, COMMIT.
        assert cost(store, path, lambda: store.acquire(key, "bob", "b", 30, {})) == (4, 0)
        record = granted[0].record
        assert granted[0].granted and record.token == 3 and record.meta == {"dag_id": "d"}
        # BEGIN, the event (it also proves ownership), the lease row, COMMIT.
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
