"""``check``: judge a key's recorded history with the public history checker
(``lease_integrations.core.checker``), optionally with the fenced writes the
user's resource logged, and print the report with its first violation.

Why in the console: the operator who asks "did two runs ever hold this at
once?" has the store at hand, not a Python shell; the checker is the same one
the project's own race and fault tests run."""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.checker import FencedWrite, check_history
from ..core.errors import ConfigurationError
from ..core.store import HISTORY_LIMIT, LeaseStore
from . import exits
from .render import emit, emit_json


def read_writes(path: str) -> list[FencedWrite]:
    """Fenced writes from a JSON-lines file, in the order the resource decided
    them: ``{"token": 7, "accepted": true, "at": "2025-01-01T00:00:00+00:00"}``
    (``at`` optional: ISO 8601 with a zone, or POSIX seconds). Every field is
    checked for its exact type: a verdict read loosely (``"false"`` taken as
    true, a NaN time that no comparison catches) would switch a safety rule
    off without a word."""
    writes: list[FencedWrite] = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigurationError(f"cannot read --writes {path!r}: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            writes.append(_write(line))
        except RecursionError:
            raise ConfigurationError(
                f"--writes {path!r} line {number}: nested too deeply to be a write") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(f"--writes {path!r} line {number}: {exc}") from None
    return writes


def _write(line: str) -> FencedWrite:
    row = json.loads(line, parse_constant=_no_constant)
    if not isinstance(row, dict):
        raise ValueError(f"a write is a JSON object, found {type(row).__name__}")
    token, accepted = row["token"], row["accepted"]
    if isinstance(token, bool) or not isinstance(token, int):
        raise ValueError(f"'token' must be an integer, found {token!r:.40}")
    if not isinstance(accepted, bool):
        raise ValueError(f"'accepted' must be true or false, found {accepted!r:.40}")
    return FencedWrite(token, accepted, _time(row, "at"), _time(row, "sent"))


def _time(row: dict[str, Any], name: str) -> datetime | float | None:
    value = row.get(name)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            raise ValueError(f"{name!r} needs a time zone")
    elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                or not math.isfinite(value)):
        raise ValueError(f"{name!r} must be ISO 8601 with a zone or a finite number of seconds")
    return value


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def run_check(store: LeaseStore, args: argparse.Namespace) -> int:
    events = store.history(args.key, HISTORY_LIMIT)
    if not events and store.get(args.key) is None:
        raise exits.not_found(f"no lease {args.key!r} in {store.url}")
    writes = read_writes(args.writes) if args.writes else []
    report = check_history(events, writes, ttl=args.ttl, drift=args.drift, key=args.key,
                           history_limit=HISTORY_LIMIT)
    code = exits.OK if report.ok else exits.VIOLATION
    unreadable = list(getattr(events, "unreadable", ()))
    if unreadable and code == exits.OK:  # the verdict did not see every event
        code = exits.UNREADABLE
    if args.json:
        emit_json({"store": store.url, "key": args.key, "ok": report.ok, "grants": report.grants,
                   "writes_accepted": report.writes_accepted, "writes_refused": report.writes_refused,
                   "violations": [{"rule": v.rule, "message": v.message, "tokens": list(v.tokens)}
                                  for v in report.violations],
                   "hazards": [{"rule": h.rule, "message": h.message, "tokens": list(h.tokens)}
                               for h in report.hazards],
                   "notes": report.notes, "unreadable_events": [str(e) for e in unreadable]})
        return code
    emit(f"store {store.url}")
    for line in str(report).splitlines():
        emit(line)
    for error in unreadable:
        emit(f"UNREADABLE event, not checked: {error}")
    return code
