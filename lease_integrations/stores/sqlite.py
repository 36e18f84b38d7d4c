"""The embedded default: one SQLite file shared by every process on a host.

WAL lets readers run beside the writer; every write is one ``BEGIN
IMMEDIATE`` transaction (the write lock is taken up front, so two processes
never both read "free" and both write); ``busy_timeout`` makes contention a
short wait rather than an error; ``synchronous=FULL`` because a token counter
that went backwards after a power cut would issue a token twice. Time is
SQLite's own clock (``julianday('now')``), the one host clock every process
on the host shares.

The token counter lives in its own table (``lease_tokens``), apart from the
lease row, so an operator's ``DELETE FROM leases WHERE key = ...`` never
restarts a key's tokens: a trigger writes a deleted row's token there, and
the next grant starts above it. Each token is also floored by the host's
clock in microseconds (``max(last + 1, now_us)``, as on the networked
stores), so a deleted file, or one restored from a backup, never grants a
token again. While the row
exists its token is the key's last one, so grants no longer write the
counter (older versions still do; it stays a floor). The owner secret is a
column of the lease row that no read selects.

An acquire is ``BEGIN IMMEDIATE``, one upsert, ``COMMIT``: one page in the
WAL, as a one-row write. Its "acquired" event is written into the lease row
by that upsert (``event_token``, ``event_detail``: atomic with the grant)
and moved into ``lease_events`` by triggers in the transaction of the key's
next change (the next event, the next grant, a break, a DELETE of the row),
before that change's own event; ``history()`` reads both. A release writes
both events and the row: three pages, as before.

A database made by an older version (no ``secret`` column, no counter table,
a history table with AUTOINCREMENT, no event columns or triggers) is
migrated on connect, its counters and events carried over. Processes of the
previous version can keep running on the migrated file (a rolling upgrade,
``tests/upgrade``): they name their columns, still write the counter and the
history table, and the triggers, being part of the file, move a pending
event before their own. Their ``history()`` does not see a pending event
(the newest grant's, until the key's next change).
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..core.config import default_state_dir, parse_url, query_options
from ..core.errors import ConfigurationError, CorruptRecord, StoreUnavailable
from ..core.record import (
    AcquireResult,
    LeaseRecord,
    meta_as_stored,
    meta_from_json,
    meta_to_json,
    parse_field,
)
from ..core.store import (
    HISTORY_LIMIT,
    TOOK_OVER,
    EventKind,
    LeaseEvent,
    LeaseStore,
    RecordList,
    RenewItem,
    checked_event,
    readable_events,
    readable_records,
)

NOW = "((julianday('now') - 2440587.5) * 86400.0)"

LEASES = """
CREATE TABLE IF NOT EXISTS leases (
    key         TEXT PRIMARY KEY,
    holder      TEXT,
    secret      TEXT,
    token       INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    renewed_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    meta        TEXT NOT NULL DEFAULT '{}',
    event_token  INTEGER,
    event_detail TEXT
)"""
EVENTS = """
CREATE TABLE IF NOT EXISTS lease_events (
    id     INTEGER PRIMARY KEY,
    key    TEXT NOT NULL,
    kind   TEXT NOT NULL,
    token  INTEGER NOT NULL,
    holder TEXT,
    at     REAL NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
)"""
EVENTS_BY_KEY = "CREATE INDEX IF NOT EXISTS lease_events_by_key ON lease_events (key, id)"
TOKENS = """
CREATE TABLE IF NOT EXISTS lease_tokens (
    key   TEXT PRIMARY KEY,
    token INTEGER NOT NULL
)"""
# A grant's "acquired" event is written into its lease row (``event_token``,
# ``event_detail``), by the grant's own statement: atomic with the grant and
# one WAL page (the row's) instead of three (the row, the history table and
# its index). The event is pending while ``event_token = token`` and is moved
# into ``lease_events`` by the triggers below, in the transaction of the
# key's next change, before anything that comes after it: the next event
# (a release, a break, a loss), the next grant (a takeover, or an older
# version's acquire), or a DELETE of the row. The triggers live in the file,
# so an older version's statements move it as well, and in order.
# history() reads lease_events and the pending event.
#
# The counter is written when a lease row is deleted, not on every grant:
# while the row exists its token is the key's last token (every grant, by
# any version, raises it), so only a DELETE could lose it, and the trigger
# keeps it then, in the deleting transaction, whoever deletes (an operator's
# shell, an older version's process).
PENDING_EVENT = "SELECT key, 'acquired', token, holder, acquired_at, event_detail FROM leases"
#: Before any other event of a key: move the key's pending "acquired" event
#: first (its id is taken before the new event's). Not for "acquired" events,
#: which are the moves themselves (and an older version's grant, whose update
#: already moved the event it replaced).
MOVE_BEFORE_EVENT = f"""
CREATE TRIGGER IF NOT EXISTS lease_events_move_pending BEFORE INSERT ON lease_events
WHEN NEW.kind <> 'acquired' BEGIN
    INSERT INTO lease_events (key, kind, token, holder, at, detail)
    {PENDING_EVENT} WHERE key = NEW.key AND event_token = token;
    UPDATE leases SET event_token = NULL WHERE key = NEW.key AND event_token = token;
