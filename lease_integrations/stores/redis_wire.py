"""The hot script calls, packed by hand and sent on a pooled connection.

redis-py's generic command path (retry wrapper, observability hooks, a type
check and an encode per argument, then the reply callbacks) is most of the
client's time in a short call, and a lease call has more arguments than a
plain ``SET``. A script call's shape never changes: ``EVALSHA``, the SHA,
the key count and the key names are packed once per key and reused; only
the few arguments are packed per call, and the reply is read in one pass
(``redis_reply``) where the connection reads replies as redis-py's own does.
The connection comes from the client's own pool and goes back to it, so
timeouts, fork safety and Sentinel's failover handling are the pool's and
the connection's, as for any redis-py command, and errors are redis-py's
exceptions; with the store's own pool (``FairQueue``) one
connection is kept beside it between calls, which skips the pool's
bookkeeping (about 20 us a call, 40 of an acquire and its release). Not
for a Redis Cluster client: it routes each call by slot, so there the store
keeps redis-py's path.
"""

from __future__ import annotations

import os
import select
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from . import redis_reply
from .redis_pool import FairQueue, get_connection


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


def pack_words(words: Sequence[str]) -> bytes:
    """``words`` as a command's arguments (for ``ScriptCall.call_packed``)."""
    return b"".join([_bulk(w.encode()) for w in words])


def pack_one_key_calls(sha: str, calls: Sequence[Sequence[str]]) -> bytes:
    """Many ``EVALSHA sha 1 key arg…`` commands as one pipelined request
    (the Cluster's batched renewals: each call's first item is its key)."""
    head = b"%b%b%b" % (_bulk(b"EVALSHA"), _bulk(sha.encode()), _bulk(b"1"))
    return b"".join([b"*%d\r\n%b%b" % (len(call) + 3, head,
                                        b"".join([_bulk(a.encode()) for a in call]))
                     for call in calls])


#: Heads are kept for calls of at most this many keys (one lease's calls);
#: a batch's head is packed afresh, or 4,096 kept batches of 500 keys would
#: hold a hundred megabytes.
KEPT_KEYS = 4


class ScriptCall:
    """One Lua script (a redis-py ``Script``) called with hand-packed arguments."""

    __slots__ = ("_heads", "_pool", "_script")

    def __init__(self, client: Any, script: Any) -> None:
        self._pool = client.connection_pool
        self._script = script
        #: (key names, argument count) -> the packed command up to its arguments.
        self._heads: dict[tuple[tuple[str, ...], int], bytes] = {}

    def _head(self, keys: Sequence[str], nargs: int) -> bytes:
        if len(keys) > KEPT_KEYS:  # a renewal batch: its set of keys rarely comes again
            return self._pack_head(keys, nargs)
        shape = (tuple(keys), nargs)
        head = self._heads.get(shape)
        if head is None:
            if len(self._heads) > 4096:  # bounded: a process touching many keys
                self._heads.clear()
            head = self._heads[shape] = self._pack_head(keys, nargs)
        return head

    def _pack_head(self, keys: Sequence[str], nargs: int) -> bytes:
        words = [b"EVALSHA", self._script.sha.encode(), str(len(keys)).encode(),
                 *(k.encode() for k in keys)]
        return b"*%d\r\n" % (len(words) + nargs) + b"".join(_bulk(w) for w in words)

    def __call__(self, keys: Sequence[str], args: Sequence[str]) -> Any:
        return self._call(self._head(keys, len(args)) + b"".join([_bulk(a.encode()) for a in args]))

    def call_packed(self, keys: Sequence[bytes], args: Sequence[bytes], nargs: int) -> Any:
        """``keys`` and ``args`` packed already (``_bulk``, ``nargs`` words
        in ``args``): a renewal batch reuses each lease's packed words every
        interval instead of packing the same four words again."""
        head = b"*%d\r\n%b%b%b" % (3 + len(keys) + nargs, _bulk(b"EVALSHA"),
                                    _bulk(self._script.sha.encode()), _bulk(b"%d" % len(keys)))
        return self._call(head + b"".join(keys) + b"".join(args))

    def _call(self, packed: bytes) -> Any:
        try:
            return self._send(packed)
        except NoScriptError:  # the server lost its scripts (a restart, SCRIPT FLUSH)
            self._script.registered_client.script_load(self._script.script)
            return self._send(packed)

    def _send(self, packed: bytes) -> Any:
        pool = self._pool
        # The kept connection, in the process that made the pool (a forked
        # child's first get_connection gives it a pool of its own).
        fair = getattr(pool, "pool", None) if pool.pid == os.getpid() else None
        connection = fair.take_kept() if isinstance(fair, FairQueue) else None
        if connection is None:
            connection = get_connection(pool)
        else:  # the pool's own check: EOF (closed by the server) or stray bytes
            sock = getattr(connection, "_sock", None)
            if sock is not None and select.select([sock], [], [], 0)[0]:
                connection.disconnect()  # the send below connects afresh
        try:
            connection.send_packed_command((packed,))  # an iterable of chunks
            if redis_reply.reads_itself(connection):
                reply = redis_reply.read(connection)
            else:
                reply = connection.read_response()
        except ResponseError:
            self._give_back(fair, connection)  # the whole reply was read: in step
            raise
        except BaseException:
            # Anything else (a Ctrl-C between the write and the read, say) may
            # leave a reply unread: the next caller must not get it as its own.
            connection.disconnect()
            pool.release(connection)
            raise
        self._give_back(fair, connection)
        return reply

    def _give_back(self, fair: Any, connection: Any) -> None:
        if not (isinstance(fair, FairQueue) and fair.keep(connection)):
            self._pool.release(connection)
