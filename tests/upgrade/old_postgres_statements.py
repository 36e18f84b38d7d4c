"""The PostgreSQL store's statements as the previous version ran them, frozen:
a copy of ``lease_integrations/stores/postgres.py`` at commit 5886a6c (the
layout with a counter upsert on every grant and history keyed by ``id`` plus
an index on ``(key, id)``). ``OldClient`` runs them the way that version did
(libpq-level, ``$n`` parameters), so the rolling-upgrade test can keep an old
process working beside the new store on one table. Never edit the SQL here to
make a test pass: it stands for code already deployed."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.errors import error_from_result

HISTORY_LIMIT = 100  # lease_integrations.core.store.HISTORY_LIMIT at 5886a6c

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
    id     bigserial PRIMARY KEY,
    key    text NOT NULL,
    kind   text NOT NULL,
    token  bigint NOT NULL,
    holder text,
    at     timestamptz NOT NULL,
    detail jsonb NOT NULL DEFAULT '{{}}'
);
CREATE INDEX IF NOT EXISTS {ei} ON {e} (key, id);
CREATE TABLE IF NOT EXISTS {c} (
    key   text PRIMARY KEY,
    token bigint NOT NULL
);
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS secret text;
INSERT INTO {c} (key, token) SELECT key, token FROM {t}
ON CONFLICT (key) DO UPDATE SET token = GREATEST({c}.token, excluded.token);
"""

# ensure_schema's check: when it holds, that version does not run SCHEMA.
SCHEMA_CHECK = (
    "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL "
    "AND to_regclass(%s) IS NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute "
    "WHERE attrelid = to_regclass(%s) AND attname = 'secret' "
    "AND NOT attisdropped)")

_GRANT_WRITES = """ctr AS (
    INSERT INTO {c} AS c (key, token) SELECT key, token FROM up
    ON CONFLICT (key) DO UPDATE SET token = GREATEST(c.token, excluded.token)
),
ev AS (
    INSERT INTO {e} (key, kind, token, holder, at, detail)
    SELECT up.key, 'acquired', up.token, $2, up.t,
           CASE WHEN o.holder IS NULL THEN $6::jsonb
                ELSE $6::jsonb || jsonb_build_object('took_over', jsonb_build_object(
                    'token', o.token, 'holder', o.holder)) END
    FROM up LEFT JOIN {t} o ON o.key = up.key
)"""

ACQUIRE = """
WITH n AS (SELECT clock_timestamp() AS t),
up AS (
    UPDATE {t} l SET holder = $2, secret = $3,
        token = GREATEST(l.token + 1, (SELECT c.token + 1 FROM {c} c WHERE c.key = $1),
                         (extract(epoch FROM n.t) * 1000000)::bigint),
        acquired_at = n.t, renewed_at = n.t, expires_at = n.t + make_interval(secs => $4::float8),
        meta = $5::jsonb
    FROM n WHERE l.key = $1 AND (l.holder IS NULL OR l.expires_at <= n.t)
    RETURNING l.key, l.token, n.t, l.expires_at
),
""" + _GRANT_WRITES + """{trim}
SELECT up.token IS NOT NULL, coalesce(up.token, l.token), n.t,
       coalesce(up.expires_at, l.expires_at), l.holder, l.acquired_at, l.renewed_at, l.meta
FROM n CROSS JOIN {t} l LEFT JOIN up ON true WHERE l.key = $1
"""

ACQUIRE_TRIM = f""",
trim AS (
    DELETE FROM {{e}} WHERE key = $1 AND EXISTS (SELECT 1 FROM up)
    AND id <= (SELECT id FROM {{e}} WHERE key = $1 ORDER BY id DESC
               OFFSET {HISTORY_LIMIT - 1} LIMIT 1)
)"""

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
""" + _GRANT_WRITES + """
SELECT true, token, t, expires_at, NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::jsonb
FROM up
"""

RENEW = """
UPDATE {t} SET renewed_at = c.now, expires_at = c.now + make_interval(secs => $4::float8)
FROM (SELECT clock_timestamp() AS now) c
WHERE key = $1 AND secret = $2 AND holder IS NOT NULL AND token = $3::bigint
  AND expires_at > c.now