END"""
#: A change of the row's holder or token (a takeover, a break, an older
#: version's grant or release) moves the event the row held. A grant by this
#: version sets a new pending event in the same update (``event_token`` = the
#: new token), which the second statement leaves alone.
MOVE_ON_CHANGE = """
CREATE TRIGGER IF NOT EXISTS leases_move_pending AFTER UPDATE OF token, holder ON leases
WHEN old.event_token = old.token BEGIN
    INSERT INTO lease_events (key, kind, token, holder, at, detail)
    VALUES (old.key, 'acquired', old.token, old.holder, old.acquired_at, old.event_detail);
    UPDATE leases SET event_token = NULL WHERE key = old.key AND event_token = old.token;
END"""
#: A deleted row keeps its token in the counter, and its pending event.
KEEP_ON_DELETE = """
CREATE TRIGGER IF NOT EXISTS leases_keep_on_delete AFTER DELETE ON leases BEGIN
    INSERT INTO lease_tokens (key, token) VALUES (old.key, old.token)
    ON CONFLICT (key) DO UPDATE SET token = max(lease_tokens.token, excluded.token);
    INSERT INTO lease_events (key, kind, token, holder, at, detail)
    SELECT old.key, 'acquired', old.token, old.holder, old.acquired_at, old.event_detail
    WHERE old.event_token = old.token;
END"""
TRIGGERS = {"lease_events_move_pending": MOVE_BEFORE_EVENT,
            "leases_move_pending": MOVE_ON_CHANGE, "leases_keep_on_delete": KEEP_ON_DELETE}
SCHEMA = (LEASES, EVENTS, EVENTS_BY_KEY, TOKENS, *TRIGGERS.values())
#: Run once on a database an older version made: the secret column, and the
#: counters carried over from the lease rows into the counter table.
MIGRATE = [
    "ALTER TABLE leases ADD COLUMN secret TEXT",
    """INSERT INTO lease_tokens (key, token) SELECT key, token FROM leases WHERE true
       ON CONFLICT (key) DO UPDATE SET token = max(lease_tokens.token, excluded.token)""",
]
#: The pending-event columns, added to a database made before them
#: (nullable, no default: older versions name their columns, never see these).
ADD_EVENT_COLUMNS = [
    "ALTER TABLE leases ADD COLUMN event_token INTEGER",
    "ALTER TABLE leases ADD COLUMN event_detail TEXT",
]
#: The history table without AUTOINCREMENT: that kept a row in sqlite_sequence
#: that every event rewrote, one more page in every write transaction's WAL
#: (a page costs about 8 % of a one-row write). A new event's id is still
#: above every id in the table, so a key's events keep their order. Versions
#: that made the old table insert into this one unchanged.
REBUILD_EVENTS = [
    "ALTER TABLE lease_events RENAME TO lease_events_old",
    "DROP INDEX IF EXISTS lease_events_by_key",
    EVENTS,
    "INSERT INTO lease_events SELECT id, key, kind, token, holder, at, detail FROM lease_events_old",
    "DROP TABLE lease_events_old",
    "DELETE FROM sqlite_sequence WHERE name IN ('lease_events', 'lease_events_old')",
    EVENTS_BY_KEY,
]

# The next token: one above the row's own token (every grant raised it) and
# the counter table's (where the trigger put the token of a deleted row, and
# where older versions still write every grant), and never below :floor, the
# host's clock in microseconds (read under the write lock): a file deleted,
# or restored from a backup, resumes above every token granted before. The same statement writes
# the grant's "acquired" event into the row: :detail is its detail up to the meta
# (the caller's), and a grant over a row that still names a holder took over
# an expired lease, which the detail then names (the row as it was is at
# hand in the update, so no read before). Granted: the token and the times
# (the caller knows the rest); busy: nothing (the caller then reads the row).
ACQUIRE = f"""
INSERT INTO leases (key, holder, secret, token, acquired_at, renewed_at, expires_at, meta,
                    event_token, event_detail)
