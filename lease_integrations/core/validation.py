"""Input checks that run before any work: a bad key, ttl or policy must stop a
job before it touches a lease record, with an error naming the bad value."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from .errors import ConfigurationError
from .text import printable

#: Keys are printed in logs and CLIs, used as Redis keys, SQL values and Mongo
#: ids: one conservative character set keeps them portable and unambiguous.
KEY_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@=+-]*")
KEY_MAX_LENGTH: Final = 200
#: Below this a heartbeat cannot renew reliably across a real network.
MIN_TTL: Final = 0.5
MAX_TTL: Final = 7 * 24 * 3600.0

#: Meta is copied into the record and into every history event, and shown by
#: leasectl: a few fields about the holder, not a payload.
META_MAX_BYTES: Final = 4096
META_MAX_DEPTH: Final = 16
#: Every store keeps integers exactly within 64 bits (BSON int64, jsonb,
#: SQLite INTEGER); beyond that one store would refuse what another rounds.
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**63 - 1

#: What a loss does to a running block: ``exit`` ends the process (the
#: default), ``check`` only reports it, ``cancel`` cancels a ``hold_async()`` task.
ON_LOST_POLICIES: Final = ("exit", "check", "cancel")
ON_BUSY_POLICIES: Final = ("skip", "fail", "wait")


def validate_key(key: object) -> str:
    if not isinstance(key, str):
        raise ConfigurationError(f"lease key must be a string, got {type(key).__name__}: {key!r}")
    if not key:
        raise ConfigurationError("lease key must not be empty")
    if len(key) > KEY_MAX_LENGTH:
        raise ConfigurationError(
            f"lease key {key[:40]!r}... is {len(key)} characters; the limit is {KEY_MAX_LENGTH}"
        )
    if not KEY_PATTERN.fullmatch(key):
        raise ConfigurationError(
            f"lease key {key!r} has characters outside the safe set: it must start with a "
            "letter or digit and use only letters, digits and . _ : / @ = + -"
        )
    return key


def validate_ttl(ttl: object, name: str = "ttl") -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise ConfigurationError(f"{name} must be a number of seconds, got {ttl!r}")
    value = float(ttl)
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {ttl!r}")
    if value < MIN_TTL:
        raise ConfigurationError(
            f"{name}={ttl!r} is too short: the minimum is {MIN_TTL} s, "
            "below which a heartbeat cannot renew in time"
        )
    if value > MAX_TTL:
        raise ConfigurationError(f"{name}={ttl!r} is longer than the maximum of {MAX_TTL:.0f} s")
    return value


def validate_heartbeat(interval: object, ttl: float) -> float:
    if interval is None:
        return ttl / 3.0
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        raise ConfigurationError(f"heartbeat must be a number of seconds, got {interval!r}")
    value = float(interval)
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"heartbeat must be positive, got {interval!r}")
    if value >= ttl / 2:
        raise ConfigurationError(
            f"heartbeat={interval!r} must be shorter than half the ttl ({ttl / 2:g} s), "
            "or one missed renewal loses the lease"
        )
    return value


def validate_wait(wait: object) -> float | None:
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        raise ConfigurationError(f"wait must be None, 0 or a number of seconds, got {wait!r}")
    value = float(wait)
    if math.isnan(value) or value < 0:
        raise ConfigurationError(f"wait must be >= 0 seconds, got {wait!r}")
    return value


def validate_policy(value: object, allowed: tuple[str, ...], name: str) -> str:
    if value not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        hint = (" ('interrupt' was replaced by 'exit': a lost lease ends the process)"
                if value == "interrupt" and "exit" in allowed else "")
        raise ConfigurationError(
            f"{name}={value!r} is not a valid policy; choose one of {choices}{hint}")
    return str(value)


def validate_on_lost(value: object, *, runs_async: bool, subject: str = "code") -> str:
    """The loss policy, for code that runs on a thread or in an asyncio task:
    ``cancel`` needs a task to cancel, and a thread cannot be cancelled. One
    rule for ``hold()``, Airflow tasks and Prefect flows alike."""
    policy = validate_policy(value, ON_LOST_POLICIES, "on_lost")
    if policy == "cancel" and not runs_async:
        raise ConfigurationError(
            f"on_lost='cancel' applies to async {subject} only (hold_async()): a thread "
            "cannot be cancelled; use 'exit' or 'check'")
    return policy


def validate_meta(meta: object, name: str = "meta") -> dict[str, Any]:
    """A plain copy of ``meta`` if it is a JSON object every store keeps
    alike, else ``ConfigurationError`` naming the key path and the problem.

    Rules: a dict with ``str`` keys whose values are ``None``, ``bool``,
    ``int`` (64-bit), finite ``float``, ``str``, or lists/dicts of those
    (nested at most ``META_MAX_DEPTH`` deep); no ``\\x00`` in any key or
    string (PostgreSQL's jsonb cannot store it, so it is refused everywhere)
    and no lone surrogate (no UTF-8 form);
    at most ``META_MAX_BYTES`` as compact UTF-8 JSON. Checked before any
    store call, so a bad value is a configuration error, never an outage,
    and never reaches a record. A huge value is refused as soon as the walk
    has seen more than the limit, without encoding it."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise ConfigurationError(
            f"{name} must be a dict (a JSON object), got {type(meta).__name__}")
    budget = [META_MAX_BYTES]
    plain = _json_value(meta, name, 0, budget)
    encoded = json.dumps(plain, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    size = len(encoded.encode("utf-8"))
    if size > META_MAX_BYTES:
        raise ConfigurationError(
            f"{name} is {size} bytes as JSON; the limit is {META_MAX_BYTES} (it is copied into "
            "every history event: keep it to a few fields about the holder)")
    result: dict[str, Any] = plain
    return result


def _spend(budget: list[int], n: int, path: str) -> None:
    budget[0] -= n
    if budget[0] < 0:
        raise ConfigurationError(
            f"{path} makes meta larger than {META_MAX_BYTES} bytes as JSON; keep meta to a few "
            "fields about the holder")


def _check_encodable(text: str, path: str) -> None:
    """A lone surrogate (what a ``"\\ud800"`` JSON escape decodes to) has no
    UTF-8 form: no store keeps it alike, and no terminal or web page can print
    it. Refused here as the configuration error it is, never a
    ``UnicodeEncodeError`` from deep inside a store or a printer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigurationError(
            f"{path} contains a lone surrogate ({printable(text[exc.start])} at position "
            f"{exc.start}), which cannot be stored as UTF-8") from None


def _json_value(value: object, path: str, depth: int, budget: list[int]) -> Any:
    if value is None or isinstance(value, bool):
        _spend(budget, 4, path)
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise ConfigurationError(f"{path} is an integer outside 64 bits; store it as a string")
        _spend(budget, 1, path)
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigurationError(f"{path} is {value!r}; JSON has no NaN or infinity")
        _spend(budget, 1, path)
        return float(value)
    if isinstance(value, str):
        _spend(budget, len(value), path)
        if "\x00" in value:
            raise ConfigurationError(f"{path} contains a NUL character (\\x00)")
        _check_encodable(value, path)
        return str(value)
    if depth >= META_MAX_DEPTH:
        raise ConfigurationError(f"{path} is nested more than {META_MAX_DEPTH} levels deep")
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigurationError(
                    f"{path} has the key {k!r} of type {type(k).__name__}; JSON keys are strings")
            child = f"{path}[{k[:40]!r}]"
            _spend(budget, len(k) + 3, child)
            if "\x00" in k:
                raise ConfigurationError(f"{child}: the key contains a NUL character (\\x00)")
            _check_encodable(k, f"{child}: the key")
            out[str(k)] = _json_value(v, child, depth + 1, budget)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_value(v, f"{path}[{i}]", depth + 1, budget) for i, v in enumerate(value)]
    raise ConfigurationError(
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, not a JSON value "
        "(use str, int, float, bool, None, list or dict)")
