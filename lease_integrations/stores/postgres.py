"""PostgreSQL store (psycopg 3): one row per key, one statement per operation.

Expiry is judged on the server's ``clock_timestamp()``. Acquire is a single
``UPDATE … WHERE released-or-expired`` whose CTE also writes the history
event and which, when the lease is busy, returns the current row: one round
trip whether granted or busy. A key's first acquire (no row yet) runs the
``INSERT … ON CONFLICT`` form after it. Acquire, renew and release run
prepared at the libpq level (``_pg_exec``).

Tokens: ``max(last + 1, clock_timestamp() in microseconds)``, ``last`` being
the lease row's token, or when there is no row the key's counter in
``<table>_tokens``. Grants do not write the counter (it cost a quarter of a
one-row UPDATE on every acquire): triggers on the lease table write a row's
token into it when the row is deleted or the table truncated, in the same
transaction, so an operator's ``DELETE`` of a lease row never restarts a key's
tokens, independently of the clock. Whatever slips past the triggers (a
dropped and recreated table, an ``UPDATE`` lowering a token, a lost counter on
a promoted standby that had not replayed the last grants) is covered by the
clock floor alone, as on Redis and MongoDB. History: ``<table>_events``, keyed
by ``(key, id)``, ``id`` from its sequence, capped at ``HISTORY_LIMIT`` events
a key. The owner secret is a column no read selects.

Upgrades: a database an older version made is migrated on connect
(``migrate``: secret column, counters carried over, the history's key, the
triggers), and everything an older version still running beside this one
needs stays: the counter table (it still writes and reads it: the triggers
only raise counters), the event sequence (both versions' events interleave
in one order). A role that may not migrate the previous layout keeps working
on it, with a warning (``ensure_schema``).
Release and break notify waiters (``pg_notify``) in the same statement.

Round trips (one statement each, counted on the client): acquire 1, granted
or busy (a key's first acquire, or a busy row read from a snapshot older
than a writer the statement waited for, costs one more: rare), renew 1,
release 1, get 1, break 1.
Every call is bounded twice: ``statement_timeout`` on the server and a
client-side watchdog (see ``_pg_pool``) for a server that cannot answer.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any
from urllib.parse import urlunsplit

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ..core.config import mask_url, parse_url, query_options
from ..core.errors import ConfigurationError, StoreUnavailable
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
    EventKind,
    LeaseEvent,
    LeaseStore,
    RecordList,
    RenewItem,
    checked_event,
    readable_events,
    readable_records,
)
from ._pg_exec import Statement
from ._pg_listener import Listener
from ._pg_pool import Pool, watchdog

log = logging.getLogger("lease_integrations")

#: Table names: plain identifiers only, short enough for the "_events" suffix.
TABLE_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,49}")
#: libpq parameters passed through from the URL's query string.
LIBPQ_OPTIONS = ("host", "sslmode", "sslrootcert", "sslcert", "sslkey", "application_name",
                 "target_session_attrs")
OPTIONS: dict[str, type] = {"table": str, "connect_timeout": float, "statement_timeout": float,
                            **{name: str for name in LIBPQ_OPTIONS}}

SCHEMA = """
CREATE TABLE IF NOT EXISTS {t} (
    key         text PRIMARY KEY,
    holder      text,
    secret      text,
    token       bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    meta        jsonb NOT NULL DEFAULT '{{}}'
);
CREATE TABLE IF NOT EXISTS {e} (
    id     bigserial,
    key    text NOT NULL,
    kind   text NOT NULL,
    token  bigint NOT NULL,
    holder text,
    at     timestamptz NOT NULL,
    detail jsonb NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (key, id)
);
CREATE TABLE IF NOT EXISTS {c} (
    key   text PRIMARY KEY,
    token bigint NOT NULL
);
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS secret text;
INSERT INTO {c} (key, token) SELECT key, token FROM {t}
ON CONFLICT (key) DO UPDATE SET token = GREATEST({c}.token, excluded.token);
"""

# The counter is written when a lease row goes, not on every grant: an
# operator's DELETE (or TRUNCATE) of lease rows leaves each key's last token in
# ``<table>_tokens``, in the deleting transaction, and a key's first acquire
# (ACQUIRE_NEW) floors its token by it. SECURITY DEFINER, so a role allowed to
# delete lease rows need not be allowed to write the counters; the search_path
# is pinned to the tables' schema (``{schema}``), pg_temp last, as PostgreSQL
# advises for such functions. A trigger function cannot be called directly.
KEEP_TOKENS = """
CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = {schema}, pg_temp AS $keep$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO {c} AS c (key, token) VALUES (OLD.key, OLD.token)
        ON CONFLICT (key) DO UPDATE SET token = GREATEST(c.token, excluded.token);
        RETURN OLD;
    END IF;
    INSERT INTO {c} AS c (key, token) SELECT key, token FROM {t}
    ON CONFLICT (key) DO UPDATE SET token = GREATEST(c.token, excluded.token);
    RETURN NULL;
