"""Heartbeat renewals on a Redis Cluster: one round trip per node, not per lease.

Every lease key carries its own hash tag, so each lease lives in its own slot
and one script cannot renew several of them (a script's keys must share a
slot). redis-py's cluster pipeline refuses ``EVALSHA`` altogether. So the
batch is split by the primary that owns each key's slot (the client's slot
map), and each node gets its leases' ``EVALSHA RENEW`` calls written as one
pipelined request on a connection of that node's own pool. Every node's
request is written before any reply is read, so the nodes work in parallel
and the batch costs about one round trip, whatever the number of nodes.

Each lease is still judged on its own by the same ``RENEW`` script. A lease
whose node did not give a verdict is reported as ``None`` (not renewed, not
refused), never as ``False``, which would declare it lost:

- ``NOSCRIPT`` (the node restarted or flushed its scripts): the script is
  loaded on that node and its leases are sent once more, pipelined again.
- ``MOVED`` / ``ASK`` (the slot map changed): those leases go through the
  cluster client one by one, which follows the redirection and patches the
  slot map the next batch is grouped by.
- A connection error or timeout on a node, ``CLUSTERDOWN`` or ``TRYAGAIN``:
  those leases are ``None`` and the slot map is read again (a failover
  promotes a replica), so the next batch goes to the new owner. They are not
  retried here: a dead node would cost a connect timeout per lease, and the
  cluster client answers ``CLUSTERDOWN`` with a pause and a map re-read per
  call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from . import redis_wire
from .redis_pool import get_connection

log = logging.getLogger("lease_integrations")

#: Replies that mean "ask the cluster client, it knows how to follow this"
#: (MovedError is an AskError).
_REDIRECTED = (AskError,)
#: Replies that leave the lease without a verdict and the slot map in doubt:
#: the cluster client would sleep and re-read the map for each lease.
_UNSETTLED = (ClusterDownError, TryAgainError)
_LOST_LINK = (ConnectionError, TimeoutError)

#: One lease's arguments to RENEW: record key, secret, token, ttl in ms.
Call = tuple[str, str, str, str]


def renew_per_node(client: Any, script: Any, calls: Sequence[Call]) -> list[bool | None]:
    """Renew ``calls`` on the Cluster ``client`` with the registered ``RENEW``
    ``script``: True renewed, False refused, None no verdict (see module)."""
    out: list[bool | None] = [None] * len(calls)
    redirected: list[int] = []
    groups = _by_node(client, calls, range(len(calls)), redirected)
    noscript = _send(client, script, calls, groups, out, redirected)
    if noscript:
        for node, _ in noscript:
            try:
                client.get_redis_connection(node).script_load(script.script)
            except RedisError as exc:  # the retry below then leaves those leases at None
                log.debug("loading the renew script on %s failed: %s", node.name, exc)
        _send(client, script, calls, noscript, out, redirected)
    for i in redirected:  # rare: the slot moved; the client follows and learns the new map
        rec, secret, token, ttl = calls[i]
        try:
            out[i] = bool(script(keys=[rec], args=[secret, token, ttl], client=client))
        except (RedisError, RedisClusterException) as exc:
            log.debug("renewing %s after a redirection failed: %s", rec, exc)
    return out


def _by_node(client: Any, calls: Sequence[Call], indexes: Sequence[int] | range,
             redirected: list[int]) -> list[tuple[Any, list[int]]]:
    """The calls grouped by the primary owning each key's slot, in node-name
    order (so concurrent batches take node connections in the same order)."""
    groups: dict[str, tuple[Any, list[int]]] = {}
    for i in indexes:
        try:
            node = client.get_node_from_key(calls[i][0])
        except RedisClusterException:  # slot not covered in our map: let the client look
            redirected.append(i)
            continue
        groups.setdefault(node.name, (node, []))[1].append(i)
    return [groups[name] for name in sorted(groups)]


def _send(client: Any, script: Any, calls: Sequence[Call], groups: list[tuple[Any, list[int]]],
          out: list[bool | None], redirected: list[int]) -> list[tuple[Any, list[int]]]:
    """One pipelined request per node, all written before any is read. Fills
    ``out``; returns the (node, calls) that met NOSCRIPT."""
    held: list[tuple[Any, Any, Any, list[int]]] = []  # node, its Redis, connection, calls
    written = read = 0
    noscript: list[tuple[Any, list[int]]] = []
    lost: dict[str, str] = {}  # node name: its first error
    unwritten: set[int] = set()  # positions in held whose write failed
    try:
        for node, indexes in groups:
            node_redis = client.get_redis_connection(node)
            try:
                connection = get_connection(node_redis.connection_pool)
            except _LOST_LINK as exc:
                lost.setdefault(node.name, str(exc))
                continue
            held.append((node, node_redis, connection, indexes))
        for n, (node, _, connection, indexes) in enumerate(held):
            packed = redis_wire.pack_one_key_calls(script.sha, [calls[i] for i in indexes])
            try:
                connection.send_packed_command((packed,))
            except _LOST_LINK as exc:
                lost.setdefault(node.name, str(exc))
                connection.disconnect()
                unwritten.add(n)
            written += 1
        for n, (node, _, connection, indexes) in enumerate(held):
            missing: list[int] = []
            for i in [] if n in unwritten else indexes:
                try:
                    out[i] = bool(connection.read_response())
                except NoScriptError:
                    missing.append(i)
                except _REDIRECTED:
                    redirected.append(i)
                except _UNSETTLED as exc:
                    lost.setdefault(node.name, str(exc))
                except _LOST_LINK as exc:
                    lost.setdefault(node.name, str(exc))
                    connection.disconnect()
                    break
                except ResponseError as exc:  # any other refusal: no verdict for this lease
                    log.debug("renewing %s on %s: %s", calls[i][0], node.name, exc)
            if missing:
                noscript.append((node, missing))
            read += 1
    finally:
        for n, (_, node_redis, connection, _) in enumerate(held):
            if written > n >= read:  # written but not read: its replies would confuse the next user
                connection.disconnect()
            node_redis.connection_pool.release(connection)
    if lost:
        log.debug("renewals without a verdict, re-reading the slot map: %s", lost)
        try:
            client.nodes_manager.initialize()
        except (RedisError, RedisClusterException) as exc:
            log.debug("re-reading the Cluster slot map failed: %s", exc)
    return noscript
