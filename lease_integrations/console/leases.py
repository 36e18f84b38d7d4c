"""``list`` and ``show``: who holds what, since when, and is it alive."""

from __future__ import annotations

import argparse

from ..core.store import LeaseStore
from . import exits
from .history import timeline
from .render import (
    RECORD_HEADERS,
    clock,
    dumps,
    event_json,
    expires_text,
    held_for,
    record_json,
    record_row,
    span,
    table,
)

#: Events shown under ``show``: enough to see how the current holder got it.
SHOW_EVENTS = 5


def run_list(store: LeaseStore, args: argparse.Namespace) -> int:
    records = store.list(args.prefix)
    if args.json:
        print(dumps({"store": store.url, "prefix": args.prefix,
                     "leases": [record_json(r) for r in records]}))
        return exits.OK
    where = f" with prefix {args.prefix!r}" if args.prefix else ""
    if not records:
        print(f"no leases{where} in {store.url}")
        return exits.OK
    held = sum(r.state == "held" for r in records)
    print(f"{len(records)} lease(s){where} in {store.url}, {held} held "
          f"(store clock {clock(records[0].observed_at)})")
    print(table(RECORD_HEADERS, (record_row(r) for r in records)))
    return exits.OK


def run_show(store: LeaseStore, args: argparse.Namespace) -> int:
    record = store.get(args.key)
    if record is None:
        raise exits.not_found(f"no lease {args.key!r} in {store.url}")
    events = store.history(args.key, SHOW_EVENTS)
    if args.json:
        print(dumps({"store": store.url, "lease": record_json(record),
                     "recent_events": [event_json(e) for e in events]}))
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
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        print(f"{(name + ':').ljust(width)}  {value}")
    if record.meta:
        print("meta:")
        for k, v in sorted(record.meta.items()):
            print(f"  {k} = {v}")
    if events:
        print(f"recent events (last {len(events)}):")
        for line in timeline(events):
            print(f"  {line}")
    return exits.OK