END $keep$;
DROP TRIGGER IF EXISTS lease_keep_tokens_on_delete ON {t};
CREATE TRIGGER lease_keep_tokens_on_delete AFTER DELETE ON {t}
    FOR EACH ROW EXECUTE FUNCTION {fn}();
DROP TRIGGER IF EXISTS lease_keep_tokens_on_truncate ON {t};
CREATE TRIGGER lease_keep_tokens_on_truncate BEFORE TRUNCATE ON {t}
    FOR EACH STATEMENT EXECUTE FUNCTION {fn}();
"""
#: The triggers ``KEEP_TOKENS`` makes: ``ensure_schema`` migrates a table without them.
KEEP_TRIGGERS = ("lease_keep_tokens_on_delete", "lease_keep_tokens_on_truncate")

COLUMNS = "key, holder, token, acquired_at, renewed_at, expires_at, meta"

# Keeps the newest HISTORY_LIMIT events of a key: the statement's snapshot does
# not see the event it inserts, so it keeps one fewer of the older ones.
TRIM = """DELETE FROM {e} WHERE key = %(key)s AND EXISTS (SELECT 1 FROM {changed})
    AND id <= (SELECT id FROM {e} WHERE key = %(key)s ORDER BY id DESC
               OFFSET %(keep)s LIMIT 1)"""

# The history event every grant writes besides the lease row, in the same
# statement. ``up`` carries the row as the statement's snapshot showed it
# (``old_holder``, ``old_token``; ACQUIRE_NEW joins the
# snapshot's row: a CTE's reads do not see the statement's own update): a
# grant over a row that still named a holder took over a lease that expired
# while held, and the event's ``took_over`` names it. The update only touches a
# row whose snapshot was free or expired, so the one race left is an expired
# holder releasing (or an operator breaking it) while this statement waits for
# the row: then the history shows that release and still this takeover, both
# true (the lease had expired, on the server's clock, when the statement
# began). No counter is written: see the module docstring.
def _grant_event(source: str, old: str) -> str:
    """The ``ev`` CTE: the event of the grant ``up`` made, its ``took_over``
    from ``old``'s holder and token, rows from ``source``."""
    return f"""ev AS (
    INSERT INTO {{e}} (key, kind, token, holder, at, detail)
    SELECT up.key, 'acquired', up.token, $2, up.t,
           CASE WHEN {old}holder IS NULL THEN $6::jsonb
                ELSE $6::jsonb || jsonb_build_object('took_over', jsonb_build_object(
                    'token', {old}token, 'holder', {old}holder)) END
    FROM {source}
)"""