VALUES (:key, :holder, :secret,
        max(coalesce((SELECT token FROM lease_tokens WHERE key = :key), 0) + 1, :floor),
        {NOW}, {NOW}, {NOW} + :ttl, :meta,
        max(coalesce((SELECT token FROM lease_tokens WHERE key = :key), 0) + 1, :floor),
        :detail || '}}')
ON CONFLICT (key) DO UPDATE SET
    holder = excluded.holder, secret = excluded.secret,
    token = max(leases.token + 1, excluded.token),
    acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at, meta = excluded.meta,
    event_token = max(leases.token + 1, excluded.token),
    event_detail = CASE WHEN leases.holder IS NULL THEN excluded.event_detail
        ELSE :detail || ', "{TOOK_OVER}": {{"token": ' || leases.token
                || ', "holder": ' || json_quote(leases.holder) || '}}}}' END
WHERE leases.holder IS NULL OR leases.expires_at <= excluded.acquired_at
RETURNING token, acquired_at, expires_at
"""
RENEW = f"""
UPDATE leases SET renewed_at = {NOW}, expires_at = {NOW} + :ttl
WHERE key = :key AND secret = :secret AND holder IS NOT NULL AND token = :token
  AND expires_at > {NOW}
"""
# Release: the event is written first, from the row the secret matches (so
# it names the public holder and the grant's meta, which places the event in
# its DAG on the Leases page, and its row count says whether the caller owns
# the lease), then the row is released: two statements, not a read and two.
RELEASED = f"""
INSERT INTO lease_events (key, kind, token, holder, at, detail)
SELECT key, 'released', token, holder, {NOW},
       CASE WHEN NOT json_valid(meta) THEN '{{}}'
            WHEN json_type(meta) = 'object' THEN '{{"meta": ' || meta || '}}' ELSE '{{}}' END
FROM leases
WHERE key = ? AND secret = ? AND holder IS NOT NULL AND token = ?
"""
RELEASE = "UPDATE leases SET holder = NULL, secret = NULL WHERE key = ?"
BREAK = "UPDATE leases SET holder = NULL, secret = NULL WHERE key = ?"
SELECT = f"SELECT key, holder, token, acquired_at, renewed_at, expires_at, meta, {NOW} FROM leases"
ADD_EVENT = f"""
INSERT INTO lease_events (key, kind, token, holder, at, detail)
VALUES (:key, :kind, :token, :holder, {NOW}, :detail)
"""
TRIM_EVERY = 16
TRIM_EVENTS = """
DELETE FROM lease_events WHERE key = :key AND id <= (
    SELECT id FROM lease_events WHERE key = :key ORDER BY id DESC LIMIT 1 OFFSET :keep)
