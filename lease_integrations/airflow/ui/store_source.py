"""Which lease store the page shows: the one the tasks use.

A page that read a different store than the tasks would show an empty table
while a job is stuck, so it resolves the URL exactly as
``LeasedPythonOperator`` does: the ``lease_default`` Airflow Connection
(metadata DB, secrets backends, ``AIRFLOW_CONN_*``), else
``$LEASE_STORE_URL``, else the embedded per-host SQLite file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from lease_integrations import LeaseStore, connect
from lease_integrations.core import mask_url, resolve_url

from ..connections import DEFAULT_CONN_ID, resolve_store_url

#: The variable ``connect()`` reads when no URL is given (core/config.py).
ENV_URL = "LEASE_STORE_URL"


@dataclass(frozen=True)
class StoreSource:
    """Where the URL came from, and the URL with its password masked."""

    origin: str
    masked_url: str
    per_host: bool

    @property
    def kind(self) -> str:
        """The store's kind (its URL's scheme: ``redis``, ``postgresql``...)."""
        return self.masked_url.partition("://")[0] or "unknown"


def conn_id() -> str:
    """The Connection the page reads; ``[lease_integrations] ui_conn_id``
    points it elsewhere when the tasks use a non-default ``lease_conn_id``."""
    from airflow.configuration import conf

    return str(conf.get("lease_integrations", "ui_conn_id", fallback=DEFAULT_CONN_ID) or DEFAULT_CONN_ID)


def locate() -> tuple[str, StoreSource]:
    """The store URL (password included: never show it) and where it came from."""
    conn = conn_id()
    url = resolve_store_url(conn)
    if url is not None:
        origin = f"Airflow Connection {conn!r}"
    elif os.environ.get(ENV_URL):
        origin = f"${ENV_URL}"
    else:
        origin = "the embedded default (a SQLite file on the api-server's host)"
    resolved = resolve_url(url)
    per_host = url is None and not os.environ.get(ENV_URL)
    return resolved, StoreSource(origin, mask_url(resolved), per_host)


@contextmanager
def open_store() -> Iterator[tuple[LeaseStore, StoreSource]]:
    """A store for one request, closed afterwards: resolving per request lets
    an edited Connection take effect without restarting the api-server."""
    url, source = locate()
    store = connect(url)
    try:
        yield store, source
    finally:
        store.close()
