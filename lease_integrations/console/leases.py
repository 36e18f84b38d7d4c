"""``list`` and ``show``: who holds what, since when, and is it alive.

A key whose stored record cannot be parsed (a field overwritten by hand) is
shown as UNREADABLE beside the others: one bad record must not hide every
other lease from the operator at 3 a.m."""

from __future__ import annotations

import argparse
from typing import Any

from ..core.errors import CorruptRecord
from ..core.store import LeaseStore
from . import exits
from .history import timeline
from .render import (
    RECORD_HEADERS,
    clock,
    emit,
    emit_json,
    event_json,
    expires_text,
    held_for,
    print_table,
    record_json,
    record_row,
    span,
    unreadable_json,
    unreadable_row,
)

#: Events shown under ``show``: enough to see how the current holder got it.
SHOW_EVENTS = 5


def run_list(store: LeaseStore, args: argparse.Namespace) -> int:
    records = store.list(args.prefix)
    # Stores report keys they could not parse in ``unreadable`` (a RecordList).
    unreadable: list[Any] = list(getattr(records, "unreadable", ()))
    if args.json:
        emit_json({"store": store.url, "prefix": args.prefix,
                   "leases": [record_json(r) for r in records],
                   "unreadable": [unreadable_json(e) for e in unreadable]})
        return exits.OK
    where = f" with prefix {args.prefix!r}" if args.prefix else ""
    if not records and not unreadable:
        emit(f"no leases{where} in {store.url}")
        return exits.OK
    held = sum(r.state == "held" for r in records)
    bad = f", {len(unreadable)} unreadable" if unreadable else ""
    when = f" (store clock {clock(records[0].observed_at)})" if records else ""
    emit(f"{len(records) + len(unreadable)} lease(s){where} in {store.url}, {held} held{bad}{when}")
    rows = [(r.key, record_row(r)) for r in records]
    rows += [(str(getattr(e, "key", "")), unreadable_row(e, len(RECORD_HEADERS)))
             for e in unreadable]
    print_table(RECORD_HEADERS, (row for _, row in sorted(rows, key=lambda kr: kr[0])))
    if unreadable:
        emit("")  # ends the table for readers that parse it
        emit(f"unreadable: {len(unreadable)} record(s) could not be parsed; "
             "`leasectl show KEY` names the field")
    return exits.OK


def run_show(store: LeaseStore, args: argparse.Namespace) -> int:
    try:
        record = store.get(args.key)
    except CorruptRecord as exc:
        return _show_unreadable(store, args, exc)
    if record is None:
        raise exits.not_found(f"no lease {args.key!r} in {store.url}")
    events = store.history(args.key, SHOW_EVENTS)
    if args.json:
        emit_json({"store": store.url, "lease": record_json(record),
                   "recent_events": [event_json(e) for e in events]})
        return exits.OK
    renewed_ago = (None if record.renewed_at is None
                   else (record.observed_at - record.renewed_at).total_seconds())
    fields = [
        ("key", record.key),
        ("state", record.state),
        ("holder", record.holder or "- (released)"),
        ("token", str(record.token)),
        ("acquired at", f"{clock(record.acquired_at)}"
                        + (f"  (held for {span(held_for(record))})" if record.holder else "")),
        ("renewed at", f"{clock(record.renewed_at)}  ({span(renewed_ago)} ago)"),
        ("expires at", f"{clock(record.expires_at)}"
                       + (f"  (in {expires_text(record)})" if record.state == "held"
                          else f"  ({expires_text(record)})" if record.holder else "")),
        ("store clock", clock(record.observed_at)),
        ("store", store.url),
    ]
    _print_fields(fields)
    if record.meta:
        emit("meta:")
        for k, v in sorted(record.meta.items()):
            emit(f"  {k} = {v}")
    if events:
        emit(f"recent events (last {len(events)}):")
        for line in timeline(events):
            emit(f"  {line}")
    return exits.OK


def _show_unreadable(store: LeaseStore, args: argparse.Namespace, error: CorruptRecord) -> int:
    """What can be shown of a key whose record does not parse: the field and
    the parser's complaint, and its history if that still reads."""
    try:
        events = store.history(args.key, SHOW_EVENTS)
    except CorruptRecord:
        events = []
    if args.json:
        emit_json({"store": store.url, "lease": unreadable_json(error),
                   "recent_events": [event_json(e) for e in events]})
        return exits.UNREADABLE
    _print_fields([("key", args.key), ("state", "UNREADABLE"),
                   ("field", str(error.field)), ("error", str(error)), ("store", store.url)])
    if events:
        emit(f"recent events (last {len(events)}):")
        for line in timeline(events):
            emit(f"  {line}")
    return exits.UNREADABLE


def _print_fields(fields: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        emit(f"{(name + ':').ljust(width)}  {value}")
