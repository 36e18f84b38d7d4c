"""Which lease store a flow uses, decided when a run starts, not at import.

A flow module is imported by the scheduler, by ``serve()``, by workers and by
the UI's parameter parser; none of those should open a database connection
or read a secret. So ``store=`` is checked for shape when the flow is
decorated and resolved to a live store only inside the run: a URL, a
``LeaseStoreBlock`` (or ``"block:<name>"``), a ready ``LeaseStore``, or
nothing (``$LEASE_STORE_URL``, else the embedded SQLite file).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from lease_integrations import ConfigurationError, LeaseStore, check_url, connect
from lease_integrations.core import mask_url

from .block import LeaseStoreBlock
from .default_store import refuse_per_host_default

BLOCK_PREFIX = "block:"

# Stores opened by runs in this process, by URL: runs of a served flow or a
# test loop reuse one connection pool instead of opening one per run.
_opened: dict[tuple[int, str], LeaseStore] = {}
_opened_lock = threading.Lock()


class StoreSource:
    """What the user passed as ``store=``, resolvable to a live store."""

    def __init__(self, spec: Any) -> None:
        self.block_name: str | None = None
        self.block: LeaseStoreBlock | None = None
        self.url: str | None = None
        self.instance: LeaseStore | None = None
        if spec is None:
            pass
        elif isinstance(spec, LeaseStore):
            self.instance = spec
        elif isinstance(spec, LeaseStoreBlock):
            self.block = spec
        elif isinstance(spec, str) and spec.startswith(BLOCK_PREFIX):
            name = spec[len(BLOCK_PREFIX):].strip()
            if not name:
                raise ConfigurationError(f"store={spec!r} names no block; use 'block:<block name>'")
            self.block_name = name
        elif isinstance(spec, str):
            self.url = _checked_url(spec)
        else:
            raise ConfigurationError(
                "store must be a URL, 'block:<name>', a LeaseStoreBlock or a LeaseStore, "
                f"got {type(spec).__name__}: {spec!r}"
            )

    def describe(self, store: LeaseStore) -> str:
        """The store a run actually uses (``store`` is what ``open()`` gave),
        password masked, and where it came from."""
        url = mask_url(store.url)
        if self.instance is not None:
            return url
        if self.block is not None:
            return f"{url} from block {getattr(self.block, '_block_document_name', None) or '(unsaved)'}"
        if self.block_name is not None:
            return f"{url} from block {self.block_name}"
        if self.url is not None:
            return url
        if os.environ.get("LEASE_STORE_URL"):
            return f"{url} from $LEASE_STORE_URL"
        return f"{url}, the embedded per-host default"

    def open(self) -> LeaseStore:
        """The live store for this run. Blocks are loaded afresh each run, so
        an edited block takes effect without a redeploy."""
        if self.instance is not None:
            return self.instance
        if self.block is not None:
            url = self.block.get_url()
        elif self.block_name is not None:
            url = LeaseStoreBlock.load(self.block_name, _sync=True).get_url()
        else:
            url = self.url or os.environ.get("LEASE_STORE_URL") or ""
            if not url:
                refuse_per_host_default()
        return _open_cached(url)

    def __getstate__(self) -> dict[str, Any]:
        # serve() and workers ship the flow to a fresh process by pickling it;
        # a live store (sockets, locks) cannot travel, a URL or block name can.
        if self.instance is not None:
            raise TypeError(
                f"a leased flow with a live store object ({self.instance.url}) cannot be sent "
                "to another process (serve(), deploy(), workers): pass store= as a URL, "
                "'block:<name>' or a LeaseStoreBlock instead"
            )
        return dict(self.__dict__)


def _checked_url(url: str) -> str:
    """Shape only: a scheme we know and a parseable port. Connecting waits for a run."""
    return check_url(url)


def _open_cached(url: str) -> LeaseStore:
    """``connect(url)`` once per URL per process (``""`` means connect's default)."""
    cache_key = (os.getpid(), url)
    with _opened_lock:
        store = _opened.get(cache_key)
        if store is None:
            store = connect(url or None)
            _opened[cache_key] = store
        return store
