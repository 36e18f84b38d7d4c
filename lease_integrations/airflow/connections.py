"""Airflow Connection -> lease store URL.

Users already keep credentials in Airflow Connections (UI, secrets backends,
``AIRFLOW_CONN_*`` variables); a lease store should be one more Connection,
not a URL pasted into DAG code. The mapping is pure (fields in, URL out) so it
can be checked without a server; the lookup goes through Airflow (the Task
SDK on 3.x, ``airflow.models.Connection`` on 2.11), so it
honours every secrets backend Airflow does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from lease_integrations import ConfigurationError

DEFAULT_CONN_ID = "lease_default"

#: Connection extras passed to the store URL as query options, per type. Other
#: extras belong to Airflow's own hooks (the same Connection may serve both) and
#: are ignored; ``lease_options`` (a JSON object) passes anything else verbatim.
PASSTHROUGH: dict[str, tuple[str, ...]] = {
    "redis": ("prefix", "socket_timeout", "connect_timeout", "max_connections"),
    "postgres": ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout",
                 "statement_timeout", "table"),
    "mongo": ("authSource", "replicaSet", "tls", "tlsCAFile", "collection"),
    "sqlite": ("timeout",),
}
ALIASES = {"postgresql": "postgres", "mongodb": "mongo", "rediss": "redis"}
#: How a flag extra (``ssl``, ``srv``) may be written: the spellings Airflow
#: reads as true or false (``airflow.utils.strings.to_boolean``: case and
#: surrounding spaces ignored), JSON true/false, and the numbers 1 and 0
#: (which Airflow's providers pass on to their clients as true and false).
#: Anything else is refused: a typo must not silently mean "no TLS".
TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
FALSE = frozenset({"0", "false", "f", "no", "n", "off", ""})


class ConnectionLike(Protocol):
    conn_id: str
    conn_type: str | None
    host: str | None
    schema: str | None
    login: str | None
    password: str | None
    port: int | None

    @property
    def extra_dejson(self) -> dict[str, Any]: ...


def store_url_from_connection(conn: ConnectionLike) -> str:
    """The store URL a Connection describes (password included: never log it
    unmasked, see ``lease_integrations.core.config.mask_url``)."""
    kind = ALIASES.get((conn.conn_type or "").lower(), (conn.conn_type or "").lower())
    extra = dict(conn.extra_dejson or {})
    if kind == "sqlite":
        return _sqlite_url(conn, extra)
    if kind == "redis":
        db = extra.get("db", conn.schema or 0)
        scheme = "rediss" if _flag(conn, extra, "ssl") or conn.conn_type == "rediss" else "redis"
        return _network_url(scheme, conn, f"/{db}", _options(kind, conn, extra))
    if kind == "postgres":
        path = f"/{quote(conn.schema, safe='')}" if conn.schema else ""
        return _network_url("postgresql", conn, path, _options(kind, conn, extra))
    if kind == "mongo":
        srv = _flag(conn, extra, "srv")
        options = _options(kind, conn, extra)
        if _flag(conn, extra, "ssl") and "tls" not in options:
            options["tls"] = "true"
        path = f"/{quote(conn.schema, safe='')}" if conn.schema else ""
        return _network_url("mongodb+srv" if srv else "mongodb", conn, path, options,
                            with_port=not srv)
    generic = (" (Airflow's CLI stores 'generic' when --conn-type names a type no installed "
               "provider registers, as 'redis' on Airflow 2.11 without the Redis provider: add "
               "it with --conn-json '{\"conn_type\": \"redis\", \"host\": ...}', which keeps "
               "the type)") if kind in ("generic", "") else ""
    raise ConfigurationError(
        f"connection {conn.conn_id!r} has type {conn.conn_type!r}; a lease store connection "
        f"must be of type redis, postgres, mongo or sqlite{generic}"
    )


def _sqlite_url(conn: ConnectionLike, extra: Mapping[str, Any]) -> str:
    # Airflow's own sqlite connections put the file in ``host``; accept ``schema`` too.
    raw = conn.host or conn.schema or ""
    if not raw:
        raise ConfigurationError(
            f"sqlite connection {conn.conn_id!r} names no database file; put its absolute "
            "path in the Host field"
        )
    if not PurePosixPath(raw).is_absolute():
        raise ConfigurationError(
            f"sqlite connection {conn.conn_id!r} has the relative path {raw!r}; use an "
            "absolute path (a relative one would differ between the worker and the triggerer)"
        )
    options = _options("sqlite", conn, extra)
    return f"sqlite://{raw}" + (f"?{urlencode(options)}" if options else "")


def _network_url(scheme: str, conn: ConnectionLike, path: str, options: dict[str, str], *,
                 with_port: bool = True) -> str:
    if not conn.host:
        raise ConfigurationError(f"{scheme} connection {conn.conn_id!r} has no host")
    auth = ""
    if conn.login or conn.password:
        auth = quote(conn.login or "", safe="")
        if conn.password:
            auth += ":" + quote(conn.password, safe="")
        auth += "@"
    host = f"[{conn.host}]" if ":" in conn.host and not conn.host.startswith("[") else conn.host
    port = f":{int(conn.port)}" if conn.port and with_port else ""
    query = f"?{urlencode(options)}" if options else ""
    return f"{scheme}://{auth}{host}{port}{path}{query}"


def _options(kind: str, conn: ConnectionLike, extra: Mapping[str, Any]) -> dict[str, str]:
    options = {k: _text(extra[k]) for k in PASSTHROUGH[kind] if extra.get(k) not in (None, "")}
    verbatim = extra.get("lease_options", {})
    if isinstance(verbatim, str):
        try:
            verbatim = json.loads(verbatim)
        except ValueError:
            verbatim = None
    if not isinstance(verbatim, dict):
        raise ConfigurationError(
            f"extra 'lease_options' of connection {conn.conn_id!r} must be a JSON object, "
            f"got {extra.get('lease_options')!r}"
        )
    options.update({str(k): _text(v) for k, v in verbatim.items()})
    return options


def _flag(conn: ConnectionLike, extra: Mapping[str, Any], name: str) -> bool:
    """The flag extra ``name``: absent or null is false; see ``TRUE``/``FALSE``."""
    value = extra.get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    if type(value) is int and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE | FALSE:
        return value.strip().lower() in TRUE
    raise ConfigurationError(
        f"extra {name!r} of connection {conn.conn_id!r} must be true or false (also: yes/no, "
        f"on/off, 1/0, t/f, y/n), got {value!r}")


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolve_store_url(conn_id: str) -> str | None:
    """The store URL of Connection ``conn_id``, looked up through Airflow
    (metadata DB, secrets backends, ``AIRFLOW_CONN_*``). None means "use the
    default" (``$LEASE_STORE_URL`` or the embedded SQLite file): allowed only
    for the default id, because a typo in an explicit id must not silently
    split the leases across two stores, and the embedded file only under a
    local executor (see ``default_store``)."""
    from ._compat import AirflowNotFoundException, get_connection

    try:
        conn = get_connection(conn_id)
    except AirflowNotFoundException:
        _check_default(conn_id)
        return None
    return store_url_from_connection(conn)


async def resolve_store_url_async(conn_id: str) -> str | None:
    """``resolve_store_url`` for the triggerer's event loop."""
    from ._compat import AirflowNotFoundException, get_connection_async

    try:
        conn = await get_connection_async(conn_id)
    except AirflowNotFoundException:
        _check_default(conn_id)
        return None
    return store_url_from_connection(conn)


