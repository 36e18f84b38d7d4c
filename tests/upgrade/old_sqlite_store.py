"""A frozen copy of the SQLite store's SQL and write steps as released at
commit 5886a6c (``git rev-parse --short HEAD`` of main before the WAL-page
work), standing in for an old version's process during a rolling upgrade.

Only what an old process does to the file is copied: its schema check and
migration on connect, and the acquire / renew / release / history steps,
statement for statement. Do not "fix" or modernise this file: it must keep
doing exactly what the old release did, or the upgrade test proves nothing.

Run as a script it is that old process, driven one command per line on
stdin (``open PATH``, ``acquire KEY HOLDER SECRET TTL``, ``renew KEY SECRET
TOKEN TTL``, ``release KEY SECRET TOKEN``, ``history KEY``, ``exit``), one
JSON answer per line on stdout: a second process, like a real rolling
upgrade on one host, with its own connection and its own prepared
statements.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

NOW = "((julianday('now') - 2440587.5) * 86400.0)"
HISTORY_LIMIT = 100
TOOK_OVER = "took_over"

SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    key         TEXT PRIMARY KEY,
    holder      TEXT,
    secret      TEXT,
    token       INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    renewed_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    meta        TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS lease_events (
    id     INTEGER PRIMARY KEY,
    key    TEXT NOT NULL,
    kind   TEXT NOT NULL,
    token  INTEGER NOT NULL,
    holder TEXT,
    at     REAL NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS lease_events_by_key ON lease_events (key, id);
CREATE TABLE IF NOT EXISTS lease_tokens (
    key   TEXT PRIMARY KEY,
    token INTEGER NOT NULL
);
"""
MIGRATE = [
    "ALTER TABLE leases ADD COLUMN secret TEXT",
    """INSERT INTO lease_tokens (key, token) SELECT key, token FROM leases WHERE true
       ON CONFLICT (key) DO UPDATE SET token = max(lease_tokens.token, excluded.token)""",
]
REBUILD_EVENTS = [
    "ALTER TABLE lease_events RENAME TO lease_events_old",
    "DROP INDEX IF EXISTS lease_events_by_key",
    SCHEMA.split(";")[1],
    "INSERT INTO lease_events SELECT id, key, kind, token, holder, at, detail FROM lease_events_old",
    "DROP TABLE lease_events_old",
    "DELETE FROM sqlite_sequence WHERE name IN ('lease_events', 'lease_events_old')",
    SCHEMA.split(";")[2],
]
ACQUIRE = f"""
INSERT INTO leases (key, holder, secret, token, acquired_at, renewed_at, expires_at, meta)
VALUES (?1, ?2, ?3, coalesce((SELECT token FROM lease_tokens WHERE key = ?1), 0) + 1,
        {NOW}, {NOW}, {NOW} + ?4, ?5)
ON CONFLICT (key) DO UPDATE SET
    holder = excluded.holder, secret = excluded.secret,
    token = max(leases.token + 1, excluded.token),
    acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at, meta = excluded.meta
WHERE leases.holder IS NULL OR leases.expires_at <= excluded.acquired_at
RETURNING token, acquired_at, expires_at
"""
COUNT = """INSERT INTO lease_tokens (key, token) VALUES (?, ?)
           ON CONFLICT (key) DO UPDATE SET token = max(lease_tokens.token, excluded.token)"""
ACQUIRED = "INSERT INTO lease_events (key, kind, token, holder, at, detail) " \
           "VALUES (?, 'acquired', ?, ?, ?, ?)"
RENEW = f"""
UPDATE leases SET renewed_at = {NOW}, expires_at = {NOW} + :ttl
WHERE key = :key AND secret = :secret AND holder IS NOT NULL AND token = :token
  AND expires_at > {NOW}
"""
RELEASED = f"""
INSERT INTO lease_events (key, kind, token, holder, at, detail)
SELECT key, 'released', token, holder, {NOW}, '{{}}' FROM leases
WHERE key = ? AND secret = ? AND holder IS NOT NULL AND token = ?
"""
RELEASE = "UPDATE leases SET holder = NULL, secret = NULL WHERE key = ?"
SELECT = f"SELECT key, holder, token, acquired_at, renewed_at, expires_at, meta, {NOW} FROM leases"
TRIM_EVERY = 16
TRIM_EVENTS = """
DELETE FROM lease_events WHERE key = :key AND id <= (
    SELECT id FROM lease_events WHERE key = :key ORDER BY id DESC LIMIT 1 OFFSET :keep)
"""
HISTORY = """
SELECT key, kind, token, holder, at, detail FROM (
    SELECT * FROM lease_events WHERE key = :key ORDER BY id DESC LIMIT :limit
) ORDER BY id
"""


