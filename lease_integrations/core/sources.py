"""How each store was opened (its URL with its secrets, and options), noted
by ``connect()``, so that a second process (the keeper) can open the same
store. A store made from a client object the user built has no source."""

from __future__ import annotations

import json
import weakref
from typing import Any

from .store import LeaseStore

#: store -> (URL with its secrets, options).
_sources: weakref.WeakKeyDictionary[LeaseStore, tuple[str, dict[str, Any]]] = \
    weakref.WeakKeyDictionary()


def remember_source(store: LeaseStore, url: str, options: dict[str, Any]) -> None:
    """Note how ``store`` was opened. Options that do not survive JSON (an
    SSL context, say) leave the store without a source: kept in process."""
    try:
        json.dumps(options)
    except (TypeError, ValueError):
        return
    _sources[store] = (url, dict(options))


def source_of(store: LeaseStore) -> tuple[str, dict[str, Any]] | None:
    return _sources.get(store)


__all__ = ["remember_source", "source_of"]
