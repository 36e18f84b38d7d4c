"""Input checks that run before any work: a bad key, ttl or policy must stop a
job before it touches a lease record, with an error naming the bad value."""

from __future__ import annotations

import math
import re
from typing import Final

from .errors import ConfigurationError

#: Keys are printed in logs and CLIs, used as Redis keys, SQL values and Mongo
#: ids: one conservative character set keeps them portable and unambiguous.
KEY_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@=+-]*")
KEY_MAX_LENGTH: Final = 200
#: Below this a heartbeat cannot renew reliably across a real network.
MIN_TTL: Final = 0.5
MAX_TTL: Final = 7 * 24 * 3600.0

ON_LOST_POLICIES: Final = ("interrupt", "check")
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
        raise ConfigurationError(f"{name}={value!r} is not a valid policy; choose one of {choices}")
    return str(value)
