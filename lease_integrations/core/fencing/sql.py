"""The SQL fencing guard, run inside the caller's own transaction.

``fence.check(conn, "ledger", lease.token)`` upserts the resource's high-water
token in the same transaction as the caller's write. A newer token raises the
mark; an older one matches no row and raises ``StaleToken``, so the caller's
transaction rolls back with its write. The row lock taken by the upsert holds
until the caller commits, so two writers are ordered by their tokens.
Works on SQLite (3.35+) and PostgreSQL, through DB-API connections (sqlite3,
psycopg) or SQLAlchemy connections.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ConfigurationError, StaleToken

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

_UPSERT = (
    "INSERT INTO {table} (resource, token) VALUES ({p}, {p}) "
    "ON CONFLICT (resource) DO UPDATE SET token = excluded.token "
    "WHERE {table}.token <= excluded.token RETURNING token"
)
_NEWEST = "SELECT token FROM {table} WHERE resource = {p}"
_CREATE = (
    "CREATE TABLE IF NOT EXISTS {table} "
    "(resource VARCHAR(200) PRIMARY KEY, token BIGINT NOT NULL)"
)


class SqlFence:
    """A table of high-water tokens, one row per fenced resource."""

    def __init__(self, table: str = "lease_fences") -> None:
        if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
            raise ConfigurationError(
                f"fence table name {table!r} must be a plain SQL identifier "
                "(letters, digits, underscore; at most 63 characters)"
            )
        self.table = table

    def create_table(self, conn: Any) -> None:
        """Create the fence table if it is missing (in the caller's transaction)."""
        _execute(conn, _CREATE.format(table=self.table), ())

    def check(self, conn: Any, resource: str, token: int) -> None:
        """Accept ``token`` for ``resource`` or raise ``StaleToken``.

        Call it in the same transaction as the write it protects, before the
        write; equal tokens pass, so one holder may write many times."""
        if not isinstance(resource, str) or not resource:
            raise ConfigurationError(f"fenced resource name must be a non-empty string, got {resource!r}")
        if isinstance(token, bool) or not isinstance(token, int) or token < 1:
            raise ConfigurationError(f"fencing token must be a positive integer, got {token!r}")
        rows = _execute(conn, _UPSERT.format(table=self.table, p="{p}"), (resource, token))
        if rows:
            return
        newest = _execute(conn, _NEWEST.format(table=self.table, p="{p}"), (resource,))
        raise StaleToken(resource, token, int(newest[0][0]) if newest else None)

    def newest(self, conn: Any, resource: str) -> int | None:
        """The highest token ``resource`` has accepted, or None."""
        rows = _execute(conn, _NEWEST.format(table=self.table, p="{p}"), (resource,))
        return int(rows[0][0]) if rows else None


def _execute(conn: Any, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Run one statement on a DB-API or SQLAlchemy connection, in its current
    transaction, and fetch what it returns."""
    if hasattr(conn, "exec_driver_sql"):  # SQLAlchemy Connection
        style = conn.dialect.paramstyle
        result = conn.exec_driver_sql(sql.replace("{p}", _marker(style)), params)
        return [tuple(r) for r in result.fetchall()] if result.returns_rows else []
    module = type(conn).__module__.split(".")[0]
    style = "qmark" if module == "sqlite3" else "format"
    cursor = conn.cursor()
    try:
        cursor.execute(sql.replace("{p}", _marker(style)), params)
        return [tuple(r) for r in cursor.fetchall()] if cursor.description else []
    finally:
        cursor.close()


def _marker(paramstyle: str) -> str:
    if paramstyle == "qmark":
        return "?"
    if paramstyle in ("format", "pyformat"):
        return "%s"
    raise ConfigurationError(f"unsupported DB-API parameter style {paramstyle!r} for the SQL fence")
