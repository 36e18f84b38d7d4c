"""The eviction-policy check a Redis server must pass before it may hold leases.

The eviction policy: the lease hash holds the token counter, so a server
that may evict it could grant a token twice (the clock floor then saves the
token's order but not exclusion, see docs/concepts/tokens-and-identity.md)
or hand a held lease to a second holder. None of the store's keys carries a
TTL, so the ``volatile-*`` policies (which evict only keys with a TTL) and
``noeviction`` never touch them; ``allkeys-*`` policies may. The policy is
read from ``INFO memory``, which managed services allow where ``CONFIG GET``
is disabled. Connection code (plain, TLS, Sentinel, Cluster) calls
``check_eviction_policy`` once per server it will write leases to.
"""

from __future__ import annotations

from typing import Any

import redis

from ..core.errors import ConfigurationError, StoreUnavailable

#: Policies that never evict a key without a TTL (all of ours).
SAFE_POLICIES = frozenset({"noeviction", "volatile-lru", "volatile-lfu", "volatile-random",
                           "volatile-ttl"})


def eviction_policy(client: Any) -> str | None:
    """The server's ``maxmemory_policy`` from ``INFO memory`` (None when the
    server does not report it). On a Redis Cluster client, INFO goes to
    every primary and the least safe answer wins."""
    info = client.info("memory")
    policies: set[str] = set()
    if isinstance(info, dict) and "maxmemory_policy" not in info:
        # RedisCluster: {node name: info dict}
        policies = {str(v.get("maxmemory_policy")) for v in info.values()
                    if isinstance(v, dict) and v.get("maxmemory_policy")}
    elif isinstance(info, dict):
        policies = {str(info["maxmemory_policy"])}
    unsafe = sorted(p for p in policies if p not in SAFE_POLICIES)
    if unsafe:
        return unsafe[0]
    return min(policies) if policies else None


def check_eviction_policy(client: Any, *, url: str = "redis://",
                          allow_eviction: bool = False) -> str | None:
    """Refuse a server whose eviction policy may drop lease keys
    (``allkeys-*``) with a ``ConfigurationError`` naming the fix, unless the
    user opted out knowingly (``allow_eviction=true`` in the URL). Returns
    the policy found. ``url`` must already be masked."""
    try:
        policy = eviction_policy(client)
    except redis.exceptions.NoPermissionError:
        return None  # an ACL without INFO: nothing to read, nothing to refuse
    except redis.RedisError as exc:
        raise StoreUnavailable(f"cannot read Redis INFO memory: {type(exc).__name__}: {exc}",
                               url=url) from None
    if policy is None or policy in SAFE_POLICIES or allow_eviction:
        return policy
    raise ConfigurationError(
        f"Redis at {url!r} runs maxmemory-policy {policy}, which may evict lease records "
        "and so hand a held lease to a second holder; set `maxmemory-policy noeviction` "
        "(or a volatile-* policy: the lease keys carry no TTL), or add allow_eviction=true "
        "to the store URL to accept that risk knowingly"
    )