def console_store_url(conn_id: str) -> str:
    """The store URL of Connection ``conn_id`` for a process that is not a task
    (``leasectl``), asked of each secrets backend in Airflow's order (a
    configured backend, ``AIRFLOW_CONN_*``, the metadata database). Outside a
    task the Task SDK's ``Connection.get`` reads the environment alone, so a
    Connection made with ``airflow connections add`` looked undefined and the
    console read the default store instead. Never None: a console that cannot
    find the Connection says so (``NoSuchConnection``, with where it looked
    and which backend failed) rather than guess a store."""
    from ._compat import ACCESS_DENIED, secrets_backends

    searched: list[str] = []
    failures: list[str] = []
    for backend in secrets_backends():
        name = type(backend).__name__
        searched.append(name)
        try:
            conn = backend.get_connection(conn_id=conn_id)
        except ACCESS_DENIED:
            raise
        except Exception as exc:  # Airflow, too, goes on to the next backend
            failures.append(f"{name} failed ({_first_line(exc)})")
            continue
        if conn is not None:
            return store_url_from_connection(conn)
    raise NoSuchConnection(conn_id, searched=tuple(searched), failures=tuple(failures))


_CREDENTIALS = re.compile(r"(\w[\w+.-]*://)[^\s/@]*@")


def _first_line(exc: BaseException) -> str:
    """A backend's error, short, with any ``scheme://user:pass@`` masked."""
    line = _CREDENTIALS.sub(r"\1***@", (str(exc).strip().splitlines() or [""])[0][:200])
    return f"{type(exc).__name__}: {line}"


def _check_default(conn_id: str) -> None:
    if conn_id == DEFAULT_CONN_ID:
        from .default_store import refuse_per_host_default

        refuse_per_host_default(conn_id)
        return
    raise NoSuchConnection(conn_id)


class NoSuchConnection(ConfigurationError):
    """``lease_conn_id`` names an Airflow connection that is not defined. The
    message names the operator's parameter; ``leasectl --airflow-conn``
    catches it and names its flag instead (``conn_id``)."""

    def __init__(self, conn_id: str, *, searched: tuple[str, ...] = (),
                 failures: tuple[str, ...] = ()) -> None:
        super().__init__(
            f"lease_conn_id={conn_id!r}: no such Airflow connection (define it, or leave "
            f"lease_conn_id at {DEFAULT_CONN_ID!r} to use $LEASE_STORE_URL or the embedded "
            "store)")
        self.conn_id = conn_id
        #: The secrets backends asked, and those that failed (``console_store_url``).
        self.searched = searched
        self.failures = failures

    def __reduce__(self) -> tuple[Any, ...]:
        # Airflow pickles a failed try's exception.
        return type(self), (self.conn_id,), self.__dict__