# Acquire, in one statement, for a key whose row exists (every key after its
# first grant). The server spends most of a short statement setting up its
# plan (a node per CTE, subquery and expression), so the statement holds only
# what every acquire needs: ``o`` reads the row once from the statement's
# snapshot (with the server's clock), the update takes it if it is released or
# expired (judged on the row it locks, so a writer it waited for is re-checked)
# and the event is written; busy: ``o`` is the current row. The next token is
# floored by the row's own token and the server's clock (microseconds): while
# a row exists its token is at or above the key's counter (the counter only
# takes the tokens of rows that go), so the counter is read only when there is
# no row (ACQUIRE_NEW). Results come in binary (no timestamp formatting on the
# server, no parsing on the client): granted, token, now, expires_at, then for
# busy holder, acquired_at, renewed_at, meta. No row at all: ACQUIRE_NEW.
ACQUIRE = """
WITH o AS (
    SELECT holder, token, acquired_at, renewed_at, expires_at, meta, clock_timestamp() AS t
    FROM {t} WHERE key = $1
),
up AS (
    UPDATE {t} l SET holder = $2, secret = $3,
        token = GREATEST(l.token + 1, (extract(epoch FROM o.t) * 1000000)::bigint),
        acquired_at = o.t, renewed_at = o.t, expires_at = o.t + make_interval(secs => $4::float8),
        meta = $5::jsonb
    FROM o WHERE l.key = $1 AND (l.holder IS NULL OR l.expires_at <= o.t)
    RETURNING l.key, l.token, o.t, l.expires_at, o.holder AS old_holder, o.token AS old_token
),
""" + _grant_event("up", "up.old_") + """{trim}
SELECT up.token IS NOT NULL, coalesce(up.token, o.token), o.t,
       coalesce(up.expires_at, o.expires_at), o.holder, o.acquired_at, o.renewed_at, o.meta
FROM o LEFT JOIN up ON true
"""
# One acquire in TRIM_EVERY (chosen at random, so every key's history is
# trimmed however its acquires spread over processes) also trims the key's
# history: trimming on every acquire cost as much as the event insert, and
# reads return at most HISTORY_LIMIT events anyway.
TRIM_EVERY = 16
ACQUIRE_TRIM = f""",
trim AS (
    DELETE FROM {{e}} WHERE key = $1 AND EXISTS (SELECT 1 FROM up)
    AND id <= (SELECT id FROM {{e}} WHERE key = $1 ORDER BY id DESC
               OFFSET {HISTORY_LIMIT - 1} LIMIT 1)
)"""
# The first acquire of a key (or after an operator deleted its row): the
# upsert, floored by the key's counter (the last token of a deleted row) and
# the clock; a row made meanwhile by a racing acquire is taken only if it is
# already free.
ACQUIRE_NEW = """
WITH n AS (SELECT clock_timestamp() AS t),
up AS (
    INSERT INTO {t} AS l (key, holder, secret, token, acquired_at, renewed_at, expires_at, meta)
    SELECT $1, $2, $3, GREATEST(COALESCE((SELECT token FROM {c} WHERE key = $1), 0) + 1,
                                (extract(epoch FROM n.t) * 1000000)::bigint),
           n.t, n.t, n.t + make_interval(secs => $4::float8), $5::jsonb FROM n
    ON CONFLICT (key) DO UPDATE SET
        holder = excluded.holder, secret = excluded.secret,
        token = GREATEST(l.token + 1, excluded.token), acquired_at = excluded.acquired_at,
        renewed_at = excluded.renewed_at, expires_at = excluded.expires_at, meta = excluded.meta
    WHERE l.holder IS NULL OR l.expires_at <= excluded.acquired_at
    RETURNING l.key, l.token, l.acquired_at AS t, l.expires_at
),
""" + _grant_event("up LEFT JOIN {t} o ON o.key = up.key", "o.") + """
SELECT true, token, t, expires_at, NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::jsonb
FROM up
"""

RENEW = """
UPDATE {t} SET renewed_at = c.now, expires_at = c.now + make_interval(secs => $4::float8)
FROM (SELECT clock_timestamp() AS now) c
WHERE key = $1 AND secret = $2 AND holder IS NOT NULL AND token = $3::bigint
  AND expires_at > c.now
"""

# The heartbeat's batch: every lease of one tick in one statement, each row
# judged by the same conditions as RENEW; returns the positions renewed.
RENEW_MANY = """
UPDATE {t} l SET renewed_at = c.now, expires_at = c.now + make_interval(secs => b.ttl)
FROM (SELECT clock_timestamp() AS now) c,
     unnest(%(keys)s::text[], %(secrets)s::text[], %(tokens)s::bigint[], %(ttls)s::float8[])
         WITH ORDINALITY AS b(key, secret, token, ttl, i)
WHERE l.key = b.key AND l.secret = b.secret AND l.holder IS NOT NULL AND l.token = b.token
  AND l.expires_at > c.now
RETURNING b.i
"""

# The event names the public holder and the grant's meta (which places it in
# its DAG on the Leases page) as the statement's snapshot shows them: the
# row the secret matched (only that secret's own calls change the row between
# the snapshot and the update, and they never change the holder).
RELEASE = """
WITH r AS (
    UPDATE {t} SET holder = NULL, secret = NULL
    WHERE key = $1 AND secret = $2 AND holder IS NOT NULL AND token = $3::bigint
    RETURNING key, token
),
ev AS (
    INSERT INTO {e} (key, kind, token, holder, at, detail)
    SELECT r.key, 'released', r.token, o.holder, clock_timestamp(),
           CASE WHEN jsonb_typeof(o.meta) = 'object' THEN jsonb_build_object('meta', o.meta)
                ELSE '{{}}' END
    FROM r JOIN {t} o ON o.key = r.key
)
SELECT pg_notify({channel}, key) FROM r
"""

