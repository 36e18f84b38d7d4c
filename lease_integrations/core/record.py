"""The lease record: the plain data a store keeps and returns."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from .errors import CorruptRecord

T = TypeVar("T")
LeaseState = Literal["held", "expired", "released"]


@dataclass(frozen=True)
class LeaseRecord:
    """A lease as the store saw it at ``observed_at`` (the store's own clock).

    ``holder`` is None once the lease was released (or broken); the record and
    its ``token`` are kept because the token counter must never go backwards.
    Expiry is judged against ``observed_at`` rather than the reader's clock,
    because only the store's clock decides who holds a lease.
    """

    key: str
    holder: str | None
    token: int
    acquired_at: datetime | None
    renewed_at: datetime | None
    expires_at: datetime | None
    observed_at: datetime
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> LeaseState:
        if self.holder is None or self.expires_at is None:
            return "released"
        if self.expires_at <= self.observed_at:
            return "expired"
        return "held"

    @property
    def held(self) -> bool:
        return self.state == "held"

    @property
    def expires_in(self) -> float | None:
        """Seconds until expiry by the store's clock (negative once expired)."""
        if self.holder is None or self.expires_at is None:
            return None
        return (self.expires_at - self.observed_at).total_seconds()


@dataclass(frozen=True)
class AcquireResult:
    """What one acquire attempt returns: the new lease on success, or the
    current record on ``busy`` (so the caller can name the holder without a
    second round trip), or None when the store only knows others got in first
    (an optimistic store whose every try lost a race to a free key)."""

    granted: bool
    record: LeaseRecord | None


def parse_field(key: str, name: str, parse: Callable[[Any], T], value: Any) -> T:
    """Parse one stored field, turning any parser error into ``CorruptRecord``
    naming the key and the field: a record someone overwrote by hand must not
    surface as a bare ``ValueError`` from deep inside a store."""
    try:
        return parse(value)
    except (ValueError, TypeError, OverflowError, KeyError, AttributeError) as exc:
        raise CorruptRecord(key, name, f"{type(exc).__name__}: {str(exc)[:200]}") from None


#: ``json.dumps(value, default=str)`` without building an encoder per call
#: (``dumps`` does, whenever it is given ``default``); ``encode`` is reentrant.
meta_to_json = json.JSONEncoder(default=str).encode

#: Values whose JSON round trip is the value itself (exact types: a str or
#: int subclass would come back as the base type).
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def meta_as_stored(meta: Any, meta_json: str | bytes) -> dict[str, Any]:
    """The meta a later read returns (its JSON round trip), for a granted
    record, without parsing ``meta_json`` back when the round trip cannot
    change it: the usual flat dict of names and numbers."""
    if all(type(k) is str and type(v) in _JSON_SCALARS for k, v in meta.items()):
        return dict(meta)
    result: dict[str, Any] = json.loads(meta_json)
    return result


def meta_from_json(text: Any) -> dict[str, Any]:
    """The stored meta JSON as a dict (empty for no meta); anything but a JSON
    object is an error (``parse_field`` reports it)."""
    if text is None or text == "":
        return {}
    value = json.loads(text) if isinstance(text, (str, bytes)) else text
    if not isinstance(value, dict):
        raise ValueError(f"meta must be a JSON object, found {type(value).__name__}")
    return value
