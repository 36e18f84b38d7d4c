"""What each route does with the store, under the rules of ``rules.py``: the
same steps for the Airflow 3 app and the Airflow 2.11 view, which differ only
in how a request arrives and how an answer leaves."""

from __future__ import annotations

import json
from typing import Any

from lease_integrations.console.render import event_json, finite_json, record_json
from lease_integrations.core import ConfigurationError, LeaseError, LeaseEvent, LeaseRecord

from .rules import Access, Refused, dag_of, not_found, require_intent, user_name
from .store_source import StoreSource, open_store

HISTORY_LIMIT = 100
#: What one history read asks the store for: all it keeps of a key (100
#: events; the most the JSON route's ``limit`` allows, were that ever more).
STORE_HISTORY = 1000


def leases(access: Access, prefix: str) -> tuple[list[LeaseRecord], StoreSource]:
    access.require_page()
    with open_store() as (store, source):
        return access.records(store.list(prefix)), source


def lease(access: Access, key: str) -> LeaseRecord:
    access.require_page()
    with open_store() as (store, _):
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
    with open_store() as (store, source):
        record, events = store.get(key), store.history(key, STORE_HISTORY)
    unreadable = len(getattr(events, "unreadable", ()))
    shown = access.events(events, record)[-limit:]
    if not access.may_learn_exists(record):
        record = None
    if record is None and not shown:
        raise not_found(key)
    return record, shown, unreadable, source


def dag_leases(access: Access, dag_id: str) -> tuple[list[LeaseRecord], StoreSource]:
    access.require_dag(dag_id)
    with open_store() as (store, source):
        records = store.list()
    return [r for r in records if r.holder is not None and dag_of(r.meta, r.holder) == dag_id], source


def breakable(access: Access, key: str) -> tuple[LeaseRecord, StoreSource]:
    """Step one of a break: the held record the user may break, to confirm."""
    access.require_break_permission()
    with open_store() as (store, source):
        record = store.get(key)
    if record is None or record.holder is None or not access.may_break(record):
        raise not_found(key, "no held lease")
    return record, source


def break_lease(access: Access, secret: bytes, key: str, token: int | None, *,
                header: str | None, confirm: str | None) -> tuple[LeaseRecord, StoreSource]:
    """Break exactly the record whose DAG was checked: the store's break is
    conditional on that record's token, in one atomic step, so a holder that
    took the key after the read (of another DAG, even) is never broken, and a
    key with no record is never broken at all. Nothing read after the break
    is shown: it could be another DAG's record."""
    access.require_break_permission()
    require_intent(secret, access.user, key, token, header=header, confirm=confirm)
    with open_store() as (store, source):
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
    records, source = leases(access, prefix)
    return {"store": source.masked_url, "found_through": source.origin,
            "may_break": access.may_break_leases(), "leases": [record_json(r) for r in records]}


def history_json(access: Access, key: str, limit: int) -> dict[str, Any]:
    _, events, unreadable, _ = key_history(access, key, limit)
    return {"key": key, "events": [event_json(e) for e in events], "unreadable_events": unreadable}


def dag_json(access: Access, dag_id: str) -> dict[str, Any]:
    records, _ = dag_leases(access, dag_id)
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
