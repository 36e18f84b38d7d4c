"""A flow run whose lease another run superseded ends **Cancelled**, naming
the run that replaced it: it was replaced on purpose, it did not crash.
(Any other loss is a Crashed run: ``crash``.)

The loss reason says only the new holder's host and pid (``broken by
supersede by host:pid``: the store's atomic break record). The flow run
behind it is in the ``superseded`` event the superseding run records right
after its break (``keeper/supersede``), with its meta (``flow_run_id``,
``flow_run_name``); it is read here within a small bound, because this runs
on the fail-stop ladder's clock, before the state write that must land.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from lease_integrations import Lease, LeaseError, LeaseStore

log = logging.getLogger("lease_integrations")

#: What the refusal's reason says when a supersede broke the lease.
MARK = "broken by supersede by "
#: How long the ``superseded`` event is looked for (it follows the break by
#: one store write): a small share of the ladder's time, which the state
#: write needs most.
READ_FOR = 0.5
POLL = 0.05


def superseded(lease: Lease) -> bool:
    """Whether ``lease`` was lost because another run superseded it."""
    return MARK in (lease.lost_reason or "")


def replaced_by(lease: Lease, store: LeaseStore | None) -> str:
    """The run that replaced ``lease``'s holder, as readable text: ``flow run
    'name' (id)`` when the history says so, else the holder it names."""
    holder = (lease.lost_reason or "").partition(MARK)[2].split(";")[0].strip() or "?"
    detail = _superseded_event(lease, store) if store is not None else None
    if detail is None:
        return f"holder {holder}"
    found = detail.get("meta")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    run_id, name = meta.get("flow_run_id"), meta.get("flow_run_name")
    by = detail.get("by", holder)
    if run_id:
        return f"flow run {name!r} ({run_id}, holder {by})" if name else \
            f"flow run {run_id} (holder {by})"
    return f"holder {by}"


def cancel_message(lease: Lease, store: LeaseStore | None) -> str:
    return (f"superseded by {replaced_by(lease, store)}: lease {lease.key!r} (token "
            f"{lease.token}) was broken by the run that replaced this one; this run's "
            "process and everything it started were stopped")


def _superseded_event(lease: Lease, store: LeaseStore) -> dict[str, Any] | None:
    deadline = time.monotonic() + READ_FOR
    while True:
        try:
            for event in reversed(store.history(lease.key, limit=20)):
                if event.kind == "superseded" and event.token == lease.token:
                    return dict(event.detail)
        except LeaseError as exc:
            log.debug("could not read who superseded %s: %s", lease.key, exc)
            return None
        if time.monotonic() + POLL > deadline:
            return None
        time.sleep(POLL)  # bounded: the event follows the break by one store write
