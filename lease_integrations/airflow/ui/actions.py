"""What each route does with the store, under the rules of ``rules.py``: the
same steps for the Airflow 3 app and the Airflow 2.11 view, which differ only
in how a request arrives and how an answer leaves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from lease_integrations import LeaseStore
from lease_integrations.console.render import event_json, finite_json, record_json
from lease_integrations.core import ConfigurationError, CorruptRecord, LeaseError, LeaseEvent, LeaseRecord

from .rules import Access, Refused, dag_of, not_found, require_intent, user_name
from .store_source import StoreSource, open_store

HISTORY_LIMIT = 100
#: What one history read asks the store for: all it keeps of a key (100
#: events; the most the JSON route's ``limit`` allows, were that ever more).
STORE_HISTORY = 1000


class HiddenStoreError(LeaseError):
    """A store error told to a user who may not read every DAG: its text
    (host, port, user name, a record's fields) is for those who may."""


@contextmanager
def opened(access: Access) -> Iterator[tuple[LeaseStore, StoreSource]]:
    """The store for one request, and where it is as this user may see it.

    Only a user who may read every DAG sees the store's host, port and user
    name, and a store error's text; others see the store's kind (issue 40,
    finding 8). A record that cannot be parsed (``CorruptRecord``) is of a
    DAG nobody can tell: such a user sees it named with its problem; to
    others the key answers as a missing one does, quoting nothing (finding
    4). Callers authorize before they open the store."""
    try:
        with open_store() as (store, source):
            yield store, source if access.may_read_all_dags() else replace(
                source, masked_url=f"a {source.kind} store")
    except CorruptRecord as exc:
        if access.may_read_all_dags():
            raise
        raise not_found(exc.key) from None
    except LeaseError as exc:
        if access.may_read_all_dags():
            raise
        kind = "configuration" if isinstance(exc, ConfigurationError) else "store"
        raise HiddenStoreError(f"the lease store cannot be used now ({kind} problem; its details "
                               "are shown to users who may read every DAG)") from None


def leases(access: Access, prefix: str) -> tuple[list[LeaseRecord], StoreSource, list[str]]:
    """The records the user may read, and the problems of those the store could
    not parse, for a user who may read every DAG (others: none, see ``opened``)."""
    access.require_page()
    with opened(access) as (store, source):
        found = store.list(prefix)
    unreadable = [str(e) for e in getattr(found, "unreadable", ())] \
        if access.may_read_all_dags() else []
    return access.records(found), source, unreadable


def lease(access: Access, key: str) -> LeaseRecord:
    access.require_page()
    with opened(access) as (store, _):
        record = store.get(key)
    if record is None or not access.may_learn_exists(record):
        raise not_found(key)
    return record


def key_history(access: Access, key: str, limit: int = HISTORY_LIMIT
                ) -> tuple[LeaseRecord | None, list[LeaseEvent], int, StoreSource]:
    """A key's record and its newest ``limit`` events the user may read: the
    whole history the store keeps is read and filtered first (the record, and
    each event on its own), then cut to ``limit``, so the window never decides
    what an event is placed by; 404, as for a missing key, when that leaves
    nothing. Also the number of events the store could not parse (shown as a
    count: their DAG cannot be told)."""
    access.require_page()
    with opened(access) as (store, source):
        record, events = store.get(key), store.history(key, STORE_HISTORY)
    unreadable = len(getattr(events, "unreadable", ()))
    shown = access.events(events, record)[-limit:]
    if not access.may_learn_exists(record):
        record = None
    if record is None and not shown:
        raise not_found(key)
    return record, shown, unreadable, source


def dag_leases(access: Access, dag_id: str, *, page_needed: bool = False
               ) -> tuple[list[LeaseRecord], StoreSource]:
    """The DAG tab: read on its DAG; ``page_needed`` adds the Leases page's
    permission (Airflow 2.11, which has no DAG tab: there the route is
    another way into the page)."""
    if page_needed:
        access.require_page()
    access.require_dag(dag_id)
    with opened(access) as (store, source):
        records = store.list()
    return [r for r in records if r.holder is not None and dag_of(r.meta, r.holder) == dag_id], source


def breakable(access: Access, key: str) -> tuple[LeaseRecord, StoreSource]:
    """Step one of a break: the held record the user may break, to confirm."""
    access.require_break_permission()
    with opened(access) as (store, source):
        record = store.get(key)
    if record is None or record.holder is None or not access.may_break(record):
        raise not_found(key, "no held lease")
    return record, source


def break_lease(access: Access, secret: bytes, key: str, token: int | None, *,
                header: str | None, confirm: str | None, header_honoured: bool = True
                ) -> tuple[LeaseRecord, StoreSource]:
    """Break exactly the record whose DAG was checked: the store's break is
    conditional on that record's token, in one atomic step, so a holder that
    took the key after the read (of another DAG, even) is never broken, and a
    key with no record is never broken at all. Nothing read after the break
    is shown: it could be another DAG's record."""
    access.require_break_permission()
    require_intent(secret, access.user, key, token, header=header, confirm=confirm,
                   header_honoured=header_honoured)
    with opened(access) as (store, source):
        current = store.get(key)
        if current is None or current.holder is None or not access.may_break(current):
            raise not_found(key, "nothing was broken: no held lease")
        if token is not None and token != current.token:
            raise changed_hands(key, token)
        before = store.force_release(key, user_name(access.user), token=current.token)
        if before is None:
            raise changed_hands(key, current.token)
    return before, source


def changed_hands(key: str, token: int) -> Refused:
    return Refused(409, f"lease {key!r} is no longer held on token {token}; nothing broken, "
                        "look again")


def ascii_json(content: Any) -> bytes:
    """JSON with every non-ASCII character as a ``\\uXXXX`` escape, as
    ``leasectl --json`` prints it: stored meta may hold a lone surrogate (any
    store client can write one), which has no UTF-8 form; a NaN (a
    hand-written event) is served as text."""
    try:
        text = json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except ValueError:
        text = json.dumps(finite_json(content), ensure_ascii=True, allow_nan=False,
                          separators=(",", ":"))
    return text.encode("ascii")


# -- the JSON answers, the same on both faces -----------------------------------
def leases_json(access: Access, prefix: str) -> dict[str, Any]:
    records, source, unreadable = leases(access, prefix)
    return {"store": source.masked_url, "found_through": source.origin,
            "may_break": access.may_break_leases(), "leases": [record_json(r) for r in records],
            "unreadable": unreadable}


def history_json(access: Access, key: str, limit: int) -> dict[str, Any]:
    _, events, unreadable, _ = key_history(access, key, limit)
    return {"key": key, "events": [event_json(e) for e in events], "unreadable_events": unreadable}


def dag_json(access: Access, dag_id: str, *, page_needed: bool = False) -> dict[str, Any]:
    records, _ = dag_leases(access, dag_id, page_needed=page_needed)
    return {"dag_id": dag_id, "leases": [record_json(r) for r in records]}


def break_json(before: LeaseRecord | None, key: str, by: str) -> dict[str, Any]:
    return {"key": key, "broken": before is not None, "by": by,
            "before": None if before is None else record_json(before)}


def store_error_text(exc: LeaseError) -> str:
    """A store that cannot be reached (or a bad Connection) is the store's
    problem, not the page's: the faces answer 503 with this (the error's text
    masks the URL's password)."""
    kind = "configuration" if isinstance(exc, ConfigurationError) else "store"
    return f"lease {kind} error: {exc}"
