"""The Sentinel pieces the ``redis+sentinel://`` client is built from.

``ExplainingSentinel`` says why no primary was found. redis-py reports each
sentinel it could not ask inside ``MasterNotFoundError``, as the client's
repr on 5.x and as a bare ``network:ConnectionError`` on 8.x, so a TLS
certificate the sentinels' CA does not match read as "No master found for
'leases'", the same words as a service name the sentinels do not know.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool

from .redis_pool import FairBlockingConnectionPool


class BlockingSentinelPool(SentinelConnectionPool, FairBlockingConnectionPool):
    """Sentinel's pool (finds the primary, follows failovers) that waits
    for a free connection instead of raising."""


class _SentinelClient(redis.Redis):
    """A client for one sentinel that keeps why it last could not be asked."""

    last_error: str | None = None

    def sentinel_masters(self) -> Any:
        try:
            return super().sentinel_masters()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.last_error = str(exc)
            raise


class ExplainingSentinel(Sentinel):
    """``Sentinel`` whose ``MasterNotFoundError`` names each sentinel and its error."""

    def __init__(self, sentinels: list[tuple[str, int]], **kwargs: Any) -> None:
        super().__init__(sentinels, **kwargs)
        # Clients connect lazily: the ones just built are dropped unused.
        self._clients = [_SentinelClient(host, port, **self.sentinel_kwargs)
                         for host, port in sentinels]
        self.sentinels = list(self._clients)  # redis-py reorders this one

    def discover_master(self, service_name: str) -> tuple[str, int]:
        for sentinel in self._clients:
            sentinel.last_error = None
        try:
            found: tuple[str, int] = super().discover_master(service_name)
            return found
        except MasterNotFoundError:
            errors = [f"sentinel {s.connection_pool.connection_kwargs['host']}:"
                      f"{s.connection_pool.connection_kwargs['port']}: {s.last_error}"
                      for s in self._clients if s.last_error]
            why = "; ".join(errors) or "no sentinel knows a healthy primary by that name"
            raise MasterNotFoundError(f"No master found for {service_name!r} ({why})") from None