"""

RELEASE = """
WITH r AS (
    UPDATE {t} SET holder = NULL, secret = NULL
    WHERE key = $1 AND secret = $2 AND holder IS NOT NULL AND token = $3::bigint
    RETURNING key, token
),
ev AS (
    INSERT INTO {e} (key, kind, token, holder, at, detail)
    SELECT r.key, 'released', r.token, o.holder, clock_timestamp(), '{{}}'
    FROM r JOIN {t} o ON o.key = r.key
)
SELECT pg_notify({channel}, key) FROM r
"""

HISTORY = """
SELECT key, kind, token, holder, at, detail FROM (
    SELECT * FROM {e} WHERE key = %(key)s ORDER BY id DESC LIMIT %(limit)s
) recent ORDER BY id
"""


class OldClient:
    """One connection running the frozen statements on ``table``."""

    def __init__(self, url: str, table: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, options="-c TimeZone=UTC")
        names = {"t": sql.Identifier(table), "e": sql.Identifier(f"{table}_events"),
                 "ei": sql.Identifier(f"{table}_events_by_key"),
                 "c": sql.Identifier(f"{table}_tokens"),
                 "channel": sql.Literal(f"{table}_released")}
        self.names = names
        self.table = table

        def text(template: str, trim: str = "") -> bytes:
            filled = sql.SQL(template).format(**names, trim=sql.SQL(trim).format(**names))
            return filled.as_string(self.conn).encode()

        self._sql = {"acquire": text(ACQUIRE), "acquire_trim": text(ACQUIRE, ACQUIRE_TRIM),
                     "acquire_new": text(ACQUIRE_NEW), "renew": text(RENEW),
                     "release": text(RELEASE)}
        self._prepared: set[bytes] = set()

    def close(self) -> None:
        self.conn.close()

    def create_schema(self) -> None:
        """What the old version's ``migrate`` ran (under its advisory lock)."""
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                              (f"lease_integrations:{self.table}",))
            self.conn.execute(sql.SQL(SCHEMA).format(**self.names), prepare=False)

    def schema_is_current(self) -> bool:
        """The old ``ensure_schema`` check: True means it would not migrate."""
        names = [sql.Identifier(n).as_string(self.conn)
                 for n in (self.table, f"{self.table}_events", f"{self.table}_tokens",
                           self.table)]
        row = self.conn.execute(SCHEMA_CHECK, names).fetchone()
        return bool(row and row[0])

    def _run(self, name: str, params: list[bytes]) -> Any:
        pgconn = self.conn.pgconn
        stmt = name.encode()
        if stmt not in self._prepared:
            result = pgconn.prepare(stmt, self._sql[name])
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise error_from_result(result)
            self._prepared.add(stmt)
        result = pgconn.exec_prepared(stmt, params)  # text results
        if result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
            raise error_from_result(result)
        return result

    def acquire(self, key: str, holder: str, secret: str, ttl: float = 30.0,
                trim: bool = False) -> tuple[bool, int, str | None]:
        """(granted, token, holder now): the old ``acquire``'s statements."""
        meta = json.dumps({"version": "old"}).encode()
        params = [key.encode(), holder.encode(), secret.encode(), repr(float(ttl)).encode(),
                  meta, b'{"meta": ' + meta + b"}"]
        res = self._run("acquire_trim" if trim else "acquire", params)
        if res.ntuples == 0:
            res = self._run("acquire_new", params)
        if res.ntuples == 0:
            return False, 0, None
        granted = res.get_value(0, 0) == b"t"
        token = int(res.get_value(0, 1))
        now_holder = holder if granted else (res.get_value(0, 4) or b"").decode() or None
        return granted, token, now_holder

    def renew(self, key: str, secret: str, token: int, ttl: float = 30.0) -> bool:
        res = self._run("renew", [key.encode(), secret.encode(), str(token).encode(),
                                  repr(float(ttl)).encode()])
        return bool(res.command_tuples == 1)

    def release(self, key: str, secret: str, token: int) -> bool:
        res = self._run("release", [key.encode(), secret.encode(), str(token).encode()])
        return bool(res.ntuples == 1)

    def history(self, key: str) -> list[tuple[str, int, str | None]]:
        rows = self.conn.execute(sql.SQL(HISTORY).format(**self.names),
                                 {"key": key, "limit": HISTORY_LIMIT}).fetchall()
        return [(kind, int(token), holder) for _, kind, token, holder, _, _ in rows]


def new_secret() -> str:
    return uuid.uuid4().hex
