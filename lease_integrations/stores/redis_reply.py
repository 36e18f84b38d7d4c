"""Reading a hot call's reply straight from the connection's socket.

redis-py's pure-Python reader (without hiredis, as most installs are) spends
about as much of the client's time on a lease call's short reply as the
call's own packing and the round trip's system calls together: a buffer
object, a readline per element, a callback per type. A lease reply is a few
dozen bytes that one ``recv`` nearly always brings whole, so it is read here
with one ``recv`` and parsed in one pass: 40-60 us less of the client's CPU
per acquire-and-release on a slow host.

Only a connection whose class reads replies as redis-py's own does: one that
extends the reader (Sentinel's turns a ``READONLY`` reply into a failover; a
caching proxy) keeps it. A push frame (RESP3: a maintenance notice, say)
that comes before the reply is skipped, and the connection is dropped after
the call (as it is when anything follows the reply), so the next call
reconnects, as a client that ignores such notices would; the reply itself
is still the call's own: the first after its request.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any, cast

import redis.connection
from redis import exceptions as errors
from redis._parsers.base import BaseParser

#: redis-py's own mapping of an error reply to its exception (NOSCRIPT to
#: ``NoScriptError``...), shared with its readers.
_error = cast("Callable[[str], errors.ResponseError]", BaseParser.parse_error)

#: redis-py's reader as defined by its base connection class.
_PLAIN_READ = getattr(redis.connection, "AbstractConnection", redis.connection.Connection).read_response

_CHUNK = 1 << 16


class _Short(Exception):
    """The buffer ends before the reply does: read more."""


def reads_itself(connection: Any) -> bool:
    """Whether ``read`` may read ``connection``'s reply (see the module)."""
    return (type(connection).read_response is _PLAIN_READ
            and getattr(connection, "_sock", None) is not None)


def read(connection: Any) -> Any:
    """The reply to the command just sent on ``connection``, as redis-py's
    reader gives it: strings decoded as the client asks, an error reply
    raised (as its ``ResponseError`` subclass). Socket errors are redis-py's
    ``TimeoutError`` and ``ConnectionError``; the caller drops the
    connection on any exception but an error reply (see ``redis_wire``)."""
    sock = connection._sock
    decode = connection.encoder.decode if connection.encoder.decode_responses else None
    buffer = _recv(sock, connection)
    pushed = False
    while True:
        try:
            pos = 0
            while buffer[pos:pos + 1] == b">":  # a push frame: not our reply
                _, pos = _parse(buffer, pos, None)
                pushed = True
            reply, end = _parse(buffer, pos, decode)
        except _Short:
            buffer += _recv(sock, connection)
            continue
        except (ValueError, UnicodeDecodeError) as exc:  # not RESP: a redis error, as redis-py's
            raise errors.InvalidResponse(f"unreadable reply from {_where(connection)} "
                                         f"({len(buffer)} bytes, starting {buffer[:1]!r})") from exc
        break
    if pushed or end != len(buffer):  # a notice, or bytes past our reply: out of step
        connection.disconnect()  # the next call connects afresh (see the module)
    if connection.health_check_interval:
        connection.next_health_check = time.monotonic() + connection.health_check_interval
    if isinstance(reply, errors.ResponseError):
        raise reply
    return reply


def _recv(sock: socket.socket, connection: Any) -> bytes:
    try:
        chunk = sock.recv(_CHUNK)
    except TimeoutError as exc:  # the socket's timeout
        raise errors.TimeoutError(f"Timeout reading from {_where(connection)}") from exc
    except OSError as exc:
        raise errors.ConnectionError(f"Error while reading from {_where(connection)}: {exc}") from exc
    if not chunk:
        raise errors.ConnectionError("Connection closed by server.")
    return chunk


def _where(connection: Any) -> str:
    host, port = getattr(connection, "host", None), getattr(connection, "port", None)
    return f"{host}:{port}" if host is not None else str(getattr(connection, "path", "socket"))


def _parse(buffer: bytes, pos: int, decode: Any) -> tuple[Any, int]:
    """One RESP2 or RESP3 value at ``pos``: (value, where the next begins)."""
    end = buffer.find(b"\r\n", pos)
    if end < 0:
        raise _Short
    kind, line, pos = buffer[pos:pos + 1], buffer[pos + 1:end], end + 2
    if kind == b":" or kind == b"(":
        return int(line), pos
    if kind == b"$" or kind == b"=" or kind == b"!":
        size = int(line)
        if size < 0:
            return None, pos
        if len(buffer) < pos + size + 2:
            raise _Short
        data = buffer[pos:pos + size]
        pos += size + 2
        if kind == b"!":
            return _error(data.decode("utf-8", "replace")), pos
        if kind == b"=":
            data = data[4:]  # "txt:" or "mkd:"
        return (decode(data) if decode else data), pos
    if kind in (b"*", b">", b"~", b"%", b"|"):
        count = int(line)
        if count < 0:
            return None, pos
        items = []
        for _ in range(count * 2 if kind in (b"%", b"|") else count):
            item, pos = _parse(buffer, pos, decode)
            items.append(item)
        if kind == b"|":  # attributes about the value that follows: not the value
            return _parse(buffer, pos, decode)
        if kind == b"%":
            return dict(zip(items[::2], items[1::2])), pos
        return items, pos
    if kind == b"+":
        return (decode(line) if decode else line), pos
    if kind == b"-":
        return _error(line.decode("utf-8", "replace")), pos
    if kind == b"_":
        return None, pos
    if kind == b"#":
        return line == b"t", pos
    if kind == b",":
        return float(line), pos
    raise errors.InvalidResponse(f"unknown reply type {kind!r}")