# With a token the break is conditional: the row is locked and checked in one
# statement (FOR UPDATE re-reads a row a concurrent acquire changed and
# re-checks it), so a new holder's lease is never broken on an old token.
BREAK = f"""
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
b AS (
    UPDATE {{t}} l SET holder = NULL, secret = NULL
    FROM (SELECT {COLUMNS} FROM {{t}} WHERE key = %(key)s
          AND (%(token)s::bigint IS NULL OR (token = %(token)s::bigint AND holder IS NOT NULL))
          FOR UPDATE) old
    WHERE l.key = old.key
    RETURNING old.key, old.holder, old.token, old.acquired_at, old.renewed_at,
              old.expires_at, old.meta
),
ev AS (
    INSERT INTO {{e}} (key, kind, token, holder, at, detail)
    SELECT key, 'broken', token, holder, now.t,
           CASE WHEN jsonb_typeof(meta) = 'object'
                THEN jsonb_build_object('by', %(by)s::text, 'meta', meta)
                ELSE jsonb_build_object('by', %(by)s::text) END FROM b, now
)
SELECT {COLUMNS}, now.t, pg_notify(%(channel)s, key)::text FROM b, now
"""

ADD_EVENT = f"""
WITH trim AS ({TRIM.format(e="{e}", changed="(SELECT 1) AS one")})
INSERT INTO {{e}} (key, kind, token, holder, at, detail)
VALUES (%(key)s, %(kind)s, %(token)s, %(holder)s, clock_timestamp(), %(detail)s)
"""

SELECT = f"SELECT {COLUMNS}, clock_timestamp() FROM {{t}}"
GET = SELECT + " WHERE key = %(key)s"
LIST = SELECT + ' WHERE starts_with(key, %(prefix)s) ORDER BY key COLLATE "C"'
HISTORY = """
SELECT key, kind, token, holder, at, detail FROM (
    SELECT * FROM {e} WHERE key = %(key)s ORDER BY id DESC LIMIT %(limit)s
) recent ORDER BY id
"""


def _record(row: tuple[Any, ...]) -> LeaseRecord:
    key, holder, token, acquired, renewed, expires, meta, now = row
    return LeaseRecord(key, holder, int(token), acquired, renewed, expires, now,
                       parse_field(key, "meta", meta_from_json, meta))


# Binary results of the hot statements: timestamptz is microseconds since
# 2000-01-01 UTC, bigint a big-endian integer, jsonb a version byte and text.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)


def _int(value: bytes | None) -> int:
    if value is None:  # the columns are NOT NULL
        raise ValueError("NULL")
    return int.from_bytes(value, "big", signed=True)


def _time(value: bytes | None) -> datetime:
    return PG_EPOCH + timedelta(microseconds=_int(value))


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _jsonb_meta(value: bytes | None) -> dict[str, Any]:
    return meta_from_json(None if value is None else value[1:])


def _jsonb(value: Mapping[str, Any]) -> Jsonb:
    return Jsonb(dict(value), dumps=partial(json.dumps, default=str))


def _conninfo_dict(conninfo: str, shown: str) -> dict[str, Any]:
    """libpq's reading of ``conninfo``, or a ConfigurationError naming what is
    wrong. psycopg's own error quotes the offending token whole, and that
    token is usually the password (``invalid percent-encoded token:
    "<password>"``): it must not reach a task log, so only the kind of
    problem is kept."""
    try:
        return psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        text = str(exc)
        if "space" in text:
            why = "a raw space (write it as %20)"
        elif "percent-encoded" in text:
            why = ("a bad percent-escape ('%' must start %XX with two hex digits; "
                   "a literal '%' is written %25)")
        else:
            why = "text libpq cannot read"
        raise ConfigurationError(
            f"PostgreSQL URL {shown!r}: its user name, password, host or database has {why}; "
            "percent-encode them (urllib.parse.quote(password, safe=''))") from None


