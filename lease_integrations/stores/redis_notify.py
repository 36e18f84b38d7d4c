"""Release notifications for the Redis store: one pub/sub connection per store
object, shared by every thread that waits on it.

The release scripts ``PUBLISH`` on the key's channel in the same step that
clears the holder, so a waiter wakes within a network hop rather than a poll
interval. Only one thread at a time uses the pub/sub connection (redis-py's
``PubSub`` is not made for concurrent readers); it reads in short slices and
hands every message to the waiters through a condition variable, so waiters
on different keys never steal each other's wake-ups.

On a Redis Cluster the client is a ``RedisCluster`` and ``pubsub()`` gives
redis-py's ``ClusterPubSub``, which opens its one connection on the node that
owns the first channel's slot. Releases use plain ``PUBLISH``, which a Cluster
forwards to every node, so that one connection hears releases of keys on every
master. Sharded ``SPUBLISH``/``SSUBSCRIBE`` would keep the messages on one
shard, but would need a subscription connection per shard (and Redis 7);
releases are rare enough that the cluster-bus broadcast costs nothing
noticeable.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("lease_integrations")

#: How long one reader holds the pub/sub connection before letting another
#: thread (say, one that needs to subscribe) have it.
READ_SLICE = 0.05


class ReleaseListener:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._cond = threading.Condition()
        self._pubsub: Any = None
        self._pid = os.getpid()
        self._channels: set[str] = set()
        self._pending: set[str] = set()  # channels a waiter needs subscribed
        self._seen: dict[str, int] = {}  # notifications received per channel
        self._busy = False  # a thread is using the pub/sub connection

    def wait(self, channel: str, is_free: Callable[[], bool], timeout: float) -> bool:
        """Block until ``channel`` gets a release, or ``timeout`` passes.

        A release published before we subscribed is not replayed by Redis, so
        once subscribed we ask ``is_free()`` once: a lease released in that gap
        still wakes us. Whichever thread holds the connection subscribes every
        pending channel before it reads, so no waiter starves behind a reader.
        Connection trouble makes this wait a plain sleep returning False: the
        caller's next acquire reports an outage, or polling takes over."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._forget_after_fork()
            seen = self._seen.get(channel, 0)
            need_check = channel not in self._channels
        while True:
            with self._cond:
                while True:
                    if self._seen.get(channel, 0) != seen:
                        return True
                    if need_check and channel in self._channels:
                        break
                    if channel not in self._channels:
                        self._pending.add(channel)  # (again, after a reset)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    if not self._busy:
                        break
                    self._cond.wait(remaining)
                check = need_check and channel in self._channels
                if not check:
                    self._busy = True
                    subscribe, self._pending = sorted(self._pending - self._channels), set()
            if check:
                need_check = False
                if is_free():
                    return True
                continue
            try:
                if subscribe:
                    self._connection().subscribe(*subscribe)
                self._read(min(remaining, READ_SLICE))
            except Exception as exc:  # redis errors: drop the connection, poll instead
                log.debug("release listener on %s failed: %s", channel, exc)
                self._reset()
                # Sleep out the wait as a polling store would: a listener that
                # cannot subscribe (say, an ACL without channel rights) must not
                # turn the caller's wait loop into a busy loop.
                time.sleep(max(0.0, deadline - time.monotonic()))
                return False
            finally:
                with self._cond:
                    if self._pubsub is not None:
                        self._channels.update(subscribe)
                    self._busy = False
                    self._cond.notify_all()

    def _connection(self) -> Any:
        if self._pubsub is None:
            self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        return self._pubsub

    def _read(self, timeout: float) -> None:
        message = self._connection().get_message(timeout=timeout)
        while message is not None:
            if message.get("type") == "message":
                channel = message["channel"]
                if isinstance(channel, bytes):
                    channel = channel.decode()
                with self._cond:
                    self._seen[channel] = self._seen.get(channel, 0) + 1
                    self._cond.notify_all()
            message = self._connection().get_message(timeout=0.0)

    def _forget_after_fork(self) -> None:
        # A forked child must not read the parent's socket: start afresh.
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._pubsub = None
            self._channels.clear()
            self._pending.clear()
            self._busy = False

    def _reset(self) -> None:
        with self._cond:
            pubsub, self._pubsub = self._pubsub, None
            self._channels.clear()
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:
                log.debug("closing the release listener failed", exc_info=True)

    def close(self) -> None:
        with self._cond:
            if self._pid != os.getpid():
                self._pubsub = None
                return
        self._reset()