"""
# The key's newest events: lease_events and, newest of all, the pending one.
HISTORY = f"""
SELECT key, kind, token, holder, at, detail FROM (
    SELECT id, key, kind, token, holder, at, detail FROM lease_events WHERE key = :key
    UNION ALL
    SELECT 9223372036854775807, {PENDING_EVENT.removeprefix("SELECT ")}
    WHERE key = :key AND event_token = token
    ORDER BY 1 DESC LIMIT :limit
) ORDER BY id
"""
#: An "acquired" event recorded by hand comes after the pending one.
MOVE_PENDING = [
    f"INSERT INTO lease_events (key, kind, token, holder, at, detail) {PENDING_EVENT} "
    "WHERE key = :key AND event_token = token",
    "UPDATE leases SET event_token = NULL WHERE key = :key AND event_token = token",
]


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def _record(row: tuple[Any, ...]) -> LeaseRecord:
    key, holder, token, acquired, renewed, expires, meta, now = row
    if holder is not None and not isinstance(holder, str):
        raise CorruptRecord(key, "holder", f"not text: {type(holder).__name__}")
    return LeaseRecord(key, holder, parse_field(key, "token", _int, token),
                       parse_field(key, "acquired_at", _dt, acquired),
                       parse_field(key, "renewed_at", _dt, renewed),
                       parse_field(key, "expires_at", _dt, expires),
                       _dt(now), parse_field(key, "meta", meta_from_json, meta))


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}"[:80])
    return value


def path_from_url(url: str) -> Path:
    """The database file a ``sqlite:`` URL names: ``sqlite:///abs/path.db`` and
    SQLAlchemy's ``sqlite:////abs/path.db`` are absolute, ``sqlite:rel.db`` is
    relative to the working directory.

    ``sqlite:///name.db`` (three slashes, one name) is refused: SQLAlchemy
    reads it as ``name.db`` in the working directory, this library as
    ``/name.db`` in the filesystem root, so whoever wrote it most likely
    meant the other one. A file in the root is still ``sqlite:////name.db``."""
    parts = parse_url(url)
    raw = (parts.netloc + parts.path) if parts.netloc not in ("", "localhost") else parts.path
    if not raw:
        raise ConfigurationError(
            f"SQLite URL {url!r} names no file; use sqlite:///absolute/path.db "
            "or sqlite:relative/path.db"
        )
    if raw.startswith("//"):
        return Path("/" + raw.lstrip("/"))
    path = Path(raw)
    if path.is_absolute() and path.parent == Path(path.anchor) and parts.netloc == "":
        name = path.name
        raise ConfigurationError(
            f"SQLite URL {url!r} names {str(path)!r}, a file in the filesystem root, which is "
            f"rarely meant (SQLAlchemy reads three slashes as relative). For {name!r} in the "
            f"working directory write sqlite:{name}; for an absolute path "
            f"sqlite:///dir/{name} (or sqlite:////dir/{name}); for the root itself "
            f"sqlite:////{name}"
        )
    return path