class PostgresStore(LeaseStore):
    """Leases in a PostgreSQL table shared by every worker that can reach it."""

    notifies = True

    def __init__(self, conninfo: str, *, table: str = "leases", connect_timeout: float = 5.0,
                 statement_timeout: float = 5.0, libpq: Mapping[str, str] | None = None,
                 url: str | None = None) -> None:
        self.url = mask_url(url or conninfo)
        if not isinstance(table, str) or not TABLE_PATTERN.fullmatch(table):
            raise ConfigurationError(
                f"PostgreSQL table name {table!r} in {self.url!r} must be a plain identifier: "
                "a letter or underscore, then letters, digits or underscores, at most 50 "
                "characters")
        for name, value in (("connect_timeout", connect_timeout),
                            ("statement_timeout", statement_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 < value < 3600:
                raise ConfigurationError(
                    f"{name}={value!r} for {self.url!r} must be between 0 and 3600 seconds")
        self._conninfo = conninfo
        self.table = table
        self.channel = f"{table}_released"
        self.connect_timeout = float(connect_timeout)
        self.statement_timeout = float(statement_timeout)
        # The client-side bound: the server's own timeout plus time to say so.
        self.call_timeout = self.statement_timeout + 1.0
        self._libpq = dict(libpq or {})
        self._secret = str(_conninfo_dict(conninfo, self.url).get("password") or "")
        self._sql = self._compose()
        self._pool = Pool(self._connect)
        self._listener: tuple[int, Listener] | None = None
        self._listener_lock = threading.Lock()
        self._busy_since: dict[tuple[int | None, str], float] = {}
        self.ensure_schema()

    # -- construction ------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStore:
        """``postgresql://user:pw@host:port/db?table=leases&connect_timeout=5&
        statement_timeout=5`` (seconds), plus libpq's ssl* options."""
        parts = parse_url(url)
        opts = query_options(parts, OPTIONS, url)
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown PostgreSQL store options {sorted(unknown)} for {mask_url(url)!r} "
                f"(known: {', '.join(sorted(OPTIONS))})")
        opts.update(options)
        base = urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))
        libpq = {k: str(opts.pop(k)) for k in LIBPQ_OPTIONS if k in opts}
        return cls(base, libpq=libpq, url=url, **opts)  # type: ignore[arg-type]

    @classmethod
    def from_engine(cls, engine: Any, **options: Any) -> PostgresStore:
        """Reuse a SQLAlchemy engine's connection settings (an Airflow SQL
        connection, say). The store opens its own autocommit connections with
        its own timeouts, so heartbeats never wait for a slot in the engine's
        pool nor join a transaction of the caller."""
        dialect = getattr(getattr(engine, "dialect", None), "name", None)
        if dialect != "postgresql":
            raise ConfigurationError(
                f"PostgresStore.from_engine needs a PostgreSQL engine, got dialect {dialect!r}")
        url = engine.url
        query = {k: v for k, v in url.query.items() if k in OPTIONS}
        raw = url.set(drivername="postgresql", query=query).render_as_string(hide_password=False)
        return cls.from_url(raw, **options)

    def _compose(self) -> dict[str, str]:
        names = {"t": sql.Identifier(self.table), "e": sql.Identifier(f"{self.table}_events"),
                 "c": sql.Identifier(f"{self.table}_tokens")}
        queries = {"schema": SCHEMA, "renew_many": RENEW_MANY, "break": BREAK,
                   "add_event": ADD_EVENT, "get": GET, "list": LIST, "history": HISTORY}
        out = {name: sql.SQL(text).format(**names).as_string(None)
               for name, text in queries.items()}
        out["listen"] = sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)).as_string(None)
        # The hot statements, run prepared at the libpq level (``_pg_exec``).
        hot = {**names, "trim": sql.SQL(""), "channel": sql.Literal(self.channel)}
        trim = {**hot, "trim": sql.SQL(ACQUIRE_TRIM).format(**names)}
        self._acquire, self._acquire_trim, self._acquire_new, self._renew, self._release = (
            Statement(sql.SQL(text).format(**fill).as_string(None))
            for text, fill in ((ACQUIRE, hot), (ACQUIRE, trim), (ACQUIRE_NEW, hot),
                               (RENEW, hot), (RELEASE, hot)))
        return out

    # -- connections -------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        try:
            params: dict[str, Any] = {
                "application_name": "lease_integrations", **self._libpq,
                "client_encoding": "UTF8",  # the hot statements send and read UTF-8
                "connect_timeout": max(2, math.ceil(self.connect_timeout)),
                "options": f"-c statement_timeout={int(self.statement_timeout * 1000)} "
                           "-c TimeZone=UTC",
            }
            return psycopg.connect(self._conninfo, autocommit=True, **params)
        except psycopg.Error as exc:
            raise self._unavailable("cannot connect to PostgreSQL", exc) from None

    def _unavailable(self, what: str, exc: BaseException) -> StoreUnavailable:
        detail = " ".join(str(exc).split())
        if len(self._secret) >= 4:  # libpq does not print it; belt and braces
            detail = detail.replace(self._secret, "***")
        if "password authentication failed" in detail:
            detail += "; check the user and password in the store URL"
        return StoreUnavailable(f"{what}: {detail}", url=self.url)

    def _exec(self, statement: Statement, params: Sequence[bytes]) -> Any:
        """One hot statement (``_pg_exec``) on a pooled connection, bounded
        and mapped to ``StoreUnavailable`` exactly as ``_call`` does."""
        # The same steps as _call's context managers, spelled out: they cost
        # a tenth of a fast statement.
        try:
            conn = self._pool.take()
            dog = watchdog()
            call = dog.start(conn.fileno(), self.call_timeout)
            try:
                result = statement.run(conn, params)
            except BaseException as exc:
                fired = dog.stop(call)
                self._pool.discard(conn)  # we do not know what state it was left in
                if fired and isinstance(exc, psycopg.OperationalError):
                    raise StoreUnavailable(
                        f"PostgreSQL did not answer within {self.call_timeout:g} s",
                        url=self.url) from exc
                raise
            dog.stop(call)
            self._pool.give(conn)
            return result
        except psycopg.errors.QueryCanceled as exc:
            raise self._unavailable(
                f"PostgreSQL statement_timeout ({self.statement_timeout:g} s) hit", exc) from None
        except psycopg.Error as exc:
            raise self._unavailable("PostgreSQL error", exc) from None

    def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return self._call(name, params)[0]

    def _call(self, name: str, params: Mapping[str, Any] | None = None
              ) -> tuple[list[tuple[Any, ...]], int]:
        """One statement on a pooled autocommit connection, bounded on both
        sides (statement_timeout on the server, the watchdog on the client).
        Returns the rows and the row count."""
        try:
            with self._pool.connection() as conn, \
                    watchdog().guard(conn.fileno(), self.call_timeout) as fired:
                try:
                    cur = conn.execute(self._sql[name], params)
                    return (cur.fetchall() if cur.description else []), cur.rowcount
                except psycopg.OperationalError as exc:
                    if fired():
                        raise StoreUnavailable(
                            f"PostgreSQL did not answer within {self.call_timeout:g} s",
                            url=self.url) from exc
                    raise
        except psycopg.errors.QueryCanceled as exc:
            raise self._unavailable(
                f"PostgreSQL statement_timeout ({self.statement_timeout:g} s) hit", exc) from None
        except psycopg.Error as exc:
            raise self._unavailable("PostgreSQL error", exc) from None

    # -- schema ---------------------------------------------------------------------
    def ensure_schema(self) -> None:
        """Create the tables on first use; a no-op (one read) when they are up
        to date, so a user without CREATE rights works on a migrated database.
        Otherwise ``migrate``; a role that may not migrate a layout the
        statements still run on (this version's grants write nothing that
        layout lacks) keeps working, with a warning (see ``migrate``)."""
        names = [sql.Identifier(n).as_string(None)
                 for n in (self.table, f"{self.table}_events", f"{self.table}_tokens",
                           f"{self.table}_events_by_key")]
        with self._pool.connection() as conn, watchdog().guard(conn.fileno(), self.call_timeout):
            try:
                # 0: no tables, or an older version's without the counter
                # table or the secret column (the statements need them);
                # 1: the previous layout (no counter triggers, events keyed
                # by id alone); 2: up to date.
                row = conn.execute(
                    "SELECT CASE WHEN NOT (to_regclass(%(t)s) IS NOT NULL "
                    "AND to_regclass(%(e)s) IS NOT NULL AND to_regclass(%(c)s) IS NOT NULL "
                    "AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%(t)s) "
                    "AND attname = 'secret' AND NOT attisdropped)) THEN 0 "
                    "WHEN to_regclass(%(ei)s) IS NULL AND (SELECT count(*) FROM pg_trigger "
                    "WHERE tgrelid = to_regclass(%(t)s) AND tgname = ANY(%(tg)s)) = 2 THEN 2 "
                    "ELSE 1 END",
                    {"t": names[0], "e": names[1], "c": names[2], "ei": names[3],
                     "tg": list(KEEP_TRIGGERS)}).fetchone()
            except psycopg.Error as exc:
                raise self._unavailable("PostgreSQL error", exc) from None
        layout = row[0] if row else 0
        if layout == 2:
            return
        try:
            self._migrate()
        except psycopg.errors.InsufficientPrivilege as exc:
            if layout == 0:
                raise self._unavailable(
                    f"cannot create the lease table {self.table!r}", exc) from None
            log.warning(
                "PostgreSQL store %s table %s: cannot migrate to this version's layout (%s); "
                "running on the previous one: an operator's DELETE of a lease row leaves its "
                "tokens to the clock floor alone, and each event costs one more index entry. "
                "Run PostgresStore.migrate() as the tables' owner.", self.url, self.table,
                " ".join(str(exc).split()))
        except psycopg.Error as exc:
            raise self._unavailable(
                f"cannot create the lease table {self.table!r}", exc) from None

    def migrate(self) -> None:
        """Create the lease, history and counter tables if missing, or bring
        an older version's up to date, in one transaction:

        - the secret column; counters copied from the lease rows, never lowered;
        - the history keyed by ``(key, id)`` (it was ``id`` plus an index on
          ``(key, id)``: one index entry per event fewer); ``id`` still comes
          from the table's sequence, so an older version running beside this
          one inserts and orders events exactly as before;
        - the counter triggers (``KEEP_TOKENS``): grants no longer write the
          counter, a deleted or truncated lease row does. The counter table
          stays (an older version still reads and writes it).

        The lease table is locked before the history table, the order in
        which every statement of the store names them, so a grant already
        running finishes first instead of deadlocking with the migration. Safe when
        several processes race: an advisory lock serialises the DDL (``IF NOT
        EXISTS`` alone can still collide in the catalog)."""
        try:
            self._migrate()
        except psycopg.Error as exc:
            raise self._unavailable(f"cannot create the lease table {self.table!r}", exc) from None

    def _migrate(self) -> None:
        """``migrate``, raising psycopg's errors."""
        e = sql.Identifier(f"{self.table}_events")
        with self._pool.connection() as conn, \
                watchdog().guard(conn.fileno(), self.call_timeout), conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                         (f"lease_integrations:{self.table}",))
            conn.execute(self._sql["schema"], prepare=False)
            row = conn.execute(
                "SELECT c.conname, ARRAY(SELECT a.attname::text FROM unnest(c.conkey) "
                "WITH ORDINALITY k(num, i) JOIN pg_attribute a ON a.attrelid = c.conrelid "
                "AND a.attnum = k.num ORDER BY k.i) FROM pg_constraint c "
                "WHERE c.conrelid = to_regclass(%s) AND c.contype = 'p'",
                (e.as_string(None),)).fetchone()
            if row is None or row[1] != ["key", "id"]:
                conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(e))
                if row is not None:
                    conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                        e, sql.Identifier(row[0])))
                conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (key, id)").format(e))
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(
                sql.Identifier(f"{self.table}_events_by_key")))
            schema = conn.execute(
                "SELECT n.nspname FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
                (sql.Identifier(self.table).as_string(None),)).fetchone()
            assert schema is not None  # created above, in this transaction
            conn.execute(sql.SQL(KEEP_TOKENS).format(
                t=sql.Identifier(self.table), c=sql.Identifier(f"{self.table}_tokens"),
                fn=sql.Identifier(f"{self.table}_keep_tokens"),
                schema=sql.Identifier(schema[0])), prepare=False)

    # -- protocol ---------------------------------------------------------------------
    def acquire(self, key: str, holder: str, secret: str, ttl: float,
                 meta: Mapping[str, Any]) -> AcquireResult:
        if len(self._busy_since) > 10_000:  # only recent attempts matter to a waiter
            self._busy_since.clear()
        self._busy_since[(threading.get_ident(), key)] = self._busy_since[(None, key)] = \
            time.monotonic()
        meta_json = meta_to_json(meta if type(meta) is dict else dict(meta)).encode()
        params = (key.encode(), holder.encode(), secret.encode(), repr(float(ttl)).encode(),
                  meta_json, b'{"meta": ' + meta_json + b"}")
        res = self._exec(self._acquire_trim if random.random() < 1 / TRIM_EVERY
                         else self._acquire, params)
        if res.ntuples == 0:  # no row in the statement's snapshot: a new key
            res = self._exec(self._acquire_new, params)
        v = res.get_value
        if res.ntuples and v(0, 0) == b"\x01":
            self._busy_since.pop((threading.get_ident(), key), None)
            now = _time(v(0, 2))
            return AcquireResult(True, LeaseRecord(
                key, holder, _int(v(0, 1)), now, now, _time(v(0, 3)), now,
                meta_as_stored(meta, meta_json)))
        record = None if res.ntuples == 0 else LeaseRecord(
            key, _text(v(0, 4)), _int(v(0, 1)), _time(v(0, 5)), _time(v(0, 6)), _time(v(0, 3)),
            _time(v(0, 2)), parse_field(key, "meta", _jsonb_meta, v(0, 7)))
        if record is None or not record.held:
            # The snapshot predates a writer the statement waited for (rare):
            # read the row as it is now.
            record = self.get(key)
        return AcquireResult(False, record)

    def renew(self, key: str, secret: str, token: int, ttl: float) -> bool:
        res = self._exec(self._renew, (key.encode(), secret.encode(), str(int(token)).encode(),
                                       repr(float(ttl)).encode()))
        return bool(res.command_tuples == 1)

    batch_renewals = True

    def renew_many(self, items: Sequence[RenewItem]) -> list[bool]:
        """One statement for the whole batch (``RENEW_MANY``)."""
        if not items:
            return []
        rows = self._run("renew_many", {"keys": [i[0] for i in items],
                                        "secrets": [i[1] for i in items],
                                        "tokens": [int(i[2]) for i in items],
                                        "ttls": [float(i[3]) for i in items]})
        done = {int(row[0]) for row in rows}
        return [n in done for n in range(1, len(items) + 1)]

    def release(self, key: str, secret: str, token: int) -> bool:
        res = self._exec(self._release, (key.encode(), secret.encode(), str(int(token)).encode()))
        return bool(res.ntuples == 1)

    def get(self, key: str) -> LeaseRecord | None:
        rows = self._run("get", {"key": key})
        return _record(rows[0]) if rows else None

    def force_release(self, key: str, by: str, token: int | None = None) -> LeaseRecord | None:
        rows = self._run("break", {"key": key, "by": by, "channel": self.channel,
                                   "token": None if token is None else int(token),
                                   "keep": HISTORY_LIMIT - 1})
        return _record(rows[0][:8]) if rows else None

    def history(self, key: str, limit: int = 50) -> list[LeaseEvent]:
        rows = self._run("history", {"key": key, "limit": max(0, min(int(limit), HISTORY_LIMIT))})
        return readable_events(rows, lambda r: checked_event(*r))

    def record_event(self, key: str, kind: EventKind, holder: str | None, token: int,
                     detail: Mapping[str, Any] | None = None) -> None:
        self._run("add_event", {"key": key, "kind": kind, "token": token, "holder": holder,
                                "detail": _jsonb(detail or {}), "keep": HISTORY_LIMIT - 1})

    # Defined after every other method annotated with ``list[...]`` (it shadows the builtin).
    def list(self, prefix: str = "") -> RecordList:
        return readable_records(self._run("list", {"prefix": prefix}), _record)

    # -- waiting ------------------------------------------------------------------------
    def _get_listener(self) -> Listener:
        with self._listener_lock:
            if self._listener is None or self._listener[0] != os.getpid():
                listener = Listener(self._connect, self._sql["listen"], self.call_timeout)
                self._listener = (os.getpid(), listener)
            return self._listener[1]

    def wait_for_release(self, key: str, timeout: float) -> bool:
        """Woken by the ``pg_notify`` of a release or break of ``key``, or by a
        release since this thread's last busy acquire. Falls back to a plain
        timed wait while the LISTEN connection is down."""
        deadline = time.monotonic() + max(0.0, timeout)
        since = self._busy_since.pop((threading.get_ident(), key), None) \
            or self._busy_since.get((None, key)) or time.monotonic()
        listener = self._get_listener()
        listening = listener.wait_listening(max(0.0, min(deadline - time.monotonic(),
                                                         self.connect_timeout)))
        if listening is not None and listening > since:
            # LISTEN started after our acquire: a release in between went unheard.
            try:
                record = self.get(key)
            except StoreUnavailable:
                return True
            if record is None or not record.held:
                return True
            since = listening
        return listener.wait(key, since, max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        with self._listener_lock:
            if self._listener is not None and self._listener[0] == os.getpid():
                self._listener[1].close()
            self._listener = None
        self._pool.close()

    def __repr__(self) -> str:
        return f"<PostgresStore {self.url} table={self.table}>"

