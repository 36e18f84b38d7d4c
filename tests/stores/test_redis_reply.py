"""The hot calls' own reply reader (``redis_reply``) against redis-py's: every
shape a script can answer, in RESP2 and RESP3, decoded or not, whole or in
pieces, gives what redis-py's reader gives; errors are redis-py's errors; a
push notice before the reply is skipped and the connection dropped."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError, InvalidResponse, NoScriptError, ResponseError

from lease_integrations.stores import redis_reply
from lease_integrations.stores.redis_pool import get_connection

#: Scripts whose replies cover the RESP2 types and, under ``redis.setresp(3)``,
#: the RESP3 ones (map, set, double, boolean, big number, null).
SCRIPTS = [
    "return 1",
    "return -42",
    "return 'text'",
    "return false",
    "return {1, false, 'two', {3, 'four', {}}, -5}",
    "return {}",
    "return redis.status_reply('FINE')",
    "return string.rep('x', 300000)",  # several recv calls
    "return {string.rep('y', 70000), 7, string.rep('z', 70000)}",
    "return 'caf\\195\\169'",  # UTF-8 text
    "redis.setresp(3); return {map={a={1, 2}, b='x'}}",  # a map, with an array in it
    "redis.setresp(3); return {double=3.25}",
    "redis.setresp(3); return {map={a=1}}",
    "redis.setresp(3); return {set={x=true}}",
    "redis.setresp(3); return true",
    "redis.setresp(3); return {big_number='123456789012345678901234567890'}",
    "redis.setresp(3); return nil",
]


def _client(redis_url: str, protocol: int, decode: bool) -> redis.Redis:
    return redis.Redis.from_url(redis_url, protocol=protocol, decode_responses=decode)


def _both(client: redis.Redis, *command: Any) -> tuple[Any, Any]:
    """The reply to ``command`` read by redis-py, and by ``redis_reply``."""
    connection = get_connection(client.connection_pool)
    try:
        connection.send_command(*command)
        theirs = connection.read_response()
        connection.send_command(*command)
        assert redis_reply.reads_itself(connection)
        ours = redis_reply.read(connection)
        assert connection._sock is not None  # kept: nothing but the reply came
        return theirs, ours
    finally:
        client.connection_pool.release(connection)


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("decode", [False, True])
def test_every_reply_shape_reads_as_redis_py_reads_it(redis_url: str, protocol: int,
                                                      decode: bool) -> None:
    client = _client(redis_url, protocol, decode)
    try:
        for script in SCRIPTS:
            theirs, ours = _both(client, "EVAL", script, 0)
            if isinstance(theirs, set):  # redis-py makes a RESP3 set a set, we a list
                ours = set(ours)
            assert ours == theirs, script
            assert type(ours) is type(theirs), script
    finally:
        client.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_error_replies_are_raised_as_redis_py_raises_them(redis_url: str, protocol: int) -> None:
    client = _client(redis_url, protocol, True)
    connection = get_connection(client.connection_pool)
    try:
        connection.send_command("EVALSHA", "0" * 40, 0)
        with pytest.raises(NoScriptError):
            redis_reply.read(connection)
        connection.send_command("EVAL", "return redis.error_reply('MINE went wrong')", 0)
        with pytest.raises(ResponseError, match="went wrong"):
            redis_reply.read(connection)
        # An error nested in an array is a value, as redis-py gives it.
        connection.send_command("EVAL", "return {1, redis.error_reply('ERR nested')}", 0)
        nested = redis_reply.read(connection)
        assert nested[0] == 1 and isinstance(nested[1], ResponseError)
        connection.send_command("PING")  # still in step after each error
        assert redis_reply.read(connection) == "PONG"
    finally:
        client.connection_pool.release(connection)
        client.close()


def test_a_push_notice_before_the_reply_is_skipped_and_the_connection_dropped(
        redis_url: str, key: str) -> None:
    tracked = _client(redis_url, 3, True)
    writer = _client(redis_url, 2, True)
    connection = get_connection(tracked.connection_pool)
    try:
        connection.send_command("CLIENT", "TRACKING", "ON")
        assert connection.read_response() == "OK"
        connection.send_command("GET", key)
        assert connection.read_response() is None
        writer.set(key, "changed")  # the server queues an invalidation push for us
        connection.send_command("EVAL", "return 'mine'", 0)
        assert redis_reply.read(connection) == "mine"
        assert connection._sock is None  # dropped: the next call connects afresh
    finally:
        tracked.connection_pool.release(connection)
        tracked.close()
        writer.close()


def test_a_connection_the_server_closes_is_a_connection_error(redis_url: str) -> None:
    client = _client(redis_url, 2, True)
    killer = _client(redis_url, 2, True)
    connection = get_connection(client.connection_pool)
    try:
        connection.send_command("CLIENT", "ID")
        own_id = redis_reply.read(connection)
        killer.client_kill_filter(_id=own_id)
        connection.send_command("PING")
        with pytest.raises(ConnectionError):
            redis_reply.read(connection)
    finally:
        connection.disconnect()
        client.connection_pool.release(connection)
        client.close()
        killer.close()


class _Chunks:
    """A socket that hands out ``chunks`` one per ``recv``, then EOF: a
    reply cut where a real network may cut it, deterministically."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def recv(self, size: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def _fed(chunks: list[bytes]) -> Any:
    connection = redis.connection.Connection(protocol=2, decode_responses=True)
    connection._sock = _Chunks(chunks)
    return connection


@pytest.mark.parametrize("cut", [1, 2, 5, 9, 14, 17])
def test_a_reply_cut_anywhere_is_read_whole(cut: int) -> None:
    reply = b"*3\r\n:7\r\n$5\r\nhello\r\n$-1\r\n"
    connection = _fed([reply[:cut], reply[cut:]])
    assert redis_reply.read(connection) == [7, "hello", None]


@pytest.mark.parametrize("garbage", [b"?what\r\n", b":12x\r\n", b"$abc\r\n"])
def test_bytes_that_are_no_reply_are_a_redis_error(
        garbage: bytes) -> None:
    with pytest.raises(InvalidResponse):
        redis_reply.read(_fed([garbage]))


def test_a_reply_the_server_cuts_short_is_a_connection_error() -> None:
    with pytest.raises(ConnectionError):
        redis_reply.read(_fed([b"$10\r\nhal"]))
