"""Store registry: a URL scheme names the store class that serves it.

Store modules are imported only when their scheme is used, so the core and
the embedded store need no third-party package.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core.config import (
    ENV_URL,
    PATH_SCHEMES,
    check_credentials,
    check_slashes,
    mask_url,
    parse_url,
    resolve_url,
)
from ..core.errors import ConfigurationError
from ..core.sources import remember_source
from ..core.store import LeaseStore

#: scheme -> "module:Class"
STORES: dict[str, str] = {
    "memory": "lease_integrations.stores.memory:MemoryStore",
    "sqlite": "lease_integrations.stores.sqlite:SqliteStore",
    "redis": "lease_integrations.stores.redis:RedisStore",
    "rediss": "lease_integrations.stores.redis:RedisStore",
    "redis+cluster": "lease_integrations.stores.redis:RedisStore",
    "rediss+cluster": "lease_integrations.stores.redis:RedisStore",
    "redis+sentinel": "lease_integrations.stores.redis:RedisStore",
    "rediss+sentinel": "lease_integrations.stores.redis:RedisStore",
    "postgresql": "lease_integrations.stores.postgres:PostgresStore",
    "postgres": "lease_integrations.stores.postgres:PostgresStore",
    "mongodb": "lease_integrations.stores.mongo:MongoStore",
    "mongodb+srv": "lease_integrations.stores.mongo:MongoStore",
    "s3": "lease_integrations.stores.s3:S3Store",
}

#: extra that installs a store's client library, for the error message
EXTRAS = {"redis": "redis", "rediss": "redis", "redis+cluster": "redis",
          "rediss+cluster": "redis", "redis+sentinel": "redis", "rediss+sentinel": "redis",
          "postgresql": "postgres",
          "postgres": "postgres", "mongodb": "mongo", "mongodb+srv": "mongo", "s3": "s3"}


#: schemes whose URLs list several hosts (``host:port,host:port``): the store
#: parses those itself, a single port does not describe them.
MULTI_HOST = {"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}


def _scheme(url: str) -> str:
    head = url.partition("://")[0].lower()
    if head in MULTI_HOST:
        # parse_url's port check does not fit a host list, but its check of the
        # user-info does: without it a raw '/' or '@' in the password sends
        # pieces of it into the host-list parser's errors.
        check_credentials(url)
        return head
    return parse_url(url).scheme.lower()


KNOWN = ", ".join(f"{s}://" for s in STORES)
#: Schemes whose URL names a host (``scheme://host...``); the others name a
#: file or a name and may omit ``//`` (``sqlite:relative/path.db``).
HOST_SCHEMES = frozenset(STORES) - PATH_SCHEMES


@contextmanager
def naming_the_variable(url: object) -> Iterator[None]:
    """A URL that came from ``$LEASE_STORE_URL`` (no URL given): its errors
    say so, since the caller wrote no URL and would look for one in vain."""
    if url is not None or not os.environ.get(ENV_URL, "").strip():
        yield
        return
    try:
        yield
    except ConfigurationError as exc:
        raise ConfigurationError(f"${ENV_URL} (the store URL when none is given): {exc}") \
            from None


def check_url(url: str | None) -> str:
    """Check a store URL's shape without connecting: a scheme we know and a
    parseable port. For checks at DAG-parse or decoration time, where
    connecting would be too early. Returns the URL, stripped."""
    with naming_the_variable(url):
        resolved = resolve_url(url)
        check_slashes(resolved, HOST_SCHEMES)
        try:
            scheme = _scheme(resolved)
        except ConfigurationError as exc:
            if "has no scheme" not in str(exc):
                raise
            raise ConfigurationError(
                f"store URL {mask_url(resolved)!r} has no scheme; known: {KNOWN} "
                "(sqlite:///absolute/path.db or sqlite:relative/path.db)") from None
        if scheme not in STORES:
            raise ConfigurationError(
                f"unknown store scheme {scheme!r} in URL {mask_url(resolved)!r}; known: {KNOWN}"
            )
        return resolved


def connect(url: str | None = None, **options: Any) -> LeaseStore:
    """Open the store a URL names.

    With no URL, reads ``$LEASE_STORE_URL``, else uses the embedded SQLite
    file in the user's state directory (under ``$AIRFLOW_HOME`` when set).
    Bad URLs and unknown options raise ``ConfigurationError`` here, before any
    job starts.
    """
    if isinstance(url, LeaseStore):
        return url
    if getattr(getattr(url, "dialect", None), "name", None) == "postgresql":
        # A SQLAlchemy engine (an Airflow SQL connection's, say): reuse its settings.
        from .postgres import PostgresStore

        return PostgresStore.from_engine(url, **options)
    with naming_the_variable(url):
        resolved = check_url(resolve_url(url))
        scheme = _scheme(resolved)
        module_name, class_name = STORES[scheme].split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            extra = EXTRAS.get(scheme, scheme)
            raise ConfigurationError(
                f"the {scheme}:// store needs an extra package: from the checkout, "
                f"pip install -e '<checkout>[{extra}]' ({exc})"
            ) from None
        store_class = getattr(module, class_name)
        store: LeaseStore = store_class.from_url(resolved, **options)
        if store_class.opens_elsewhere:
            remember_source(store, store.url_elsewhere(resolved), options)
        return store


__all__ = ["STORES", "check_url", "connect", "naming_the_variable"]
