"""``history``: the key's recent grants, releases, breaks and losses, as a
table (exact times, tokens, holders) and as a timeline read at a glance."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import date, datetime, timezone

from ..core.errors import CorruptRecord
from ..core.store import LeaseEvent, LeaseStore
from . import exits
from .render import (
    clock,
    emit,
    emit_json,
    event_detail,
    event_json,
    expires_phrase,
    meta_summary,
    print_table,
    record_json,
    short_holder,
    span,
    took_over,
    unreadable_json,
)

MARKS = {"acquired": "+", "released": "-", "broken": "!", "lost": "x", "expired": "~",
         "superseded": ">"}
HEADERS = ("AT (UTC)", "EVENT", "TOKEN", "HOLDER", "DETAIL")


def run_history(store: LeaseStore, args: argparse.Namespace) -> int:
    unreadable: CorruptRecord | None = None
    try:
        record = store.get(args.key)
    except CorruptRecord as exc:  # the events may still read: show them
        record, unreadable = None, exc
    events = store.history(args.key, args.n)
    bad_events = list(getattr(events, "unreadable", ()))
    if record is None and unreadable is None and not events and not bad_events:
        raise exits.not_found(f"no lease {args.key!r} in {store.url}")
    code = exits.OK if unreadable is None and not bad_events else exits.UNREADABLE
    if args.json:
        current = (unreadable_json(unreadable) if unreadable is not None
                   else record_json(record) if record else None)
        emit_json({"store": store.url, "key": args.key, "current": current,
                   "events": [event_json(e) for e in events],
                   "unreadable_events": [unreadable_json(e) for e in bad_events]})
        return code
    emit(f"history of {args.key!r} in {store.url} (last {len(events)} event(s), oldest first)")
    if events:
        print_table(HEADERS, ([clock(e.at), e.kind, str(e.token), e.holder or "-",
                                event_detail(e)] for e in events))
        emit()
        emit("timeline:")
        for line in timeline(events):
            emit(f"  {line}")
    for error in bad_events:
        emit(f"UNREADABLE event: {error}")
    if record is not None:
        if record.holder is None:
            now = f"released (last token {record.token})"
        else:
            now = (f"{record.state}: token {record.token} by {short_holder(record.holder)}, "
                   f"{expires_phrase(record)}")
        emit(f"now: {now}")
    elif unreadable is not None:
        emit(f"now: UNREADABLE record ({unreadable})")
    return code


def timeline(events: Sequence[LeaseEvent]) -> list[str]:
    """One short line per event; spans (held 4.2s, noticed 0.9s after the
    break) are worked out from the events themselves, on the store's clock."""
    granted: dict[int, datetime] = {}
    broken: dict[int, datetime] = {}
    lines: list[str] = []
    day: date | None = None
    for event in events:
        at = event.at.astimezone(timezone.utc)
        if at.date() != day:
            day = at.date()
            lines.append(f"-- {day.isoformat()} (UTC) --")
        who = short_holder(event.holder)
        start = granted.get(event.token)
        held = f", held {span((at - start).total_seconds())}" if start else ""
        if event.kind == "acquired":
            taken = took_over(event)
            if taken is not None:  # the old lease ended here: it expired while held
                old, old_holder = taken
                # Grant to takeover is all the events tell: the holder may have
                # died at any point of it, so no "held" span is claimed.
                began = granted.get(old) if old is not None else None
                was = f"{span((at - began).total_seconds())} from its grant " if began else ""
                lines.append(f"{at.strftime('%H:%M:%S.%f')[:-3]}  "
                             f"#{old if old is not None else '?':<4} {MARKS['expired']} "
                             f"EXPIRED: {short_holder(old_holder)} never released; "
                             f"{was}until taken over by #{event.token}")
            granted[event.token] = at
            about = meta_summary(event.detail.get("meta") or {})
            text = f"granted to {who}" + (f" ({about})" if about else "")
        elif event.kind == "released":
            text = f"released by {who}{held}"
        elif event.kind == "broken":
            broken[event.token] = at
            text = f"BROKEN by {event.detail.get('by', '?')} (holder {who}{held})"
        elif event.kind == "lost":
            since = broken.get(event.token)
            if since is not None:
                after = f" {span((at - since).total_seconds())} after the break"
            elif start is not None:
                after = f" after holding it {span((at - start).total_seconds())}"
            else:
                after = ""
            text = f"LOST: {who} noticed{after}"
        else:
            text = f"{who} {event_detail(event)}".strip()
        mark = MARKS.get(event.kind, "?")
        lines.append(f"{at.strftime('%H:%M:%S.%f')[:-3]}  #{event.token:<4} {mark} {text}")
    return lines
