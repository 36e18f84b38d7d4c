"""``check``: judge a key's recorded history with the public history checker
(``lease_integrations.core.checker``), optionally with the fenced writes the
user's resource logged, and print the report with its first violation.

Why in the console: the operator who asks "did two runs ever hold this at
once?" has the store at hand, not a Python shell; the checker is the same one
the project's own race and fault tests run."""

from __future__ import annotations

import argparse
import json
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
    (``at`` optional: ISO 8601 with a zone, or POSIX seconds)."""
    writes: list[FencedWrite] = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigurationError(f"cannot read --writes {path!r}: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            at, sent = _time(row, "at"), _time(row, "sent")
            writes.append(FencedWrite(int(row["token"]), bool(row["accepted"]), at, sent))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(f"--writes {path!r} line {number}: {exc}") from None
    return writes


def _time(row: dict[str, Any], name: str) -> datetime | float | None:
    value = row.get(name)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            raise ValueError(f"{name!r} needs a time zone")
    elif value is not None and not isinstance(value, (int, float)):
        raise ValueError(f"{name!r} must be ISO 8601 or seconds")
    return value


def run_check(store: LeaseStore, args: argparse.Namespace) -> int:
    events = store.history(args.key, HISTORY_LIMIT)
    if not events and store.get(args.key) is None:
        raise exits.not_found(f"no lease {args.key!r} in {store.url}")
    writes = read_writes(args.writes) if args.writes else []
    report = check_history(events, writes, ttl=args.ttl, drift=args.drift, key=args.key,
                           history_limit=HISTORY_LIMIT)
    code = exits.OK if report.ok else exits.VIOLATION
    if args.json:
        emit_json({"store": store.url, "key": args.key, "ok": report.ok, "grants": report.grants,
                   "writes_accepted": report.writes_accepted, "writes_refused": report.writes_refused,
                   "violations": [{"rule": v.rule, "message": v.message, "tokens": list(v.tokens)}
                                  for v in report.violations],
                   "hazards": [{"rule": h.rule, "message": h.message, "tokens": list(h.tokens)}
                               for h in report.hazards],
                   "notes": report.notes})
        return code
    emit(f"store {store.url}")
    for line in str(report).splitlines():
        emit(line)
    return code
