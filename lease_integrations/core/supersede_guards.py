"""Guards for ``supersede``: may this run replace the holder?

A guard is ``supersede_if(holder_meta, new_meta) -> bool``, called with the
holder's record meta and the new run's (both plain JSON dicts, see
``validate_meta``); False leaves the holder alone. Without a guard any run
replaces any holder, so a backfill of last month would displace today's
run: the ready-made guards here say what a scheduler user usually means.

    lock.hold(supersede=True, supersede_if=only_newer("logical_date"),
              meta={"logical_date": "2026-12-04T00:00:00+00:00"})
    lock.hold(supersede=True, supersede_if=only_same("params"),
              meta={"params": {"region": "eu"}})

Both refuse whenever the field is missing or the values cannot be compared:
a guard that cannot tell must not stop a running job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from .errors import ConfigurationError

#: ``supersede_if(holder_meta, new_meta)``: may the new run replace the holder?
SupersedeGuard = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


def validate_guard(guard: object, supersede: bool = True) -> SupersedeGuard | None:
    """``guard`` if it is None or callable (and given with ``supersede``),
    else ``ConfigurationError``: a guard left unused would read as a promise."""
    if guard is not None and not callable(guard):
        raise ConfigurationError(
            f"supersede_if must be a callable (holder_meta, new_meta) -> bool, got {guard!r}")
    if guard is not None and not supersede:
        raise ConfigurationError("supersede_if only applies with supersede=True")
    return guard  # type: ignore[return-value]


def only_newer(field: str = "logical_date") -> SupersedeGuard:
    """Replace the holder only if the new run's ``field`` is later: a logical
    date or data interval (ISO 8601 text, with or without a zone), a
    partition name that sorts (``2026-12-04``, ``p0007``), or a number. A
    backfill of an older date, or a rerun of the same one, is refused."""
    _check_field(field)

    def guard(holder: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        old_value, new_value = _comparable(holder.get(field)), _comparable(new.get(field))
        if isinstance(old_value, datetime) and isinstance(new_value, datetime):
            return new_value > old_value
        if isinstance(old_value, float) and isinstance(new_value, float):
            return new_value > old_value
        if isinstance(old_value, str) and isinstance(new_value, str):
            return new_value > old_value
        return False  # missing, or of two kinds: cannot tell

    guard.__name__ = f"only_newer({field!r})"
    return guard


def only_same(*fields: str) -> SupersedeGuard:
    """Replace the holder only if the new run carries the same values of
    ``fields`` (default ``params``): a restart of the same job with the same
    parameters, never a different job that shares the key."""
    names = fields or ("params",)
    for name in names:
        _check_field(name)

    def guard(holder: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return all(name in holder and name in new and holder[name] == new[name]
                   for name in names)

    guard.__name__ = f"only_same({', '.join(map(repr, names))})"
    return guard


def _check_field(field: object) -> None:
    if not isinstance(field, str) or not field:
        raise ConfigurationError(f"a guard's field must be a meta key (text), got {field!r}")


def _comparable(value: Any) -> datetime | float | str | None:
    """A value the guard can order: a number, a time (as UTC), or text."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value  # a partition name: ordered as text
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
