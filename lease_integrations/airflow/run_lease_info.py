"""What every task of a DAG run knows about the run's lease, and how it finds it.

The acquire task pushes the lease (key, holder, token, ttl, store connection)
to XCom; the keeper's trigger, the work tasks and the release task read it
back, so all of them act as the *same* holder with the *same* token. The
owner secret is what lets a process renew or release; it lives in the run's
XCom (not in the DAG file) and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from lease_integrations import LeaseRecord, LeaseStore, connect
from lease_integrations.core import mask_url, resolve_url

from .connections import resolve_store_url
from .meta import run_meta

XCOM_KEY = "dag_run_lease"
#: Where the guard puts the run's lease in a work task's context.
CONTEXT_KEY = "dag_run_lease"
DEFAULT_TASK_PREFIX = "dag_run_lease"


@dataclass(frozen=True)
class DagRunLease:
    """The run's lease as its tasks see it. ``token`` is what fenced writes carry."""

    key: str
    holder: str
    token: int
    ttl: float
    heartbeat: float
    conn_id: str
    #: The store URL the acquire task used, when it carries no password (else
    #: None, and each process resolves ``conn_id`` itself). Saves the
    #: triggerer a Connection lookup (its first one can take many seconds) and
    #: pins every task of the run to the very store the lease was taken in.
    store_url: str | None = None
    #: The owner secret renew and release present (the holder name is public).
    secret: str = field(default="", repr=False)

    def to_xcom(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_xcom(cls, value: Mapping[str, Any]) -> DagRunLease:
        return cls(key=str(value["key"]), holder=str(value["holder"]), token=int(value["token"]),
                   ttl=float(value["ttl"]), heartbeat=float(value["heartbeat"]),
                   conn_id=str(value["conn_id"]), store_url=value.get("store_url"),
                   secret=str(value.get("secret") or ""))

    def connect(self) -> LeaseStore:
        """The run's store, as the acquire task reached it."""
        return connect(self.store_url if self.store_url else resolve_store_url(self.conn_id))

    def is_current(self, record: LeaseRecord | None) -> bool:
        """True iff the store still has this very lease (holder and token) unexpired."""
        return (record is not None and record.held and record.holder == self.holder
                and record.token == self.token)

    def why_not_current(self, record: LeaseRecord | None) -> str:
        """A log-ready reason, naming whoever has the lease now."""
        if record is None:
            return "the store has no record of it"
        if record.token != self.token:
            return f"taken over with token {record.token} by {record.holder or 'nobody (released)'}"
        if record.holder is None:
            return "released or broken from outside"
        if not record.held:
            return "expired without a renewal (is the keeper running?)"
        return "held by another holder"


def shareable_url(url: str | None) -> str | None:
    """``url`` (None: the default store) as a full URL, or None if it holds a
    password (which must not be copied into XCom or trigger arguments)."""
    resolved = resolve_url(url)
    return resolved if mask_url(resolved) == resolved else None


def dag_run_lease_of(context: Mapping[str, Any],
                     acquire_task_id: str = f"{DEFAULT_TASK_PREFIX}_acquire") -> DagRunLease | None:
    """The run's lease, from any task of the run (None if the run took none).

    Tasks inside ``dag_run_lease(...)`` already find it in their context; other
    tasks pull it from the acquire task's XCom (name that task if the lease was
    declared with another ``task_prefix`` or inside a task group)."""
    found = context.get(CONTEXT_KEY)
    if isinstance(found, DagRunLease):
        return found
    value = context["ti"].xcom_pull(task_ids=acquire_task_id, key=XCOM_KEY)
    return DagRunLease.from_xcom(value) if value else None


def run_holder_meta(context: Mapping[str, Any]) -> dict[str, Any]:
    """The holder's meta names the DAG run, not a task: the run holds the lease."""
    return {**run_meta(context), "scope": "dag_run"}