class OldSqliteStore:
    """The old version's steps on one connection (autocommit, WAL,
    ``synchronous=FULL``, each write one ``BEGIN IMMEDIATE`` transaction)."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, timeout=10, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA busy_timeout=10000")
        if not self._schema_is_current():
            with self._write():
                self._ensure_schema()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any error (as the old
        store's ``_transaction``)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _schema_is_current(self) -> bool:
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(leases)")}
        tables = dict(self.conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        return "secret" in columns and "lease_tokens" in tables \
            and "AUTOINCREMENT" not in (tables.get("lease_events") or "AUTOINCREMENT").upper()

    def _ensure_schema(self) -> None:
        conn = self.conn
        old = {row[1] for row in conn.execute("PRAGMA table_info(leases)")}
        had_counters = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                    "AND name = 'lease_tokens'").fetchone() is not None
        events = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' "
                              "AND name = 'lease_events'").fetchone()
        if events is not None and "AUTOINCREMENT" in events[0].upper():
            for statement in REBUILD_EVENTS:
                conn.execute(statement)
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        if old and "secret" not in old:
            conn.execute(MIGRATE[0])
        if old and not had_counters:
            conn.execute(MIGRATE[1])

    def acquire(self, key: str, holder: str, secret: str, ttl: float,
                meta: dict[str, Any] | None = None) -> dict[str, Any]:
        meta_json = json.dumps(meta or {}, default=str)
        with self._write() as conn:
            before = conn.execute(SELECT + " WHERE key = ?", (key,)).fetchone()
            row = conn.execute(ACQUIRE, (key, holder, secret, ttl, meta_json)).fetchone()
            if row is None:
                return {"granted": False, "holder": before[1], "token": before[2]}
            token, acquired, _expires = row
            detail = '{"meta": ' + meta_json
            if before is not None and before[1] is not None:
                detail += f', "{TOOK_OVER}": ' + json.dumps(
                    {"token": before[2], "holder": before[1]}, default=str)
            conn.execute(COUNT, (key, token))
            conn.execute(ACQUIRED, (key, token, holder, acquired, detail + "}"))
            if token % TRIM_EVERY == 0:
                conn.execute(TRIM_EVENTS, {"key": key, "keep": HISTORY_LIMIT})
            return {"granted": True, "holder": holder, "token": token}

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        with self._write() as conn:
            return conn.execute(RENEW, {"key": key, "secret": secret, "token": token,
                                        "ttl": ttl}).rowcount == 1

    def release(self, key: str, secret: str, token: int) -> bool:
        with self._write() as conn:
            if conn.execute(RELEASED, (key, secret, token)).rowcount != 1:
                return False
            conn.execute(RELEASE, (key,))
            return True

    def history(self, key: str, limit: int = HISTORY_LIMIT) -> list[list[Any]]:
        rows = self.conn.execute(HISTORY, {"key": key, "limit": limit}).fetchall()
        return [[kind, token, holder, json.loads(detail)] for _k, kind, token, holder, _at, detail
                in rows]

    def close(self) -> None:
        self.conn.close()


def main() -> None:
    """One command per stdin line, one JSON answer per stdout line."""
    store: OldSqliteStore | None = None
    for line in sys.stdin:
        cmd, *args = line.split()
        try:
            if cmd == "open":
                store = OldSqliteStore(args[0])
                answer: Any = True
            elif cmd == "exit":
                break
            else:
                assert store is not None, "open a database first"
                if cmd == "acquire":
                    answer = store.acquire(args[0], args[1], args[2], float(args[3]))
                elif cmd == "renew":
                    answer = store.renew(args[0], args[1], int(args[2]), float(args[3]))
                elif cmd == "release":
                    answer = store.release(args[0], args[1], int(args[2]))
                elif cmd == "history":
                    answer = store.history(args[0])
                else:
                    raise ValueError(f"unknown command {cmd!r}")
            print(json.dumps({"ok": answer}), flush=True)
        except Exception as exc:  # the test reads the error, the process lives on
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    if store is not None:
        store.close()


if __name__ == "__main__":
    main()
