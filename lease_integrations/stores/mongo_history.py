"""A MongoDB lease's history: a capped array inside the lease document,
appended by the same pipeline update that changes the lease.

Writing the event in the lease's own update makes it atomic with the change
it records (no event without its change, no change without its event) and
keeps acquire and release at one round trip each. The array is capped in the
same update (``$concatArrays`` then ``$slice: -HISTORY_LIMIT``): the
``$push`` modifiers ``$each``/``$slice`` would do the same, but a classic
update cannot read ``$$NOW`` nor compute the next token, and MongoDB does not
mix the two kinds of update in one write.

Each event is one JSON text, ``[kind, token, at_ms, holder, detail]``, built
by the server (``at_ms`` is ``$$NOW``, the token the one it just set). Text,
not a sub-document, because on mongoeco's MongoDB-wire server (the test
server) every update pays for every value in the document: with 100
sub-document events an acquire took ~40 ms, with 100 strings ~10 ms (no
history: ~7 ms). On MongoDB itself the text is also the smaller document.
A full history is at most about 100 x (4 KB of meta + 100 bytes), far below
MongoDB's 16 MB document limit.

Events of a database written by an older version (one document per event in
``<collection>_events``) are read beside the array, never moved nor lost;
see ``legacy_events``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from ..core.record import parse_field
from ..core.store import HISTORY_LIMIT, EventList, LeaseEvent, checked_event, readable_events

log = logging.getLogger("lease_integrations")

FIELD = "history"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The document's token as JSON text (``null`` if someone wrote a non-number).
TOKEN_OF_DOC = {"$cond": [{"$isNumber": "$token"}, {"$toString": {"$toLong": "$token"}},
                          "null"]}
#: The document's holder as a JSON string: quotes and backslashes escaped on
#: the server; control characters stay raw, which ``json.loads(strict=False)``
#: reads back.
HOLDER_OF_DOC = {"$cond": [
    {"$eq": [{"$type": "$holder"}, "string"]},
    {"$concat": ['"', {"$replaceAll": {
        "input": {"$replaceAll": {"input": "$holder", "find": "\\", "replacement": "\\\\"}},
        "find": '"', "replacement": '\\"'}}, '"']},
    "null"]}


def as_json(value: Any) -> dict[str, Any]:
    """A client-side value as JSON text, literal in a pipeline (a text that
    starts with ``$`` would otherwise be read as a field path)."""
    return {"$literal": json.dumps(value, default=str, separators=(",", ":"))}


#: The ``took_over`` part of an acquired event's detail, as JSON text to put
#: before the detail's closing brace: empty when the document names no holder
#: (free or new), else the token and holder it still names (a held lease that
#: expired). Evaluated in the stage that replaces the holder, which reads the
#: document as it was.
TOOK_OVER_OF_DOC = {"$cond": [
    {"$eq": [{"$ifNull": ["$holder", None]}, None]}, "",
    {"$concat": [',"took_over":{"token":', TOKEN_OF_DOC, ',"holder":', HOLDER_OF_DOC, "}"]}]}


#: The document's field that keeps its grant's meta as JSON text.
META_TEXT = "meta_text"


def meta_of_doc(separator: str) -> dict[str, Any]:
    """Pipeline expression: ``<separator>"meta":<the grant's meta>`` for a
    ``detail_tail``, or nothing for a document written before ``META_TEXT``
    was. A release or break event carries its grant's meta, which places it
    in its DAG on the Leases page once the ``acquired`` event is trimmed."""
    return {"$cond": [{"$eq": [{"$type": f"${META_TEXT}"}, "string"]},
                      {"$concat": [separator + '"meta":', f"${META_TEXT}"]}, ""]}


def append(kind: str, token: Any, holder: Any, detail: Mapping[str, Any],
           detail_tail: Any = None) -> dict[str, Any]:
    """Pipeline expression: the history with one event appended, capped.
    ``token`` and ``holder`` are expressions that yield JSON text;
    ``detail_tail`` one that yields JSON members (``,"name":value``) added to
    ``detail`` on the server."""
    detail_json: Any = as_json(dict(detail))
    if detail_tail is not None:
        text = json.dumps(dict(detail), default=str, separators=(",", ":"))
        detail_json = {"$concat": [{"$literal": text[:-1]}, detail_tail, "}"]}
    event = {"$concat": ["[", as_json(kind), ",", token, ",",
                         {"$toString": {"$toLong": "$$NOW"}}, ",", holder, ",",
                         detail_json, "]"]}
    return {"$slice": [{"$concatArrays": [{"$ifNull": [f"${FIELD}", []]}, [event]]},
                       -HISTORY_LIMIT]}


def decode(key: str, text: Any) -> LeaseEvent:
    """One stored event; ``CorruptRecord`` for one that cannot be read."""
    fields = parse_field(key, "event", _fields, text)
    kind, token, at_ms, holder, detail = fields
    at = parse_field(key, "event at", lambda ms: EPOCH + timedelta(milliseconds=int(ms)), at_ms)
    return checked_event(key, kind, token or 0, holder, at, detail)


def _fields(text: Any) -> list[Any]:
    fields = json.loads(text, strict=False)
    if not isinstance(fields, list) or len(fields) != 5:
        raise ValueError("an event is a JSON array of 5 items")
    return fields


def events(key: str, stored: Iterable[Any]) -> EventList:
    """The array's events, oldest first, unreadable ones reported apart."""
    return readable_events(stored, lambda text: decode(key, text))


def legacy_events(events_collection: Any, key: str, limit: int) -> EventList:
    """The key's newest ``limit`` events in the old layout's collection, oldest
    first. The old collection is read, not migrated: a process of the older
    version may still be writing there during a rolling upgrade, and a move
    on connect would race with it."""
    docs = list(events_collection.find({"key": key}).sort([("at", -1), ("_id", -1)])
                .limit(limit))
    return readable_events(reversed(docs), lambda e: checked_event(
        key, e.get("kind"), e.get("token"), e.get("holder"), e.get("at"), e.get("detail") or {}))


def merged(new: EventList, old: EventList, limit: int) -> EventList:
    """Both layouts' events in time order (a stable sort: ties keep the old
    layout's first), the newest ``limit``."""
    events = sorted(old + new, key=lambda e: e.at)[-limit:] if old else new[-limit:]
    return EventList(events, old.unreadable + new.unreadable)
