"""Issue 13, reproduction 4: the SQL stores keep the token counter apart from
the lease row, so an operator's ``DELETE FROM leases WHERE key = ...`` never
restarts a key's tokens (on PostgreSQL triggers write the counter when a row
goes, grants do not); and databases made by the previous schema (counter in
the lease row, no secret column) are migrated on connect, counters kept."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import psycopg
import pytest

from lease_integrations import LeaseStore, connect

OLD_SQLITE_SCHEMA = """
CREATE TABLE leases (key TEXT PRIMARY KEY, holder TEXT, token INTEGER NOT NULL,
    acquired_at REAL NOT NULL, renewed_at REAL NOT NULL, expires_at REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}');
CREATE TABLE lease_events (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL,
    kind TEXT NOT NULL, token INTEGER NOT NULL, holder TEXT, at REAL NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}');
INSERT INTO leases VALUES ('old-key', NULL, 41, 0, 0, 0, '{}');
"""

OLD_PG_SCHEMA = """
CREATE TABLE {t} (key text PRIMARY KEY, holder text, token bigint NOT NULL,
    acquired_at timestamptz NOT NULL, renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL, meta jsonb NOT NULL DEFAULT '{{}}');
CREATE TABLE {t}_events (id bigserial PRIMARY KEY, key text NOT NULL, kind text NOT NULL,
    token bigint NOT NULL, holder text, at timestamptz NOT NULL,
    detail jsonb NOT NULL DEFAULT '{{}}');
INSERT INTO {t} VALUES ('old-key', NULL, 41, now(), now(), now(), '{{}}');
"""


def grant_and_release(store: LeaseStore, key: str, who: str) -> int:
    rec = store.acquire(key, who, f"s-{who}", 30, {}).record
    assert rec is not None
    assert store.release(key, f"s-{who}", rec.token)
    return rec.token


def test_deleting_the_sqlite_lease_row_does_not_reset_tokens(tmp_path: Path, key: str) -> None:
    with connect(f"sqlite://{tmp_path}/leases.db") as store:
        before = [grant_and_release(store, key, f"a{i}") for i in range(3)]
        with sqlite3.connect(tmp_path / "leases.db") as db:
            db.execute("DELETE FROM leases WHERE key = ?", (key,))
        assert store.get(key) is None
        after = grant_and_release(store, key, "b")
    print(f"\nsqlite DELETE: tokens before {before}, after {after}")
    assert after > before[-1]


@pytest.mark.parametrize("loss", ["deleted", "restored from a backup"])
def test_a_lost_sqlite_file_never_grants_a_token_again(tmp_path: Path, key: str,
                                                       loss: str) -> None:
    """A file deleted, or put back from a backup taken before the last
    grants, holds no counter (or an old one): the clock floor keeps every
    token above all granted before (with last + 1 alone the next was 1, or
    the backup's next, again)."""
    path = tmp_path / "leases.db"
    backup = tmp_path / "backup.db"
    with connect(f"sqlite://{path}") as store:
        before = [grant_and_release(store, key, "a")]
        with sqlite3.connect(path) as db, sqlite3.connect(backup) as copy:
            db.backup(copy)
        before += [grant_and_release(store, key, f"a{i}") for i in range(3)]
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    if loss != "deleted":
        shutil.copy(backup, path)
    with connect(f"sqlite://{path}") as store:
        after = grant_and_release(store, key, "b")
    print(f"\nsqlite file {loss}: tokens before {before}, after {after}")
    assert after > max(before)


def test_deleting_the_postgres_lease_row_does_not_reset_tokens(
    postgres_url: str, key: str
) -> None:
    with connect(postgres_url) as store:
        before = [grant_and_release(store, key, f"a{i}") for i in range(3)]
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute("DELETE FROM leases WHERE key = %s", (key,))
            row = db.execute("SELECT token FROM leases_tokens WHERE key = %s", (key,)).fetchone()
        assert row == (before[-1],), "the counter table keeps the last token"
        assert store.get(key) is None
        after = grant_and_release(store, key, "b")
    print(f"\npostgres DELETE: tokens before {before}, after {after}")
    assert after > before[-1]


def test_an_old_sqlite_database_is_migrated_with_its_counters(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SQLITE_SCHEMA)
    with connect(f"sqlite://{path}") as store:
        store.get("old-key")  # connected: migrated
        with sqlite3.connect(path) as db:  # the old counter is carried over
            counter = db.execute("SELECT token FROM lease_tokens WHERE key = 'old-key'").fetchone()
        assert counter == (41,)
        first = grant_and_release(store, "old-key", "new")
        assert first > 41
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM leases WHERE key = 'old-key'")
        second = grant_and_release(store, "old-key", "newer")
        assert second > first
    with connect(f"sqlite://{path}") as again:  # a second connect migrates nothing twice
        assert grant_and_release(again, "old-key", "third") > second


def test_truncating_the_postgres_lease_table_does_not_reset_tokens(postgres_url: str) -> None:
    table = "truncated_leases"
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"DROP TABLE IF EXISTS {table}, {table}_events, {table}_tokens")
    with connect(f"{postgres_url}?table={table}") as store:
        before = {key: grant_and_release(store, key, "a") for key in ("k1", "k2")}
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(f"TRUNCATE {table}")
            rows = dict(db.execute(f"SELECT key, token FROM {table}_tokens").fetchall())
        assert rows == before, "the truncate trigger keeps every key's last token"
        after = {key: grant_and_release(store, key, "b") for key in ("k1", "k2")}
    assert all(after[key] > before[key] for key in before), (before, after)


@pytest.mark.parametrize("table", ["old_schema_leases"])
def test_an_old_postgres_database_is_migrated_with_its_counters(
    postgres_url: str, table: str
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"DROP TABLE IF EXISTS {table}, {table}_events, {table}_tokens")
        db.execute(OLD_PG_SCHEMA.format(t=table))
    with connect(f"{postgres_url}?table={table}") as store:
        first = grant_and_release(store, "old-key", "new")
        assert first > 41
        with psycopg.connect(postgres_url, autocommit=True) as db:
            row = db.execute(f"SELECT token FROM {table}_tokens WHERE key = 'old-key'").fetchone()
            assert row is not None and row[0] >= 41, "the row's counter is carried over"
            db.execute(f"DELETE FROM {table} WHERE key = 'old-key'")
            row = db.execute(f"SELECT token FROM {table}_tokens WHERE key = 'old-key'").fetchone()
        assert row == (first,), "the delete trigger keeps the last token"
        assert grant_and_release(store, "old-key", "newer") > first
