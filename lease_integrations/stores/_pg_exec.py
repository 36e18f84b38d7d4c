"""The PostgreSQL store's hot statements, run at the libpq level.

Why not ``conn.execute``: psycopg's cursor layer (query conversion, parameter
adapters, loaders and row makers set up per result) cost the client about
45 µs per call, as much as the server's whole one-row UPDATE. Acquire, renew
and release send a few short text parameters and read a few text fields, so
they call libpq directly (text parameters in UTF-8, the client encoding
the store's connections set): a named statement, prepared once per connection,
run with ``PQexecPrepared`` (psycopg releases the GIL for it, so the
watchdog thread can still cut a call that overruns). Errors become psycopg's
own exceptions, so the store maps them exactly as it maps every other call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from psycopg import pq
from psycopg.errors import error_from_result

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)

#: Names of the statements each connection has prepared (a new connection,
#: after a restart or in a forked child, prepares again).
_prepared: WeakKeyDictionary[Any, set[bytes]] = WeakKeyDictionary()


class Statement:
    """One SQL text with ``$n`` parameters, named by its hash (two stores on
    one connection with the same text share the prepared statement)."""

    __slots__ = ("name", "text")

    def __init__(self, text: str) -> None:
        self.text = text.encode()
        self.name = b"lease_" + hashlib.sha1(self.text).hexdigest()[:16].encode()

    def run(self, conn: psycopg.Connection[Any], params: Sequence[bytes]) -> Any:
        """Run on ``conn`` (an idle autocommit connection) and return the
        ``PGresult``, its fields in binary; raise psycopg's exception for an
        error."""
        for param in params:
            if b"\x00" in param:  # libpq would cut the text there; psycopg refuses it
                raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        pgconn = conn.pgconn
        names = _prepared.get(conn)
        if names is None:
            names = _prepared[conn] = set()
        if self.name not in names:
            _check(pgconn, pgconn.prepare(self.name, self.text))
            names.add(self.name)
        # A list: the binary libpq wrapper before psycopg 3.3 refuses a tuple.
        return _check(pgconn, pgconn.exec_prepared(self.name, list(params),
                                                   result_format=pq.Format.BINARY))


def _check(pgconn: Any, result: Any) -> Any:
    if result.status in _OK:
        return result
    if pgconn.status == pq.ConnStatus.BAD:  # the socket failed: no SQLSTATE to map
        message = (result.get_error_message() or pgconn.get_error_message()) \
            or "the connection to the server was lost"
        raise psycopg.OperationalError(message)
    raise error_from_result(result)
