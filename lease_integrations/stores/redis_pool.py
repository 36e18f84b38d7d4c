"""A connection pool that waits its turn: first come, first served.

redis-py's ``BlockingConnectionPool`` waits for a free connection instead of
raising, but its queue lets a thread that just released a connection take one
straight back ahead of the threads already waiting. With 200 threads on 20
connections some waiter then starves past the timeout ("No connection
available") while others go round and round. Here a connection put back goes
to the thread that has waited longest, so every wait is about
(threads ahead / connections) x one command, and the timeout bounds it.
"""

from __future__ import annotations

import inspect
import queue
import threading
from collections import deque
from typing import Any

import redis

_NAME = inspect.signature(redis.ConnectionPool.get_connection).parameters.get("command_name")
#: redis-py before 5.3 requires a command name in ``get_connection`` (and ignores
#: it); 5.3 on warns (DeprecationWarning) when given one.
_NEEDS_COMMAND_NAME = _NAME is not None and _NAME.default is inspect.Parameter.empty
#: redis-py before 7.0: ``BlockingConnectionPool.disconnect()`` takes no argument.
_DISCONNECT_TAKES_FLAG = "inuse_connections" in inspect.signature(
    redis.BlockingConnectionPool.disconnect).parameters


def get_connection(pool: Any) -> Any:
    """A connection from a redis-py pool, on every redis-py the extra admits."""
    return pool.get_connection("EVALSHA") if _NEEDS_COMMAND_NAME else pool.get_connection()


class _Waiter:
    __slots__ = ("event", "item")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.item: Any = None


class FairQueue(queue.LifoQueue[Any]):
    """LIFO for the connections (warm ones first), FIFO for the waiters: a
    connection put back goes straight to the longest waiter (one wake-up per
    hand-over), and a newcomer takes a free one only when nobody waits.

    One idle connection may also sit beside the queue, kept for the hot
    script calls (``take_kept``, ``keep``; see ``redis_wire``): a trip
    through redis-py's pool costs about as much as the round trip it wraps.
    It is still the pool's: any ``get`` takes it when the queue has no live
    connection, and it is never kept while a thread waits."""

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize)
        self._waiters: deque[_Waiter] = deque()
        self._kept: Any = None

    def take_kept(self) -> Any:
        """The kept connection, or None."""
        with self.mutex:
            item, self._kept = self._kept, None
            return item

    def keep(self, item: Any) -> bool:
        """Keep ``item`` beside the queue; False (the caller puts it back
        through the pool) while a thread waits or one is kept already."""
        with self.mutex:
            if self._waiters or self._kept is not None:
                return False
            self._kept = item
            return True

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self.mutex:
            if self._waiters:
                waiter = self._waiters.popleft()
                waiter.item = item
                waiter.event.set()
                return
            if 0 < self.maxsize <= self._qsize():
                raise queue.Full
            self._put(item)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self.mutex:
            if self._kept is not None and (not self._qsize() or self.queue[-1] is None):
                item, self._kept = self._kept, None  # a live connection before a new one
                return item
            if self._qsize():  # (never while threads wait: put hands items to them)
                return self._get()
            if not block:
                raise queue.Empty
            waiter = _Waiter()
            self._waiters.append(waiter)
        if waiter.event.wait(timeout):
            return waiter.item
        with self.mutex:
            if waiter.event.is_set():  # handed over just as we gave up: it is ours
                return waiter.item
            self._waiters.remove(waiter)
        raise queue.Empty


class FairBlockingConnectionPool(redis.BlockingConnectionPool):
    """``BlockingConnectionPool`` whose waiters are served in arrival order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("queue_class", FairQueue)
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]

    def disconnect(self, inuse_connections: bool = True) -> None:
        """Every connection, or the idle ones only: redis-py's Sentinel asks
        for ``disconnect(inuse_connections=False)`` when it finds a new primary,
        which ``BlockingConnectionPool`` takes only from redis-py 7.0 on (before,
        every Sentinel store failed at its first connect with a TypeError)."""
        if _DISCONNECT_TAKES_FLAG:
            super().disconnect(inuse_connections)
        elif inuse_connections:
            super().disconnect()
        else:
            self._checkpid()
            with self.pool.mutex:
                idle = [c for c in self.pool.queue if c is not None]
            for connection in idle:
                connection.disconnect()