class SqliteStore(LeaseStore):
    """Leases in one SQLite file; safe across processes on one host (not
    across hosts: SQLite's locking does not work over network filesystems)."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0,
                 create_parent: bool = False) -> None:
        self.path = Path(path)
        self.url = f"sqlite://{self.path}"
        self.busy_timeout = busy_timeout
        if create_parent:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.parent.is_dir():
            raise ConfigurationError(
                f"directory {str(self.path.parent)!r} for the SQLite store {self.url!r} does not "
                "exist; create it first (a typo here would silently split your leases in two)"
            )
        self._mutex = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        with self._transaction(immediate=False) as conn:
            current = self._schema_is_current(conn)
        if not current:
            with self._transaction() as conn:
                self._ensure_schema(conn)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteStore:
        opts = query_options(parse_url(url), {"timeout": float}, url)
        path = path_from_url(url)
        default = path.parent == default_state_dir()
        busy = float(options.pop("busy_timeout", opts.get("timeout", 10.0)))
        if options:
            raise ConfigurationError(f"unknown SQLite store options {sorted(options)}")
        return cls(path, busy_timeout=busy, create_parent=default)

    def url_elsewhere(self, url: str) -> str:
        """Absolute: the keeper resolves nothing against its own working directory."""
        query = urlsplit(url).query
        return f"sqlite:///{os.path.abspath(self.path)}" + (f"?{query}" if query else "")

    # -- connection -------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross a fork (Airflow and Prefect workers fork).
        if self._conn is None or self._pid != os.getpid():
            try:
                conn = sqlite3.connect(self.path, timeout=self.busy_timeout,
                                       isolation_level=None, check_same_thread=False)
                self._switch_to_wal(conn)
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"cannot open SQLite database: {exc}", url=self.url) from exc
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _switch_to_wal(self, conn: sqlite3.Connection) -> None:
        """Connections switching a new file to WAL at once each take a read
        lock, then ask to upgrade it; SQLite refuses all but one at once,
        without calling the busy handler (waiting there could deadlock). The
        winner's switch takes milliseconds, so retry until busy_timeout."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    @contextmanager
    def _transaction(self, immediate: bool = True) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            conn = self._connection()
            try:
                if immediate:
                    conn.execute("BEGIN IMMEDIATE")
                yield conn
                if conn.in_transaction:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"SQLite error: {exc}", url=self.url) from exc
            finally:
                # Whatever did not commit (an error, a Ctrl-C landing anywhere
                # after BEGIN) rolls back: an open transaction would keep the
                # file write-locked for every other connection.
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")

    @staticmethod
    def _schema_is_current(conn: sqlite3.Connection) -> bool:
        """True when every table, column and the trigger exist: connect then
        takes no write lock (another process may hold it for a while)."""
        columns = {row[1] for row in conn.execute("PRAGMA table_info(leases)")}
        tables = dict(conn.execute("SELECT name, sql FROM sqlite_master "
                                   "WHERE type IN ('table', 'trigger')"))
        return {"secret", "event_token", "event_detail"} <= columns \
            and "lease_tokens" in tables and set(TRIGGERS) <= set(tables) \
            and "AUTOINCREMENT" not in (tables.get("lease_events") or "AUTOINCREMENT").upper()

    @staticmethod
    def _ensure_schema(conn: sqlite3.Connection) -> None:
        """Create the tables, or migrate a database an older version made
        (inside the caller's write transaction, so racing processes migrate
        once). ``executescript`` would commit on its own: run statements one
        by one instead. Every step leaves what older versions read and write
        in place (they name their columns, and write the counter and the
        history table as before), so their processes keep working beside
        this one during a rolling upgrade."""
        old = {row[1] for row in conn.execute("PRAGMA table_info(leases)")}
        had_counters = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                    "AND name = 'lease_tokens'").fetchone() is not None
        events = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' "
                              "AND name = 'lease_events'").fetchone()
        if events is not None and "AUTOINCREMENT" in events[0].upper():
            for statement in REBUILD_EVENTS:
                conn.execute(statement)
        for statement in SCHEMA:
            conn.execute(statement)
        if old and "secret" not in old:
            conn.execute(MIGRATE[0])
        if old and not had_counters:
            conn.execute(MIGRATE[1])
        if old and "event_token" not in old:
            for statement in ADD_EVENT_COLUMNS:
                conn.execute(statement)

    def _add_event(self, conn: sqlite3.Connection, key: str, kind: EventKind, token: int,
                   holder: str | None, detail: Mapping[str, Any] | None = None) -> None:
        if kind == "acquired":  # the triggers move the pending event before any other kind
            for statement in MOVE_PENDING:
                conn.execute(statement, {"key": key})
        conn.execute(ADD_EVENT, {"key": key, "kind": kind, "token": token, "holder": holder,
                                 "detail": json.dumps(dict(detail or {}), default=str)})
        # Trimming on every write cost as much as the write itself; trimming on
        # every TRIM_EVERY-th grant still bounds a key's rows (each token makes
        # at most three events), and reads never return more than the limit.
        if kind == "acquired" and token % TRIM_EVERY == 0:
            conn.execute(TRIM_EVENTS, {"key": key, "keep": HISTORY_LIMIT})

    # -- protocol ---------------------------------------------------------------
    def acquire(self, key: str, holder: str, secret: str, ttl: float,
                 meta: Mapping[str, Any]) -> AcquireResult:
        meta_json = meta_to_json(meta if type(meta) is dict else dict(meta))
        detail = '{"meta": ' + meta_json
        with self._transaction() as conn:
            row = conn.execute(ACQUIRE, {"key": key, "holder": holder, "secret": secret,
                                         "ttl": ttl, "meta": meta_json, "detail": detail,
                                         "floor": time.time_ns() // 1000}).fetchone()
            if row is None:
                # Busy: the row as it is, in the same transaction (a row that
                # cannot be parsed raises CorruptRecord here).
                before = conn.execute(SELECT + " WHERE key = ?", (key,)).fetchone()
                return AcquireResult(False, _record(before) if before else None)
            token, acquired, expires = row
            if token % TRIM_EVERY == 0:
                conn.execute(TRIM_EVENTS, {"key": key, "keep": HISTORY_LIMIT})
        now = _dt(acquired)
        return AcquireResult(True, LeaseRecord(key, holder, token, now, now, _dt(expires),
                                               now, meta_as_stored(meta, meta_json)))

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        with self._transaction() as conn:
            cur = conn.execute(RENEW, {"key": key, "secret": secret, "token": token, "ttl": ttl})
            return cur.rowcount == 1

    batch_renewals = True

    def renew_many(self, items: Sequence[RenewItem]) -> list[bool]:
        """The heartbeat's batch in one write transaction: one commit (one
        fsync) for every lease due in the tick, each row judged by RENEW."""
        if not items:
            return []
        with self._transaction() as conn:
            return [conn.execute(RENEW, {"key": key, "secret": secret, "token": token,
                                         "ttl": ttl}).rowcount == 1
                    for key, secret, token, ttl in items]

    def release(self, key: str, secret: str, token: int) -> bool:
        with self._transaction() as conn:
            if conn.execute(RELEASED, (key, secret, token)).rowcount != 1:
                return False
            conn.execute(RELEASE, (key,))
            return True

    def get(self, key: str) -> LeaseRecord | None:
        with self._transaction(immediate=False) as conn:
            row = conn.execute(SELECT + " WHERE key = ?", (key,)).fetchone()
        return _record(row) if row else None

    def list(self, prefix: str = "") -> RecordList:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self._transaction(immediate=False) as conn:
            rows = conn.execute(SELECT + " WHERE key LIKE ? ESCAPE '\\' ORDER BY key",
                                (pattern,)).fetchall()
        # LIKE is case-insensitive for ASCII in SQLite: filter exactly here.
        return readable_records([r for r in rows if r[0].startswith(prefix)], _record)

    def force_release(self, key: str, by: str, token: int | None = None) -> LeaseRecord | None:
        # One BEGIN IMMEDIATE transaction: no other write can come between
        # the read that checks the token and the break.
        with self._transaction() as conn:
            row = conn.execute(SELECT + " WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            before = _record(row)
            if token is not None and (before.token != token or before.holder is None):
                return None
            conn.execute(BREAK, (key,))
            self._add_event(conn, key, "broken", before.token, before.holder,
                            {"by": by, "meta": before.meta})
            return before

    def history(self, key: str, limit: int = 50) -> builtins.list[LeaseEvent]:
        with self._transaction(immediate=False) as conn:
            rows = conn.execute(HISTORY, {"key": key, "limit": min(limit, HISTORY_LIMIT)}).fetchall()
        return readable_events(rows, lambda r: checked_event(
            r[0], r[1], r[2], r[3], parse_field(r[0], "event at", _dt, r[4]), r[5]))

    def record_event(self, key: str, kind: EventKind, holder: str | None, token: int,
                     detail: Mapping[str, Any] | None = None) -> None:
        with self._transaction() as conn:
            self._add_event(conn, key, kind, token, holder, detail)

    def close(self) -> None:
        with self._mutex:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
