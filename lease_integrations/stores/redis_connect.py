"""Redis URLs and clients: one server, a Cluster, or a Sentinel-managed primary.

URL forms (TLS with ``rediss``)::

    redis://[user:pass@]host[:port][/db]
    redis+cluster://[user:pass@]host:port[,host:port...]
    redis+sentinel://[user:pass@]host:port[,host:port...]/service_name[/db]

Every client built here, and every client handed to ``RedisStore(client)``,
runs with automatic retries off: a retried acquire whose first reply was lost
(a timeout after the script ran) would find its own fresh lease and report it
busy. ``LeaseLock`` and the heartbeat retry at the level that knows what the
first attempt may have done.

Connections come from pools that *wait* for a free connection, first come
first served (``redis_pool``), bounded by the socket timeout, instead of
raising, and heartbeat renewals get a small pool of their own, so a store
object shared by hundreds of busy threads still renews its leases on time.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..core.config import check_credentials, mask_url, query_options
from ..core.errors import ConfigurationError, StoreUnavailable
from .redis_pool import FairBlockingConnectionPool
from .redis_sentinel import BlockingSentinelPool, ExplainingSentinel
from .redis_tls import OPTIONS as _TLS_OPTIONS
from .redis_tls import tls_hint, tls_options

log = logging.getLogger("lease_integrations")

DEFAULT_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 50
#: Connections kept for heartbeat renewals alone (per node on a Cluster).
RENEW_CONNECTIONS = 2

#: scheme -> (topology, tls)
SCHEMES: dict[str, tuple[str, bool]] = {
    "redis": ("single", False), "rediss": ("single", True),
    "redis+cluster": ("cluster", False), "rediss+cluster": ("cluster", True),
    "redis+sentinel": ("sentinel", False), "rediss+sentinel": ("sentinel", True),
}

_CONNECTION_OPTIONS: dict[str, type] = {
    "socket_timeout": float, "connect_timeout": float, "max_connections": int,
}
_SENTINEL_OPTIONS: dict[str, type] = {"sentinel_auth": bool}


def no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


@dataclass(frozen=True)
class RedisSettings:
    """What a Redis URL says, checked; ``store_options`` are the store's own
    (``prefix`` and whatever else ``RedisStore`` declares)."""

    url: str
    topology: str  # single | cluster | sentinel
    tls: bool
    nodes: tuple[tuple[str, int], ...]
    db: int
    service: str | None
    username: str | None
    password: str | None
    socket_timeout: float
    connect_timeout: float
    max_connections: int
    sentinel_auth: bool
    tls_options: Mapping[str, Any] = field(default_factory=dict)
    store_options: Mapping[str, Any] = field(default_factory=dict)


def _bad(url: str, why: str) -> ConfigurationError:
    return ConfigurationError(f"bad Redis URL {mask_url(url)!r}: {why}")


def _hosts(url: str, hostlist: str) -> tuple[tuple[str, int], ...]:
    """``host[:port][,host[:port]...]``; IPv6 hosts in brackets.

    Errors name the host by its position, never by its text: a password
    whose ``@`` was forgotten (``redis+cluster://:secret,h2:7001``) lands
    here as a host or a port, and ``mask_url`` already shows the list with
    such a port masked."""
    nodes = []
    for number, item in enumerate(hostlist.split(","), 1):
        item = item.strip()
        which = f"host {number} of the host list"
        if not item:
            raise _bad(url, f"{which} is empty")
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest.removeprefix(":") if rest.startswith(":") else ""
            if rest and not rest.startswith(":"):
                raise _bad(url, f"{which} is not [IPv6 address]:port")
        else:
            host, _, port_text = item.partition(":")
        if not host:
            raise _bad(url, f"{which} has no host name (a password goes before the '@': "
                            "scheme://user:password@host:port,host:port)")
        if port_text and (not port_text.isdigit() or not 0 < int(port_text) < 65536):
            raise _bad(url, f"bad port in {which}: it must be a number from 1 to 65535")
        nodes.append((host, int(port_text) if port_text else 6379))
    return tuple(nodes)


def _db(url: str, text: str) -> int:
    text = text or "0"
    if not text.isdigit() or int(text) > 1_000_000:
        raise _bad(url, f"the database must be a number like /0, got {text!r}")
    return int(text)


def parse(url: str, options: Mapping[str, Any], store_options: Mapping[str, type]) -> RedisSettings:
    """Check a Redis URL and the keyword options (which win over the URL's and
    pass the same checks); nothing connects here."""
    check_credentials(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        # urllib's text may quote the netloc, password included.
        raise _bad(url, "its host part cannot be parsed ([ ] are only for an IPv6 address; "
                        "no characters that change under Unicode normalisation)") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigurationError(f"not a Redis URL: {mask_url(url)!r}")
    topology, tls = SCHEMES[scheme]
    allowed: dict[str, type] = {**store_options, **_CONNECTION_OPTIONS,
                                **(_TLS_OPTIONS if tls else {}),
                                **(_SENTINEL_OPTIONS if topology == "sentinel" else {})}
    extra = urlencode({name: str(value) for name, value in options.items()})
    opts = query_options(parts._replace(query="&".join(q for q in (parts.query, extra) if q)),
                         allowed, url)
    max_connections = int(opts.pop("max_connections", DEFAULT_MAX_CONNECTIONS))  # type: ignore[call-overload]
    if not 1 <= max_connections <= 100_000:
        raise ConfigurationError(
            f"max_connections={max_connections} in {mask_url(url)!r} must be between 1 and 100000")

    userinfo, at, hostlist = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes = _hosts(url, hostlist) if hostlist else (("localhost", 6379),)
    path = [p for p in parts.path.split("/") if p]
    service = None
    if topology == "sentinel":
        if not path:
            raise _bad(url, "a Sentinel URL names the service: "
                            "redis+sentinel://host:port[,host:port]/service_name[/db]")
        service, path = unquote(path[0]), path[1:]
    if len(path) > 1:
        raise _bad(url, f"unexpected path {parts.path!r}")
    db = _db(url, path[0] if path else "")
    if topology == "cluster" and db != 0:
        raise _bad(url, "a Redis Cluster has database 0 only")
    if topology == "single" and len(nodes) > 1:
        raise _bad(url, "several hosts need redis+cluster:// or redis+sentinel://")

    checked_tls = tls_options(url, opts) if tls else {}
    return RedisSettings(
        url=url, topology=topology, tls=tls, nodes=nodes, db=db, service=service,
        username=username, password=password,
        socket_timeout=float(opts.pop("socket_timeout", DEFAULT_TIMEOUT)),  # type: ignore[arg-type]
        connect_timeout=float(opts.pop("connect_timeout", DEFAULT_TIMEOUT)),  # type: ignore[arg-type]
        max_connections=max_connections,
        sentinel_auth=bool(opts.pop("sentinel_auth", False)),
        tls_options=checked_tls, store_options=opts)


def _connection_kwargs(s: RedisSettings) -> dict[str, Any]:
    return {
        "username": s.username, "password": s.password,
        "socket_timeout": s.socket_timeout, "socket_connect_timeout": s.connect_timeout,
        "decode_responses": True, "retry": no_retry(),
    }


def _tls_kwargs(s: RedisSettings) -> dict[str, Any]:
    return {"ssl": True, **s.tls_options} if s.tls else {}


def _single(s: RedisSettings, size: int) -> redis.Redis:
    host, port = s.nodes[0]
    kwargs = {**_connection_kwargs(s), **dict(s.tls_options)}
    if s.tls:
        kwargs["connection_class"] = redis.SSLConnection
    pool = FairBlockingConnectionPool(
        host=host, port=port, db=s.db, max_connections=size, timeout=s.socket_timeout, **kwargs)
    return redis.Redis(connection_pool=pool)


def _cluster(s: RedisSettings, size: int) -> Any:
    from redis.cluster import ClusterNode, RedisCluster

    (host, port), *others = s.nodes
    # A URL (without credentials) is how redis-py lets a Cluster use a pool class
    # that waits; the other hosts are further startup nodes. ``rediss`` makes each
    # node's pool use SSLConnection, which takes no ``ssl`` argument. The pool
    # class carries the pool timeout and the TLS options itself: the Cluster
    # passes its nodes only the keywords its release lists (5.0 drops
    # ssl_check_hostname and timeout).
    bracketed = f"[{host}]" if ":" in host else host  # an IPv6 address
    first = f"{'rediss' if s.tls else 'redis'}://{bracketed}:{port}"
    kwargs = _connection_kwargs(s)
    del kwargs["retry"]  # RedisCluster takes it as its own argument
    pool_class = functools.partial(FairBlockingConnectionPool, timeout=s.socket_timeout,
                                   **s.tls_options)
    client: Any = RedisCluster(
        url=first, startup_nodes=[ClusterNode(h, p) for h, p in others],  # type: ignore[no-untyped-call]
        connection_pool_class=pool_class, max_connections=size, retry=no_retry(), **kwargs)
    if _cluster_retries(client):  # redis-py before 6.0 gives retry= to the nodes only
        client.cluster_error_retry_attempts = 0
    return client


def _sentinel(s: RedisSettings, size: int) -> redis.Redis:
    conn = _connection_kwargs(s)
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": s.socket_timeout, "socket_connect_timeout": s.connect_timeout,
        # redis.Redis() would retry each sentinel 10 times with backoff; the
        # manager tries the next sentinel instead.
        "retry": no_retry(), **_tls_kwargs(s)}
    if s.sentinel_auth:
        sentinel_kwargs.update(username=s.username, password=s.password)
    manager = ExplainingSentinel(list(s.nodes), sentinel_kwargs=sentinel_kwargs,
                                 db=s.db, **conn, **_tls_kwargs(s))
    # parse_settings refuses a Sentinel URL that names no service, so it is set here.
    assert s.service is not None
    client: redis.Redis = manager.master_for(
        s.service, connection_pool_class=BlockingSentinelPool, max_connections=size,
        timeout=s.socket_timeout)
    return client


def build_clients(s: RedisSettings) -> tuple[Any, Any]:
    """The store's client and the small one its heartbeat renews through."""
    make = {"single": _single, "cluster": _cluster, "sentinel": _sentinel}[s.topology]
    from redis.exceptions import RedisClusterException

    try:
        client = make(s, s.max_connections)
    except (redis.RedisError, RedisClusterException) as exc:  # a Cluster asks at once
        _refused_cluster(s, exc)
        raise StoreUnavailable(f"cannot reach Redis: {short_error(exc)}",
                               url=mask_url(s.url)) from None
    try:
        return client, make(s, RENEW_CONNECTIONS)
    except (redis.RedisError, RedisClusterException) as exc:
        client.close()
        raise StoreUnavailable(f"cannot reach Redis: {short_error(exc)}",
                               url=mask_url(s.url)) from None


def _refused_cluster(s: RedisSettings, exc: BaseException) -> None:
    """A Cluster client reads the slot map (CLUSTER SLOTS) and the command
    table (COMMAND) as it is built: a user without those rights, or a node
    that is not in cluster mode (redis-py reports both alike), is a
    configuration error, not an outage."""
    text = str(exc)
    if s.topology != "cluster" or not ("no permissions" in text or "not enabled" in text):
        return
    from . import redis_checks, redis_scripts

    rule = redis_checks.acl_rule(str(s.store_options.get("prefix", "lease")), redis_scripts.ALL,
                                 cluster=True)
    raise ConfigurationError(
        f"{mask_url(s.url)!r} did not answer as a Redis Cluster ({short_error(exc)}): the node "
        f"is not in cluster mode, or the user lacks +cluster|slots or +command. "
        f"The store's rule: ACL SETUSER <user> {rule}")


def short_error(exc: BaseException) -> str:
    """A redis-py error without the client reprs some of them carry (Sentinel's
    "No master found" appends every pool's settings)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.split(' : <')[0][:300]}{tls_hint(text)}"


# -- clients the user built -------------------------------------------------------


def is_cluster(client: Any) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def adopt_client(client: Any) -> None:
    """Check a client handed to ``RedisStore(client)`` and switch its automatic
    retries off (see the module docstring): the store owns the client from
    then on. Anything but a synchronous redis-py client is a ConfigurationError."""
    if not (isinstance(client, redis.Redis) or is_cluster(client)):
        raise ConfigurationError(
            f"RedisStore needs a redis.Redis, a Sentinel master_for() client or a "
            f"redis.cluster.RedisCluster, got {type(client).__name__}")
    if not getattr(client.get_encoder(), "decode_responses", False):
        raise ConfigurationError(
            "the Redis client for the lease store must be built with decode_responses=True")
    if isinstance(client, redis.Redis):
        retry = client.get_retry()
        retrying = retry is None or retry_count(retry) > 0
    else:  # a Cluster: redis-py before 6.0 has no .retry unless given retry=
        retry = getattr(client, "retry", None)
        retrying = retry is None or retry_count(retry) > 0 or _cluster_retries(client) > 0
    if retrying:
        log.debug("lease store: switching the Redis client's automatic retries off")
        _set_retry(client, no_retry())


def retry_count(retry: Retry) -> int:
    """How many times a redis-py ``Retry`` retries: ``get_retries()`` from
    redis-py 6.0 on; 5.x keeps the count in ``_retries``."""
    get = getattr(retry, "get_retries", None)
    return int(get() if get is not None else retry._retries)


def _cluster_retries(client: Any) -> int:
    """A Cluster's own retries of a failed command (reconnect, re-read the
    slot map, send again). redis-py before 6.0 counts them in
    ``cluster_error_retry_attempts`` (default 3), whatever its ``retry``;
    from 6.0 on its ``retry`` counts them and that attribute is gone."""
    return int(getattr(client, "cluster_error_retry_attempts", 0))


def _set_retry(client: Any, retry: Retry) -> None:
    if hasattr(client, "cluster_error_retry_attempts"):  # a Cluster on redis-py before 6.0
        client.cluster_error_retry_attempts = retry_count(retry)
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, redis.BlockingConnectionPool):
        client.set_retry(retry)
        return
    # redis-py 8.1's BlockingConnectionPool.set_retry reads attributes only the
    # plain pool has (AttributeError): update its settings and connections here.
    pool.connection_kwargs["retry"] = retry
    for connection in getattr(pool, "_connections", ()):
        if connection is not None:
            connection.retry = retry


def renew_client_for(client: Any) -> Any | None:
    """A small pool beside a plain ``redis.Redis`` the user built (same
    settings), for heartbeat renewals; None (share the client) otherwise."""
    pool: Any = getattr(client, "connection_pool", None)
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool,
                          FairBlockingConnectionPool):
        return None
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k != "retry"}
    renew_pool = FairBlockingConnectionPool(
        connection_class=pool.connection_class, max_connections=RENEW_CONNECTIONS,
        timeout=kwargs.get("socket_timeout") or DEFAULT_TIMEOUT, retry=no_retry(), **kwargs)
    return redis.Redis(connection_pool=renew_pool)


def wait_client_for(client: Any) -> Any | None:
    """A pool beside a plain ``redis.Redis`` for threads blocked in ``BLPOP``
    waiting for a release (one connection each while they wait, none kept
    idle beyond redis-py's pool); None (share the client) otherwise."""
    pool: Any = getattr(client, "connection_pool", None)
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool,
                          FairBlockingConnectionPool):
        return None
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k != "retry"}
    return redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=pool.connection_class, retry=no_retry(), **kwargs))


def socket_timeout_of(client: Any) -> float | None:
    """The client's socket timeout: a blocking command must return before it."""
    pool: Any = getattr(client, "connection_pool", None)
    if pool is None:  # RedisCluster keeps its settings per node
        found = getattr(client, "nodes_manager", None)
        kwargs = getattr(found, "connection_kwargs", {}) if found else {}
    else:
        kwargs = getattr(pool, "connection_kwargs", {})
    value = kwargs.get("socket_timeout", DEFAULT_TIMEOUT)
    return None if value is None else float(value)
