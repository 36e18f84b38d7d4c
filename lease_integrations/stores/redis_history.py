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

from ..core.record import parse_field
from ..core.store import TOOK_OVER, EventList, LeaseEvent, checked_event, readable_events

#: Fields an entry may carry besides kind, token and holder, and how each
#: becomes part of the event's ``detail``.
_META, _BY, _DETAIL, _TOOK_TOKEN, _TOOK_HOLDER = "meta", "by", "detail", "took_token", "took_holder"


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000.0, timezone.utc)


def from_entry(key: str, entry_id: str, fields: dict[str, str]) -> LeaseEvent:
    """One Stream entry as an event; ``CorruptRecord`` naming the field on garbage."""
    detail = parse_field(key, "event detail", _detail_of_entry, fields)
    at = parse_field(key, "event at", lambda i: _at(int(i.partition("-")[0])), entry_id)
    return checked_event(key, fields.get("kind"), fields.get("token"), fields.get("holder"), at,
                         detail)


def _detail_of_entry(fields: dict[str, str]) -> dict[str, Any]:
    detail = json.loads(fields[_DETAIL]) if _DETAIL in fields else {}
    if not isinstance(detail, dict):
        raise ValueError(f"detail must be a JSON object, found {type(detail).__name__}")
    if _META in fields:
        detail["meta"] = json.loads(fields[_META])
    if _TOOK_TOKEN in fields:
        detail[TOOK_OVER] = {"token": int(fields[_TOOK_TOKEN]),
                             "holder": fields.get(_TOOK_HOLDER)}
    if _BY in fields:
        detail["by"] = fields[_BY]
    return detail


def from_json(key: str, line: str) -> LeaseEvent:
    """One event of the earlier layout's list; ``CorruptRecord`` on garbage."""
    e = parse_field(key, "event", _object, line)
    at = parse_field(key, "event at", lambda ms: _at(int(ms)), e.get("at"))
    return checked_event(key, e.get("kind"), e.get("token"), e.get("holder"), at,
                         e.get("detail") or {})


def _object(line: str) -> dict[str, Any]:
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError(f"an event is a JSON object, found {type(value).__name__}")
    return value


def events(key: str, entries: Iterable[tuple[str, dict[str, str]]], old_lines: Iterable[str],
           limit: int) -> EventList:
    """The newest ``limit`` events, oldest first. ``entries`` come newest
    first (``XREVRANGE``), ``old_lines`` oldest first (``LRANGE``). A garbage
    entry hides itself, not the rest, and is reported in ``unreadable``."""
    new = readable_events(reversed(list(entries)), lambda e: from_entry(key, *e))
    old = readable_events(old_lines, lambda line: from_json(key, line))
    unreadable = old.unreadable + new.unreadable
    if not old:
        return EventList(new[-limit:], unreadable)
    # Times are milliseconds: within one, a larger token came later, and a
    # token's grant came before whatever ended it.
    merged = sorted(old + new, key=lambda e: (e.at, e.token, e.kind != "acquired"))
    return EventList(merged[-limit:], unreadable)


def fields_of(kind: str, holder: str | None, token: int, detail: dict[str, Any]) -> list[str]:
    """An event recorded by the client (``record_event``) as the field/value
    pairs of its Stream entry."""
    out = ["kind", kind, "token", str(int(token))]
    if holder is not None:
        out += ["holder", holder]
    if detail:
        out += [_DETAIL, json.dumps(detail, default=str)]
    return out
