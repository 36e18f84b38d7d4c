"""A Redis lease's history as ``LeaseEvent``s, from both layouts.

The scripts append each event to the key's Stream (``…:log``) as plain
field/value pairs; the event is built here, on the reading side, so the
server formats and encodes nothing on the hot path. Earlier versions kept a
list of JSON texts (``…:hist``); a process of such a version still running
during a rolling upgrade appends there, so both are read and merged by
time, newest ``limit`` kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from ..core.store import TOOK_OVER, LeaseEvent

#: Fields an entry may carry besides kind, token and holder, and how each
#: becomes part of the event's ``detail``.
_META, _BY, _DETAIL, _TOOK_TOKEN, _TOOK_HOLDER = "meta", "by", "detail", "took_token", "took_holder"


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000.0, timezone.utc)


def from_entry(key: str, entry_id: str, fields: dict[str, str]) -> LeaseEvent:
    """One Stream entry as an event; raises ValueError/KeyError on garbage."""
    detail: dict[str, Any] = json.loads(fields[_DETAIL]) if _DETAIL in fields else {}
    if _META in fields:
        detail["meta"] = json.loads(fields[_META])
    if _TOOK_TOKEN in fields:
        detail[TOOK_OVER] = {"token": int(fields[_TOOK_TOKEN]),
                             "holder": fields.get(_TOOK_HOLDER)}
    if _BY in fields:
        detail["by"] = fields[_BY]
    return LeaseEvent(key, fields["kind"], int(fields["token"]),  # type: ignore[arg-type]
                      fields.get("holder"), _at(int(entry_id.partition("-")[0])), detail)


def from_json(key: str, line: str) -> LeaseEvent:
    """One event of the earlier layout's list; raises on garbage."""
    e = json.loads(line)
    return LeaseEvent(key, e["kind"], int(e["token"]), e["holder"], _at(int(e["at"])),
                      e.get("detail") or {})


def events(key: str, entries: Iterable[tuple[str, dict[str, str]]], old_lines: Iterable[str],
           limit: int) -> list[LeaseEvent]:
    """The newest ``limit`` events, oldest first. ``entries`` come newest
    first (``XREVRANGE``), ``old_lines`` oldest first (``LRANGE``). A garbage
    entry hides itself, not the rest."""
    new: list[LeaseEvent] = []
    for entry_id, fields in entries:
        try:
            new.append(from_entry(key, entry_id, fields))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    new.reverse()
    old: list[LeaseEvent] = []
    for line in old_lines:
        try:
            old.append(from_json(key, line))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    if not old:
        return new[-limit:]
    # Times are milliseconds: within one, a larger token came later, and a
    # token's grant came before whatever ended it.
    merged = sorted(old + new, key=lambda e: (e.at, e.token, e.kind != "acquired"))
    return merged[-limit:]


def fields_of(kind: str, holder: str | None, token: int, detail: dict[str, Any]) -> list[str]:
    """An event recorded by the client (``record_event``) as the field/value
    pairs of its Stream entry."""
    out = ["kind", kind, "token", str(int(token))]
    if holder is not None:
        out += ["holder", holder]
    if detail:
        out += [_DETAIL, json.dumps(detail, default=str)]
    return out
