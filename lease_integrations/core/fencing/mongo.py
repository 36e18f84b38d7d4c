"""The MongoDB fencing guard: the token check and the write are one
conditional update on the caller's own document.

``fence.update_one(orders, {"_id": 42}, {"$set": {"state": "paid"}}, lease.token)``
adds "the document's fence field is at most this token" to the filter and
stamps the token in the same update. A writer whose token is older matches
nothing, and the guard raises ``StaleToken`` instead of reporting a silent
no-op. ``guard`` and ``stamp`` give the two halves for callers who build
their own operation (``find_one_and_update``, bulk writes).

pymongo is imported only when needed, so the core stays dependency-free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError, StaleToken

_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


class MongoFence:
    """Keeps the newest accepted token in a field of each fenced document."""

    def __init__(self, field: str = "fence_token") -> None:
        if not isinstance(field, str) or not _FIELD.fullmatch(field):
            raise ConfigurationError(
                f"fence field name {field!r} must be a plain top-level field name "
                "(letters, digits, underscore; no '$' or '.')")
        self.field = field

    def guard(self, filter: Mapping[str, Any], token: int) -> dict[str, Any]:
        """``filter`` narrowed to documents that accept ``token``: never fenced,
        or fenced with a token no newer than this one."""
        _check_token(token)
        accepts = {"$or": [{self.field: {"$exists": False}}, {self.field: None},
                           {self.field: {"$lte": token}}]}
        return {"$and": [dict(filter), accepts]}

    def stamp(self, update: Mapping[str, Any] | Sequence[Mapping[str, Any]],
              token: int) -> dict[str, Any] | list[dict[str, Any]]:
        """``update`` that also records ``token`` as the document's newest."""
        _check_token(token)
        if isinstance(update, Mapping):
            stamped = {op: dict(fields) for op, fields in update.items()}
            if self.field in stamped.get("$set", {}):
                raise ConfigurationError(f"the update must not set the fence field {self.field!r}")
            stamped.setdefault("$set", {})[self.field] = token
            return stamped
        return [dict(stage) for stage in update] + [{"$set": {self.field: {"$literal": token}}}]

    def update_one(self, collection: Any, filter: Mapping[str, Any],
                   update: Mapping[str, Any] | Sequence[Mapping[str, Any]], token: int,
                   **kwargs: Any) -> Any:
        """``collection.update_one`` guarded by ``token``: raises ``StaleToken``
        when the document has already accepted a newer token. Returns pymongo's
        ``UpdateResult``. With ``upsert=True`` the filter must name a unique
        key (``_id``), so a stale writer collides instead of inserting a copy."""
        from pymongo.errors import DuplicateKeyError

        try:
            result = collection.update_one(self.guard(filter, token), self.stamp(update, token),
                                           **kwargs)
        except DuplicateKeyError:
            newest = self.newest(collection, filter)
            if newest is not None and newest > token:
                raise StaleToken(_resource(collection, filter), token, newest) from None
            raise
        if result.matched_count or result.upserted_id is not None:
            return result
        newest = self.newest(collection, filter)
        if newest is not None and newest > token:
            raise StaleToken(_resource(collection, filter), token, newest)
        return result  # no such document: nothing was fenced and nothing written

    def newest(self, collection: Any, filter: Mapping[str, Any]) -> int | None:
        """The newest token the matching document has accepted, or None."""
        doc = collection.find_one(dict(filter), {self.field: 1})
        value = (doc or {}).get(self.field)
        return int(value) if isinstance(value, int) else None


def _check_token(token: object) -> None:
    if isinstance(token, bool) or not isinstance(token, int) or token < 1:
        raise ConfigurationError(f"fencing token must be a positive integer, got {token!r}")


def _resource(collection: Any, filter: Mapping[str, Any]) -> str:
    return f"{getattr(collection, 'full_name', collection)} {dict(filter)}"
